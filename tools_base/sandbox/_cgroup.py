"""A pids cgroup per sandboxed call, where the agent may make one.

``RLIMIT_NPROC`` does not bound a process whose user is root outside its user namespace (the
kernel exempts the initial user), and a daemon run as root (a container's usual user) maps its
sandbox onto root. The pids controller bounds every process in a cgroup, whoever runs it, so
where a pids hierarchy is writable (cgroup v1's ``pids`` mount, or a v2 cgroup that delegates
``pids`` to its children) each call gets a child cgroup with ``pids.max``. Elsewhere the
``RLIMIT_NPROC`` bound holds (an unprivileged daemon), and ``doctor`` says which applies.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_ACTIVE: set[str] = set()
"""This process's cgroups whose calls are running: the sweep leaves them."""
PARENT_NAME = "goondan-sandbox"
"""The directory under the agent's own cgroup that holds one cgroup per running call."""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, type, options)`` of the cgroup file systems."""
    found = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            found.append((parts[1], parts[2], set(parts[3].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per controller (``""`` for the v2 hierarchy)."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _writable_dir(directory: str) -> str | None:
    parent = os.path.join(directory, PARENT_NAME)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError:
        return None
    return parent if os.access(parent, os.W_OK) else None


def find_pids_parent() -> str | None:
    """The directory where per-call pids cgroups go, made if need be; ``None`` where the
    pids controller cannot be used by this process."""
    own = _own_paths()
    for mount_point, fs_type, options in _mounts():
        if fs_type == "cgroup" and "pids" in options and "pids" in own:
            directory = mount_point + own["pids"].rstrip("/")
            if os.path.isfile(os.path.join(directory, "pids.max")) or own["pids"] == "/":
                return _writable_dir(directory)
        if fs_type == "cgroup2" and "" in own:
            directory = mount_point + own[""].rstrip("/")
            try:
                delegated = Path(directory, "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if "pids" in delegated:
                return _writable_dir(directory)
    return None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts: it cannot be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PidsCgroup:
    """One call's cgroup: ``pids.max`` set, removed by :meth:`remove` once its processes are
    gone (an empty one left behind by a crash is swept by the next call)."""

    def __init__(self, parent: str, limit: int) -> None:
        self._sweep(parent)
        self.path = os.path.join(parent, f"call-{os.getpid()}-{secrets.token_hex(4)}")
        os.mkdir(self.path)
        _ACTIVE.add(self.path)
        try:
            Path(self.path, "pids.max").write_text(str(limit))
        except OSError:
            self.remove()
            raise

    @staticmethod
    def _sweep(parent: str) -> None:
        """Remove the cgroups of agents that are gone, and this process's own whose calls are
        over (one whose last process was still dying at its call's end could not go then).
        Another live agent's may be empty for a moment (made, not yet joined): its own to
        remove."""
        me = os.getpid()
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                _, _, rest = entry.name.partition("call-")
                owner = rest.partition("-")[0]
                if not owner.isdigit():
                    continue
                if int(owner) == me:
                    if entry.path in _ACTIVE:
                        continue
                elif process_alive(int(owner)):
                    continue
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)

    def remove(self) -> None:
        """Remove the cgroup if it is empty (a process still dying leaves it to the sweep)."""
        _ACTIVE.discard(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
