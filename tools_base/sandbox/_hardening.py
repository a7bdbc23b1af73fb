"""What each backend adds so that no host root reaches the sandbox (see :mod:`._userns` and
:mod:`._seccomp`): the launcher's spec and bubblewrap's arguments.

Under a root daemon both backends start through the launcher, which makes the user namespace
(mapped to an unprivileged id, the workspace idmapped) before anything runs in it; bubblewrap
then gets the namespace with ``--userns FD``. Under any daemon the program runs under the
seccomp filter: ``--seccomp FD`` for bubblewrap, ``prctl`` by the ``namespaces`` launcher.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from tools_base.sandbox import _launch, _seccomp, _userns

SECCOMP_FD = "@seccomp"
"""The placeholder of bubblewrap's ``--seccomp`` descriptor in an argument list."""
USERNS_FD = "@userns"
"""The placeholder of bubblewrap's ``--userns`` descriptor (the launcher fills it in)."""


def root_daemon() -> bool:
    """Whether programs are started by root (and so need a map other than their starter's)."""
    return os.geteuid() == 0


@functools.cache
def masked() -> tuple[str, ...]:
    """The ``/etc`` entries masked under a root daemon (looked up once per process)."""
    return tuple(_userns.private_etc())


@functools.cache
def seccomp_filter() -> bytes | None:
    """This machine's filter, or ``None`` where the filter does not know its architecture."""
    return _seccomp.program() if _seccomp.supported() else None


def user_args() -> list[str]:
    """bubblewrap's user namespace: its own, or under root the launcher's (``--userns``)."""
    return ["--userns", USERNS_FD] if root_daemon() else ["--unshare-user"]


def bwrap_args() -> list[str]:
    """After the system's directories: masks over private ``/etc`` entries, the filter."""
    args: list[str] = []
    if root_daemon():
        for path in masked():
            if os.path.isdir(path):
                args += ["--tmpfs", path, "--remount-ro", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
    if seccomp_filter() is not None:
        args += ["--seccomp", SECCOMP_FD]
    return args


def proc_args() -> list[str]:
    """After bubblewrap's ``--proc``: its kernel knobs read-only. bubblewrap covers them only
    where it finds them writable at setup, and in a namespace of its own it finds the
    directory not writable, though the files in it are to a user mapped onto root. What a
    sysctl file shows and sets is the reader's namespace's, so the host's binds serve."""
    args: list[str] = []
    for name in _launch.PROC_READ_ONLY:
        args += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    return args


def launcher_spec(namespaces: bool) -> dict[str, Any]:
    """The launcher's part: the host ids under root; for ``namespaces`` the masks and filter."""
    spec: dict[str, Any] = {}
    if root_daemon():
        spec["hostIds"] = list(_userns.host_ids())
        if namespaces:
            spec["mask"] = list(masked())
    if namespaces:
        spec["seccomp"] = seccomp_filter() is not None
    return spec


def direct_argv(argv: list[str]) -> tuple[list[str], tuple[int, ...]]:
    """bubblewrap's arguments to ``exec`` without the launcher (not under root): the filter's
    placeholder made a descriptor of this process, which the caller passes on and closes.

    Under root the launcher starts bubblewrap: it makes the user namespace, and closes its
    descriptor before the program runs (bubblewrap keeps ``--userns FD`` open).
    """
    if SECCOMP_FD not in argv:
        return argv, ()
    data = seccomp_filter()
    assert data is not None
    fd = _seccomp.memfd(data)
    return [str(fd) if a == SECCOMP_FD else a for a in argv], (fd,)


def describe(uid_map: str) -> str:
    """For ``probe``: who the program is on the host (from the ``uid_map`` it saw; under a root
    daemon its one line reads ``1000 HOST 1``), and whether the filter is installed."""
    said = "seccomp filter" if seccomp_filter() is not None else "no seccomp filter (arch)"
    if not root_daemon():
        return f"the program's user is this user; {said}"
    fields = uid_map.split()
    host = fields[1] if len(fields) >= 3 else "?"
    if host == "0":
        user = (
            "the program's user is host root: the workspace's file system has no idmapped "
            "mounts (/proc/sys read-only, private /etc files masked)"
        )
    else:
        user = f"the program's user is host uid {host}, the workspace idmapped"
    return f"{user}; {said}"
