"""The sandbox's launcher: limits, and for the ``namespaces`` backend the namespaces and the
mount layout, then ``exec`` of the tool's program.

It runs as ``python -I -S _launch.py SPEC_JSON`` where bubblewrap cannot, and its functions
also serve the agent (limits in ``preexec_fn``). So it imports only the standard library: under
``-I`` its own directory is not on ``sys.path``, and ``-S`` keeps site-packages (and the start-up
time they cost) out.

What the ``namespaces`` backend builds, as bubblewrap does:

1. ``unshare`` of the user, mount, PID, IPC, UTS and network namespaces (with network on, the
   proxy's listeners are made in the new one, see ``_netns``); the caller's user becomes
   :data:`SANDBOX_UID` inside. Under a root daemon the user namespace is made by a helper whose
   map the launcher writes (to an unprivileged host id, the workspace idmapped: see
   ``_userns``), and the launcher joins it.
2. A fork: the child is PID 1 of the new PID namespace, the parent (the *monitor*) stays in the
   agent's namespace, relays signals to it and ends as it ends (by the same signal, so the
   agent reads ``exitCode``/``signal`` as for an unsandboxed program).
3. PID 1 mounts a fresh root: the system's directories read-only, the workspace (and any
   further paths) at their own paths (a pinned workspace from its descriptor, made the
   working directory before ``unshare``), a private ``/tmp``, ``/dev`` with the harmless devices
   only, and a ``/proc`` of its own namespace; the old root is detached, so nothing else of the
   machine (the state directory, ``api.sock``, other instances) has a name inside.
4. PID 1 forks the program (PID 2) and reaps everything, so a program that ignores the signals
   only PID 1 may ignore still gets them, and everything in the namespace dies with PID 1.
   The program becomes :data:`SANDBOX_UID` and installs the seccomp filter just before its
   ``exec``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import json
import os
import resource
import signal
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any


def _sibling(name: str) -> ModuleType:
    """A module of this directory, loaded by path: run as a script under ``-I`` the launcher
    has neither its own directory nor the package on ``sys.path``."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:
    from tools_base.sandbox import _seccomp, _userns
else:  # pragma: no cover - the launcher's own process
    _seccomp = _sibling("_seccomp")
    _userns = _sibling("_userns")

SANDBOX_UID = _userns.SANDBOX_UID
"""The user (and group) a sandboxed program runs as inside its user namespace."""
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""What a sandboxed program sees of the machine, read-only (symlinks kept as symlinks)."""
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")
"""Entries of the sandbox's ``/proc`` bound read-only over themselves."""
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
USERNS_FD = 9
"""Where bubblewrap gets its user namespace under a root daemon (one digit: ``sh`` closes it)."""
SHM_DIR = "/tmp/.shm"
"""Where ``/dev/shm`` points: on the private ``/tmp`` (the same as ``_devices.SHM_DIR``)."""
SETUP_FAILED = 125
"""Exit status of the launcher when it could not build the sandbox (like ``env``'s 125)."""

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
_ST_TO_MS = {
    os.ST_RDONLY: MS_RDONLY,
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}
_MIB = 1024 * 1024
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "i686": 217, "armv7l": 218,
               "ppc64le": 203, "s390x": 217}  # fmt: skip
"""``pivot_root``'s syscall number by machine: the C library has no wrapper for it."""


class SetupError(Exception):
    """The sandbox could not be built; the message says which step and why."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(code)} (errno {errno.errorcode.get(code, code)})")


def _lower(kind: int, value: int) -> None:
    """Set a limit no higher than the one in force (an unprivileged process cannot raise it)."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, hard if hard != resource.RLIM_INFINITY else value))


def _join(cgroup: str) -> None:
    """Move this single-threaded process into ``cgroup``.

    Moving a whole process (``cgroup.procs``) takes a machine-wide lock whose writer waits for
    an RCU grace period: about 10 ms a call where other sandboxes' namespaces are being torn
    down. cgroup v1's ``tasks`` moves the calling thread, all of this process, without that
    lock (``0`` names the caller). Where there is no ``tasks`` file (v2), or it refuses:
    ``cgroup.procs``.
    """
    try:
        _write(os.path.join(cgroup, "tasks"), "0")
    except OSError:
        _write(os.path.join(cgroup, "cgroup.procs"), str(os.getpid()))


def apply_limits(limits: Mapping[str, Any], cgroup: str | None = None) -> None:
    """Apply the call's limits to this process, which its program inherits.

    ``limits`` carries ``cpuSeconds``, ``memoryMiB``, ``fileSizeMiB`` and ``nproc`` (the
    ``RLIMIT_NPROC`` figure computed by the caller), each optional. ``cgroup`` is a pids cgroup
    directory made for this call: the process joins it first, so everything it starts counts.
    Called single-threaded only (a forked child before ``exec``, the launcher's start).
    """
    if cgroup:
        _join(cgroup)
    cpu = limits.get("cpuSeconds")
    if cpu:
        # SIGXCPU at the soft limit, SIGKILL one second later for a program that catches it.
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        top = cpu + 1 if hard == resource.RLIM_INFINITY else min(cpu + 1, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (min(cpu, top), top))
    if limits.get("memoryMiB"):
        _lower(resource.RLIMIT_AS, int(limits["memoryMiB"]) * _MIB)
    if limits.get("fileSizeMiB"):
        _lower(resource.RLIMIT_FSIZE, int(limits["fileSizeMiB"]) * _MIB)
    if limits.get("nproc"):
        _lower(resource.RLIMIT_NPROC, int(limits["nproc"]))
    _lower(resource.RLIMIT_CORE, 0)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:  # fmt: skip
    _check(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )


def _bind(libc: Any, source: str, target: str, *, writable: bool, device: bool = False) -> None:
    """Bind ``source`` on ``target`` (made as a file or directory like it), read-only unless
    ``writable``, keeping the flags the kernel locks (nosuid, nodev, ...) of the original."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    # A device node on a nodev mount cannot be opened: /dev/null must stay usable.
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (0 if device else MS_NODEV)
    locked = os.statvfs(target).f_flag
    for st, ms in _ST_TO_MS.items():
        if locked & st:
            flags |= ms
    if not writable:
        flags |= MS_RDONLY
    _mount(libc, None, target, None, flags)


def _pivot_root(libc: Any, new_root: bytes, put_old: bytes) -> None:
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SetupError(f"pivot_root: no syscall number known for {os.uname().machine}")
    _check(libc.syscall(number, new_root, put_old), f"pivot_root({new_root.decode()})")


def _open_sources(spec: Mapping[str, Any]) -> dict[str, int]:
    """Each host path the sandbox binds, opened (``O_PATH``) while this process can still look
    it up: under a root daemon it creates files as the sandbox's user from here on, and that
    user may not search the directories above a workspace (``/root`` is 0700)."""
    wanted = [p for p in SYSTEM_PATHS if not os.path.islink(p) and os.path.isdir(p)]
    wanted += [p for p in spec.get("readOnly", ()) if os.path.exists(p)]
    wanted += [*([] if _pinned(spec) else [spec["workdir"]]), *spec.get("readWrite", ())]
    wanted += ["/dev/" + name for name in DEVICES if os.path.exists("/dev/" + name)]
    return {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in wanted}


def _build_root(libc: Any, spec: Mapping[str, Any]) -> None:
    """In the new mount namespace, as PID 1: the sandbox's root, then ``pivot_root`` into it."""
    # The pinned workdir is the working directory (see run_in_namespaces), on this namespace's
    # copy of its mount: bound from there, it is the directory itself, whatever its path names.
    # (Its descriptor, or /proc/self/fd/N, names the agent's namespace's mount: EINVAL to bind.)
    here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if _pinned(spec) else None
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    opened = _open_sources(spec)
    if os.getuid() != SANDBOX_UID:  # uid 0 of the namespace, mapped to nothing (root daemon)
        _userns.set_fs_ids(SANDBOX_UID)

    def source(path: str) -> str:
        # The descriptor's magic link, through the old root's /proc: no lookup of the path.
        return f"/oldroot/proc/self/fd/{opened[path]}"

    # A tmpfs to stand on: the old root moves under it, so binds read from /oldroot.
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.mkdir("/tmp/oldroot")
    os.mkdir("/tmp/newroot")
    _pivot_root(libc, b"/tmp", b"/tmp/oldroot")
    os.chdir("/")
    new = "/newroot"
    tmp_mib = int(spec.get("tmpMiB") or 64)
    _mount(libc, "tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for path in SYSTEM_PATHS:
        old = "/oldroot" + path
        if os.path.islink(old):
            os.symlink(os.readlink(old), new + path)
        elif path in opened:
            _bind(libc, source(path), new + path, writable=False)
    for path in spec.get("mask", ()):
        _mask(libc, new + path, source("/dev/null"))
    # /tmp before the binds: a workspace under /tmp must stay visible over the private one.
    os.makedirs(new + "/tmp", exist_ok=True)
    _mount(libc, "tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=1777,size={tmp_mib * _MIB}")  # fmt: skip
    for path in spec.get("readOnly", ()):
        if path in opened:
            _bind(libc, source(path), new + path, writable=False)
    if here is not None:
        os.fchdir(here)
        _bind(libc, ".", new + spec["workdir"], writable=True)
        os.close(here)
    else:
        _bind(libc, source(spec["workdir"]), new + spec["workdir"], writable=True)
    for path in spec.get("readWrite", ()):
        _bind(libc, source(path), new + path, writable=True)
    os.makedirs(new + "/dev", exist_ok=True)
    _mount(libc, "tmpfs", new + "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=65536")
    for name in DEVICES:
        if "/dev/" + name in opened:
            _bind(libc, source("/dev/" + name), f"{new}/dev/{name}", writable=True, device=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{new}/dev/{name}")
    # /dev/shm lives on the private /tmp: shared memory counts in tmpMiB (see _devices.py).
    os.mkdir(new + SHM_DIR)
    os.chmod(new + SHM_DIR, 0o1777)
    os.symlink(SHM_DIR, new + "/dev/shm")
    _mount(libc, None, new + "/dev", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    os.makedirs(new + "/proc")
    _mount(libc, "proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # What bubblewrap makes read-only of its /proc: the kernel's knobs (sysctls, SysRq, IRQs).
    for name in PROC_READ_ONLY:
        if os.path.exists(f"{new}/proc/{name}"):
            _bind(libc, f"{new}/proc/{name}", f"{new}/proc/{name}", writable=False)
    for fd in opened.values():
        os.close(fd)
    _check(libc.umount2(b"/oldroot", MNT_DETACH), "umount the old root")
    os.chdir(new)
    _pivot_root(libc, b".", b".")
    _check(libc.umount2(b".", MNT_DETACH), "detach the launcher's root")
    os.chdir("/")
    # Read-only from here on: the root itself (its empty directories) must not be writable.
    _mount(libc, None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mask(libc: Any, target: str, null: str) -> None:
    """Hide ``target`` (a file: ``/dev/null``, unopenable on a ``nodev`` mount; a directory:
    an empty read-only tmpfs)."""
    if os.path.islink(target) or not os.path.lexists(target):
        return
    if os.path.isdir(target):
        _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
               "mode=0,size=4096")  # fmt: skip
    else:
        _bind(libc, null, target, writable=False)


def _map_user(uid: int, gid: int) -> None:
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{SANDBOX_UID} {uid} 1")
    _write("/proc/self/gid_map", f"{SANDBOX_UID} {gid} 1")


def _status_of(status: int) -> tuple[int | None, int | None]:
    """``(exit code, signal)`` of a wait status."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


def _end_like(code: int | None, sig: int | None) -> None:
    """End this process as the program ended: by the same signal, or with the same code."""
    if sig is not None:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill (SIGCHLD...) or was blocked
    os._exit(code or 0)


def _init(libc: Any, spec: Mapping[str, Any], status_w: int) -> None:
    """PID 1 of the sandbox: build it, start the program as PID 2, reap, report its status."""
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _check(libc.sethostname(b"sandbox", 7), "sethostname")
    _build_root(libc, spec)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    program = os.fork()
    if program == 0:
        os.close(status_w)
        _userns.become_sandbox_user()
        os.chdir(spec["cwd"])
        if spec.get("seccomp"):
            _seccomp.install()  # last: from here on the calls the filter denies fail
        os.execvpe(spec["argv"][0], spec["argv"], dict(spec["env"]))
    status = 0
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid == program:
            status = wait_status
            break
    os.write(status_w, json.dumps(_status_of(status)).encode())
    os._exit(0)


def _forward(child: int) -> None:
    def relay(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, relay)


def _netns() -> Any:
    """:mod:`tools_base.sandbox._netns`, loaded by path (under ``-I`` this directory is not on
    ``sys.path``)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_netns.py")
    found = importlib.util.spec_from_file_location("_goondan_netns", path)
    assert found is not None
    assert found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def run_in_namespaces(spec: Mapping[str, Any]) -> None:
    """The ``namespaces`` backend, from the launcher's process (never returns)."""
    libc = _libc()
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    uid, gid = os.getuid(), os.getgid()
    pinned = spec["workdirFd"] if _pinned(spec) else None
    if pinned is not None:  # unshare moves the working directory onto the new namespace's mounts
        os.fchdir(pinned)
    # Always a network namespace of its own: with network on, the proxy's listeners are its
    # only way out (see _netns).
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
    netns = _netns() if spec.get("proxy") else None
    handoff = netns.connect_handoff(spec["proxy"]) if netns is not None else None
    # Under root the workdir's idmapped copy is mounted over it and becomes the working directory.
    userns = _root_userns_or_none(spec)
    if pinned is not None:
        os.close(pinned)
    if userns is not None:  # a root daemon: join a namespace mapped to an unprivileged id
        _check(libc.setns(userns, CLONE_NEWUSER), "setns(user namespace)")
        _check(libc.unshare(flags), "unshare the namespaces")
    else:
        _check(libc.unshare(flags | CLONE_NEWUSER), "unshare the namespaces")
        _map_user(uid, gid)
    if netns is not None:
        netns.hand_over_from_here(handoff)
    status_r, status_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(status_r)
        try:
            _init(libc, spec, status_w)
        except BaseException as exc:
            os.write(2, f"sandbox: {exc}\n".encode())
            os._exit(SETUP_FAILED)
    os.close(status_w)
    _forward(child)
    _, init_status = os.waitpid(child, 0)
    report = b""
    while chunk := os.read(status_r, 256):
        report += chunk
    if not report:  # PID 1 failed to build the sandbox, or was killed
        code, sig = _status_of(init_status)
        _end_like(code, sig)
    code, sig = json.loads(report)
    _end_like(code, sig)


def enter_root_userns(spec: Mapping[str, Any], argv: list[str] | None = None) -> int:
    """Under a root daemon: the user namespace the program is to run in, as a descriptor.

    Its user maps onto ``spec["hostIds"]``; first, in a mount namespace of this process's own,
    the writable paths are covered by idmapped copies of themselves, so what is root's on disk
    is the sandbox user's inside. Where that cannot be done the map is host root's, as before
    (``probe`` reports it). For bubblewrap (``argv``), which looks its sources up as the
    sandbox's user, the copies are staged where that user can reach them, and ``argv``'s bind
    sources rewritten to them.
    """
    os.setgroups([])  # supplementary groups would stay host root's groups in the namespace
    uid, gid = spec["hostIds"]
    writable = [spec["workdir"], *spec.get("readWrite", ())]
    if _pinned(spec):  # the private namespace moves the working directory onto its copy
        os.fchdir(spec["workdirFd"])
    _userns.private_mounts()
    # The pinned workdir, as this namespace's copy of its mount (a descriptor opened in the
    # agent's namespace names a mount open_tree and move_mount refuse from here).
    here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if _pinned(spec) else None
    pinned = {spec["workdir"]: here} if here is not None else {}
    if argv is None:
        idmapped = _userns.idmap_over(writable, uid, gid, pinned) is None
    else:
        staged, idmapped = _userns.stage(writable, spec.get("readOnly", ()), uid, gid, pinned)
        argv[:] = _userns.rebind(argv, staged)
    if here is not None:
        os.close(here)
    if not idmapped:
        uid, gid = 0, 0
    return _userns.sandbox_userns(uid, gid)


def _root_userns_or_none(spec: Mapping[str, Any], argv: list[str] | None = None) -> int | None:
    """:func:`enter_root_userns` under a root daemon; ``None`` otherwise, or where a root that
    is itself in a user namespace of few ids cannot (a rootless container's root: mapping onto
    it, as for any user, gives nothing of the host's)."""
    if not spec.get("hostIds"):
        return None
    try:
        return enter_root_userns(spec, argv)
    except OSError:
        return None


def _filled(spec: Mapping[str, Any]) -> list[str]:
    """The command ``spec["exec"]`` (bubblewrap, or the program where the sandbox is off), its
    ``@userns``/``@seccomp`` arguments made descriptors here (inheritable)."""
    argv = list(spec["exec"])
    filled: dict[str, int] = {}
    userns = _root_userns_or_none(spec, argv)
    if _pinned(spec) and "--bind-fd" not in argv:  # bound from its staged copy: not inherited
        os.close(spec["workdirFd"])
    if userns is None and "@userns" in argv:  # bubblewrap makes its own, as for any user
        at = argv.index("@userns")
        argv[at - 1 : at + 1] = ["--unshare-user"]
    if userns is not None:
        # bubblewrap keeps the descriptor open into the program: a shell closes it first.
        os.dup2(userns, USERNS_FD)
        os.close(userns)
        filled["@userns"] = USERNS_FD
        at = argv.index("--") + 1
        argv[at:at] = ["/bin/sh", "-c", f'exec {USERNS_FD}<&-; exec "$@"', "sh"]
    if "@seccomp" in argv:
        filled["@seccomp"] = _seccomp.memfd()
    for fd in filled.values():
        os.set_inheritable(fd, True)
    return [str(filled[a]) if a in filled else a for a in argv]


def descriptors_above_stdio() -> list[int]:
    """This process's descriptors but 0–2 (none where ``/proc`` is not mounted)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    return [fd for fd in map(int, names) if fd > 2]


def close_inherited_fds(keep: Sequence[int] = ()) -> None:
    """Close every descriptor but 0–2 and ``keep``. Whoever starts the launcher cannot always
    keep its own from being inherited (uvloop passes them on whatever ``close_fds`` says), and
    neither the launcher nor the program may hold the agent's pipes."""
    for fd in descriptors_above_stdio():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _pinned(spec: Mapping[str, Any]) -> bool:
    """Whether the spec hands over the workdir as a descriptor (``workdirFd``)."""
    return isinstance(spec.get("workdirFd"), int)


def environment(spec: Mapping[str, Any]) -> dict[str, str]:
    """The program's environment: the launcher's own, cut to the names ``spec["envNames"]``
    lists. Values never travel in the spec: a command line is readable by every user of the
    machine (``ps``), and a program's environment often holds its tokens."""
    return {name: os.environ[name] for name in spec.get("envNames", ()) if name in os.environ}


def main(argv: Sequence[str]) -> None:
    """``_launch.py SPEC_JSON``: join the call's cgroup, apply the limits, then run the program
    in namespaces, or ``exec`` the command ``spec["exec"]`` (bubblewrap) when given."""
    spec = json.loads(argv[1])
    close_inherited_fds([spec["workdirFd"]] if _pinned(spec) else [])
    spec["env"] = environment(spec)
    try:
        apply_limits(spec.get("limits", {}), spec.get("cgroup"))
        if spec.get("exec"):
            command = _filled(spec)
            if spec.get("proxy"):
                _netns().exec_bwrap(command, spec["env"], spec["proxy"])
            os.execvpe(command[0], command, spec["env"])
        run_in_namespaces(spec)
    except (SetupError, OSError) as exc:
        os.write(2, f"sandbox: {exc}\n".encode())
        os._exit(SETUP_FAILED)


if __name__ == "__main__":
    main(sys.argv)
