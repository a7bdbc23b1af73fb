"""A workspace's disk quota (``diskMiB``), measured.

One ``bash`` call could fill the file system that holds the state directory, and every other
agent's Turn then failed to write its conversation. So the Tools that write a workspace
(``bash``, ``file-system``) bound it:

- the workspace's size is **measured**: a walk with ``os.scandir`` that adds up the blocks each
  file and directory holds (``st_blocks * 512``; a hard-linked inode once; other file systems
  mounted inside are not entered), bounded to :data:`MAX_ENTRIES` entries and remembered per
  workspace, so a Tool's next check reuses a fresh figure;
- ``file-system`` measures **before each write** and refuses one that would take the workspace
  past its quota with ``E_WORKSPACE_QUOTA``;
- ``bash`` measures **before the call**, then **while the program runs** (every
  :data:`WATCH_INTERVAL_SECONDS`, longer where a walk is slow) and **after it**: a program
  that takes the workspace past its quota is ended as a timed-out one is (its whole process
  group), and the call's result is ``E_WORKSPACE_QUOTA``. A workspace already over its quota
  (the quota was lowered, or a burst between two looks) may still run a call, to delete
  files, but that call may not make it any larger;
- whatever the quota, no call may leave its file system with less than
  :data:`goondan.reserve.TOOLS_FLOOR_MIB` free, or fewer than :data:`FLOOR_INODES` free
  inodes: the last of the disk is the runtime's, for conversations, approvals and the event
  log. This also bounds what the walk cannot see (a file deleted while a program holds it
  open).

Project quotas (ext4's ``prjquota``, XFS's ``pquota``) would bound the writes in the kernel;
:func:`quota_kind` says whether the file system holding a path has them, and ``doctor`` and
``python -m tools_base.sandbox probe`` print it. The measured quota applies in every case.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from goondan.errors import ToolCode
from goondan.reserve import TOOLS_FLOOR_MIB
from tools_base._context import ToolConfigError
from tools_base._result import ToolError

QUOTA = ToolCode.E_WORKSPACE_QUOTA
DEFAULT_DISK_MIB = 1024
"""``diskMiB`` when a Tool's config does not say."""
MAX_ENTRIES = 1_000_000
"""Entries one walk visits at most; past them the figure is a lower bound."""
WATCH_INTERVAL_SECONDS = 0.5
"""How often a running call's workspace is measured (at least ten walks' time apart)."""
FRESH_SECONDS = 1.0
"""How long a measured figure stands for a write's check (a write adds its own bytes)."""
FLOOR_INODES = 10_000
"""Free inodes no call may take (a disk out of inodes refuses new files as a full one does)."""
_MIB = 1024 * 1024
_SUGGESTION = (
    "Delete files the workspace no longer needs (a call may delete while over the quota), or "
    "ask the operator to raise the Tool's diskMiB."
)
_figures: dict[str, tuple[int, float, bool]] = {}
"""Workspace (real path) → (bytes, when measured, whether the walk was whole): this process's
last figure of each. A walk that stopped early gives a lower bound: enough to refuse a write,
never enough to say how much a call may leave."""


def measure(root: str, *, stop_above: int | None = None) -> int:
    """The bytes ``root`` and everything below it take on disk; a walk that passes
    ``stop_above`` stops there (the figure is then only known to be above it)."""
    try:
        top = os.lstat(root)
    except OSError:
        return 0
    total = top.st_blocks * 512
    seen: set[int] = set()
    pending = [root]
    visited = 0
    while pending and visited < MAX_ENTRIES:
        directory = pending.pop()
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                visited += 1
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if info.st_dev != top.st_dev:
                        continue  # another file system mounted inside: not this disk's
                    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                        if info.st_ino in seen:
                            continue
                        seen.add(info.st_ino)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
        if stop_above is not None and total > stop_above:
            _figures[root] = (total, time.monotonic(), False)
            return total
    _figures[root] = (total, time.monotonic(), True)
    return total


def shortage(path: str, adding: int = 0) -> str | None:
    """Why ``path``'s disk is too full for a call (``adding`` bytes more): under
    :data:`~goondan.reserve.TOOLS_FLOOR_MIB` free, or under :data:`FLOOR_INODES` free inodes
    (a state file needs one too); ``None`` when it is not."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    free = fs.f_bavail * fs.f_frsize
    if free - adding < TOOLS_FLOOR_MIB * _MIB:
        return (
            f"the disk holding the workspace has {_mib(free)} free; the last "
            f"{TOOLS_FLOOR_MIB} MiB are kept for the runtime's own files"
        )
    if fs.f_files and fs.f_favail < FLOOR_INODES:  # f_files 0: no fixed inode table
        return (
            f"the disk holding the workspace has {fs.f_favail} free inodes; the last "
            f"{FLOOR_INODES} are kept for the runtime's own files"
        )
    return None


def _mib(size: int) -> str:
    return f"{size / _MIB:.1f} MiB"


def check_write(root: str, adding: int, disk_mib: int | None) -> None:
    """Before a write of ``adding`` bytes into workspace ``root``: raise ``E_WORKSPACE_QUOTA``
    when it would take the workspace past ``disk_mib`` (``None``: no quota), or its disk below
    the floor. A figure measured in the last :data:`FRESH_SECONDS` is reused and grows by the
    write, so writes in a row walk the workspace once."""
    root = os.path.realpath(root)
    short = shortage(root, adding)
    if short is not None:
        raise _disk_full(short)
    if disk_mib is None:
        return
    limit = disk_mib * _MIB
    known = _figures.get(root)
    if known is None or time.monotonic() - known[1] >= FRESH_SECONDS:
        measure(root, stop_above=limit)
        known = _figures.get(root, (0, time.monotonic(), True))  # none: nothing there yet
    used, when, whole = known
    if used + adding > limit:
        raise ToolError(
            f"the workspace holds {_mib(used)}; writing {adding} bytes more would pass its "
            f"quota of {disk_mib} MiB",
            code=QUOTA,
            suggestion=_SUGGESTION,
        )
    _figures[root] = (used + adding, when, whole)


def _disk_full(why: str) -> ToolError:
    return ToolError(
        why,
        code=QUOTA,
        suggestion="Delete files the workspace no longer needs, or ask the operator to free "
        "space on the disk.",
    )


@dataclass
class Guard:
    """The quota of one ``bash`` call on its workspace: measured before, during and after."""

    root: str
    disk_mib: int | None
    allowance: int = 0
    """The size the call may leave: the quota, or what it found when that was more."""
    exceeded: str | None = None
    """Why the call was ended or refused (``None`` while within bounds)."""

    async def before(self) -> None:
        """Measure the workspace; raise ``E_WORKSPACE_QUOTA`` when its disk is already full."""
        await asyncio.to_thread(self._before)

    def _before(self) -> None:
        self.root = os.path.realpath(self.root)
        short = shortage(self.root)
        if short is not None:
            raise _disk_full(short)
        if self.disk_mib is not None:
            known = _figures.get(self.root)
            # Only a whole walk's figure says what the call may leave (a server started again
            # at once over its quota may keep what it holds).
            fresh = known is not None and known[2] and time.monotonic() - known[1] < FRESH_SECONDS
            used = known[0] if known is not None and fresh else measure(self.root)
            self.allowance = max(self.disk_mib * _MIB, used)

    def _look(self) -> bool:
        """One look; True (with :attr:`exceeded` said) when the call passed a bound."""
        self.exceeded = shortage(self.root)
        if self.exceeded is not None:
            return True
        if self.disk_mib is None:
            return False
        if measure(self.root, stop_above=self.allowance) > self.allowance:
            self.exceeded = (
                f"the workspace grew past {_mib(self.allowance)} (its quota is {self.disk_mib} MiB)"
            )
            return True
        return False

    async def watch(self, end_call: Callable[[], Awaitable[None]]) -> None:
        """While the call runs: look every :data:`WATCH_INTERVAL_SECONDS` (or ten walks' time,
        if longer); past a bound, ``end_call()`` and return."""
        spent = 0.0  # the first look one interval in: the workspace was just measured
        while True:
            await asyncio.sleep(max(WATCH_INTERVAL_SECONDS, spent * 10))
            started = time.monotonic()
            if await asyncio.to_thread(self._look):
                await end_call()
                return
            spent = time.monotonic() - started

    async def after(self) -> None:
        """The last look, once the program has ended."""
        if self.exceeded is None:
            await asyncio.to_thread(self._look)

    def error(self, output: str) -> ToolError:
        """The call's result when it passed a bound (``output``: what it printed, cut)."""
        said = f"; it printed: {output}" if output else ""
        return ToolError(
            f"the program was ended: {self.exceeded}{said}",
            code=QUOTA,
            suggestion=_SUGGESTION,
        )


def parse_disk_mib(tool: str, raw: object, *, present: bool) -> int | None:
    """``diskMiB`` of a Tool's config: an integer >= 1, ``null`` (no quota), or absent
    (:data:`DEFAULT_DISK_MIB`)."""
    if not present:
        return DEFAULT_DISK_MIB
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ToolConfigError(
            f"{tool} config 'diskMiB' must be an integer >= 1 or null, got {raw!r}"
        )
    return raw


def quota_kind(path: str) -> str:
    """How a workspace under ``path`` is bounded: ``measured``, with whether its file system
    could enforce project quotas (``prjquota``/``pquota`` among its mount options)."""
    real = os.path.realpath(path)
    best, options, fstype = "", "", ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if " - " not in line or len(fields) < 6:
                continue
            point = fields[4].replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                tail = line.split(" - ", 1)[1].split()
                best, fstype = point, tail[0]
                options = fields[5] + "," + (tail[2] if len(tail) > 2 else "")
    flags = set(options.split(","))
    if flags & {"prjquota", "pquota", "pqnoenforce"}:
        return f"measured ({fstype} at {best} has project quotas)"
    return f"measured ({fstype or 'unknown'} at {best or '/'} has no project quotas)"
