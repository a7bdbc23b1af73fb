"""The state directory's reserve: space held back for the runtime's own files.

A workspace usually lives in the state directory's file system, so a tool program that fills
its workspace fills the disk the conversations, approvals and the event log are written to;
every agent's next Turn would then fail with ``E_STORAGE``. Two things keep that from
happening:

- a tool call never takes the last :data:`TOOLS_FLOOR_MIB` of its disk (``bash`` is ended,
  ``file-system`` refuses the write, both with ``E_WORKSPACE_QUOTA``);
- the daemon holds a **reserve file** of :data:`DEFAULT_RESERVE_MIB` in the state directory
  (``.space-reserve``, allocated with ``posix_fallocate``; ``GOONDAN_STATE_RESERVE_MIB``
  changes its size, ``0`` turns it off). When a write of a state file fails for want of space
  (``ENOSPC``), the writer, in whichever process, gives :data:`RELEASE_MIB` of the reserve
  back to the disk and retries once (see :func:`retrying`); the daemon makes the reserve whole
  again once the disk has room for it twice over (:func:`keep`). Whatever filled the disk from outside the runtime, the Turns under way
  still write what they must.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

RESERVE_NAME = ".space-reserve"
"""The reserve file's name, in the state directory."""
DEFAULT_RESERVE_MIB = 64
"""The reserve's size unless ``GOONDAN_STATE_RESERVE_MIB`` says otherwise."""
RELEASE_MIB = 4
"""What one write that ran out of space gives back of the reserve."""
TOOLS_FLOOR_MIB = 64
"""Free space on a workspace's disk that no tool call may take."""
CHECK_SECONDS = 10.0
"""How often the daemon looks whether a released reserve can be made again."""
_SEARCH_DEPTH = 12
"""How many directories up from a state file the reserve is looked for."""
_MIB = 1024 * 1024
_T = TypeVar("_T")


def _log() -> Any:
    """The logger, structlog imported only when there is something to say: a command that only
    reads state files (``goondan status``) never pays for it, nor for asyncio."""
    import structlog

    return structlog.get_logger("goondan")


def reserve_mib(environ: dict[str, str] | None = None) -> int:
    """The reserve's size in MiB: ``GOONDAN_STATE_RESERVE_MIB``, else the default."""
    raw = (os.environ if environ is None else environ).get("GOONDAN_STATE_RESERVE_MIB", "")
    try:
        return max(0, int(raw)) if raw.strip() else DEFAULT_RESERVE_MIB
    except ValueError:
        return DEFAULT_RESERVE_MIB


def make(state_dir: Path, mib: int) -> bool:
    """Hold ``mib`` MiB in ``state_dir``'s reserve file unless it is there already; ``False``
    when the disk has no room for it twice over (it is then left released)."""
    path = state_dir / RESERVE_NAME
    size = mib * _MIB
    with contextlib.suppress(OSError):
        if path.stat().st_size >= size:
            return True
    try:
        fs = os.statvfs(state_dir)
    except OSError:
        return False
    if fs.f_bavail * fs.f_frsize < 2 * size:
        return False
    partial = path.with_name(f"{RESERVE_NAME}.{os.getpid()}.tmp")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _allocate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        _log().warning("state reserve not made", path=str(path), error=exc.strerror or str(exc))
        return False
    return True


def _allocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # A file system without fallocate: the blocks are taken by writing them.
        block = bytes(_MIB)
        for _ in range(size // _MIB):
            os.write(fd, block)


def release(near: Path) -> bool:
    """Give part of the reserve back to the disk: cut :data:`RELEASE_MIB` off the reserve file
    of the state directory that holds ``near`` (looked for in ``near`` and the directories
    above it), or remove its last part. ``True`` when space was given back, so a write that
    ran out of it is worth trying again. A part at a time: whatever took the disk may take
    what was given back, and the next writer then still finds some."""
    for directory in [near, *near.parents][:_SEARCH_DEPTH]:
        path = directory / RESERVE_NAME
        try:
            size = path.stat().st_size
            if size > RELEASE_MIB * _MIB:
                os.truncate(path, size - RELEASE_MIB * _MIB)
            else:
                os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return False
        _log().warning(
            "state reserve released: the disk is full",
            state_dir=str(directory),
            left_mib=max(0, size - RELEASE_MIB * _MIB) // _MIB,
        )
        return True
    return False


def retrying(near: Path, write: Callable[[], _T]) -> _T:
    """``write()``; when it fails for want of space, release the reserve of ``near``'s state
    directory and ``write()`` once more. ``write`` must leave nothing half-done when it fails
    (every state file's writer already does)."""
    try:
        return write()
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not release(near):
            raise
    return write()


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or a quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


async def keep(state_dir: Path, mib: int | None = None, log: Any = None) -> None:
    """The daemon's task: make the reserve, and make it again whenever it was released and
    the disk has room once more (runs until cancelled)."""
    import asyncio

    size = reserve_mib() if mib is None else mib
    if size <= 0:
        return
    held: bool | None = None
    while True:
        now = await asyncio.to_thread(make, state_dir, size)
        if now != held and log is not None:
            if now:
                log.info("state reserve held", state_dir=str(state_dir), mib=size)
            else:
                log.warning("state reserve not held: too little free space", mib=size)
        held = now
        await asyncio.sleep(CHECK_SECONDS)
