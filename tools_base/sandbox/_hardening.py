"""What each backend adds so that no host root reaches the sandbox (see :mod:`._userns` and
:mod:`._seccomp`): the launcher's spec and bubblewrap's arguments.

Under a root daemon both backends start through the launcher, which makes the user namespace
(mapped to an unprivileged id, the workspace idmapped) before anything runs in it; bubblewrap
then gets the namespace with ``--userns FD``. Under any daemon the program runs under the
seccomp filter: ``--seccomp FD`` for bubblewrap, ``prctl`` by the ``namespaces`` launcher.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import subprocess
import threading
from dataclasses import dataclass, field
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


CLOSER = "/bin/bash"
"""Closes the user namespace's descriptor before the program (``dash`` closes only 0-9)."""


@dataclass
class Direct:
    """bubblewrap made ready to ``exec`` from the caller's child, without the launcher."""

    argv: list[str]
    passed: tuple[int, ...] = ()
    """Descriptors ``argv`` names: start it with ``pass_fds=passed``."""
    owned: tuple[int, ...] = ()
    """Descriptors of this call, to close once the program has started."""
    trees: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, bool] = field(default_factory=dict)

    def in_child(self) -> None:
        """In the forked child before ``exec`` (root only): no supplementary groups (they would
        stay root's inside), and the staged copies bubblewrap binds (see ``_userns``)."""
        if self.trees:
            os.setgroups([])
            _userns.private_mounts()
            _userns.mount_stage(self.trees, self.kinds)


def direct(argv: list[str], spec: dict[str, Any]) -> Direct | None:
    """bubblewrap's arguments to ``exec`` from this process's child: the filter's placeholder
    made a descriptor; under root also the user namespace's (made once per process) and the
    bind sources rewritten to staged copies, as the launcher does when it starts bubblewrap,
    without starting a Python. ``None`` where only the launcher can (root without ``bash``
    to close the namespace's descriptor, which bubblewrap keeps open into the program)."""
    if "hostIds" in spec and not os.access(CLOSER, os.X_OK):
        return None
    made = Direct(list(argv))
    try:
        if "hostIds" in spec:
            try:
                _root(made, spec)
            except OSError:  # a root in a user namespace of few ids: as for any user
                for fd in made.owned:
                    os.close(fd)
                made = Direct(_unshare_user(list(argv)))
        if SECCOMP_FD in made.argv:
            data = seccomp_filter()
            assert data is not None
            fd = _seccomp.memfd(data)
            made.owned += (fd,)
            made.passed += (fd,)
            made.argv = [str(fd) if a == SECCOMP_FD else a for a in made.argv]
    except BaseException:
        for fd in made.owned:
            os.close(fd)
        raise
    return made


def _unshare_user(argv: list[str]) -> list[str]:
    at = argv.index(USERNS_FD)
    argv[at - 1 : at + 1] = ["--unshare-user"]
    return argv


def _root(made: Direct, spec: dict[str, Any]) -> None:
    with open("/proc/self/setgroups") as setgroups:
        if setgroups.read().strip() != "allow":  # the child could not drop root's groups
            raise OSError(errno.EPERM, "setgroups is denied in this user namespace")
    uid, gid = spec["hostIds"]
    try:
        with _making:
            idmap: int | None = _namespace(os.getpid(), 0, uid, gid)
    except OSError:
        idmap = None
    writable = [spec["workdir"], *spec.get("readWrite", ())]
    pinned = {spec["workdir"]: spec["workdirFd"]} if "workdirFd" in spec else {}
    made.trees, idmapped = _userns.clone_sources(writable, spec.get("readOnly", ()), idmap, pinned)
    made.owned += tuple(made.trees.values())
    made.kinds = {path: path in pinned or os.path.isdir(path) for path in made.trees}
    if not idmapped:
        uid, gid = 0, 0
    with _making:
        userns = _namespace(os.getpid(), _userns.SANDBOX_UID, uid, gid)
    made.passed += (userns,)
    staged = _userns.staged_paths(made.trees)
    out = _userns.rebind([str(userns) if a == USERNS_FD else a for a in made.argv], staged)
    at = out.index("--") + 1
    out[at:at] = [CLOSER, "-c", f'exec {userns}<&-; exec "$@"', "bash"]
    made.argv = out


_making = threading.Lock()
"""Calls are prepared on worker threads: one namespace of each kind per process."""


@functools.cache
def _namespace(pid: int, inside: int, uid: int, gid: int) -> int:
    """A user namespace mapping ``inside`` onto host ``uid``/``gid``, made once per process
    (``pid`` keys the cache: a forked child makes its own). A ``cat`` unshares it before its
    ``exec`` and this process writes its maps: a process with threads must not fork bare."""
    del pid
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        if libc.unshare(_userns.CLONE_NEWUSER) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    try:
        helper = subprocess.Popen(
            ["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=enter,
        )  # fmt: skip
    except subprocess.SubprocessError as exc:  # what a failing preexec_fn raises
        raise OSError(errno.EPERM, "cannot make a user namespace (unshare failed)") from exc
    try:
        return _userns.map_helper(helper.pid, f"{inside} {uid} 1", f"{inside} {gid} 1")
    finally:
        assert helper.stdin is not None
        helper.stdin.close()
        helper.wait()


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
            "the program's user maps onto root: no unprivileged map here (the workspace's "
            "file system has no idmapped mounts, or this root is itself in a user namespace); "
            "/proc/sys read-only, private /etc files masked"
        )
    else:
        user = f"the program's user is host uid {host}, the workspace idmapped"
    return f"{user}; {said}"
