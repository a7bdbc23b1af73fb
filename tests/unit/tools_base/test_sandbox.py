"""The sandbox of tool programs: its config, its backends, the limits, the view of the machine."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools_base import ToolConfigError, sandbox
from tools_base.sandbox import SandboxLimits, SandboxMode, SandboxPolicy, SandboxUnavailable

BACKENDS = [SandboxMode.BWRAP, SandboxMode.NAMESPACES]


def run(
    command: str,
    workdir: Path,
    mode: SandboxMode,
    policy: SandboxPolicy | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    launch = sandbox.prepare(
        ["/bin/sh", "-c", command],
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        cwd=str(workdir),
        workdir=str(workdir),
        policy=policy or SandboxPolicy(),
        mode=mode,
    )
    try:
        return subprocess.run(
            launch.argv,
            env=launch.env,
            preexec_fn=launch.preexec,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
    finally:
        launch.close()


def test_the_default_policy() -> None:
    policy = SandboxPolicy.from_config("bash", None)
    assert policy.network is False
    assert policy.limits == SandboxLimits()
    server = SandboxPolicy.from_config("mcp", None, network=True, cpu=False)
    assert server.network is True
    assert server.limits.cpu_seconds is None


def test_a_policy_from_config() -> None:
    policy = SandboxPolicy.from_config(
        "bash",
        {
            "network": True,
            "cpuSeconds": 5,
            "memoryMiB": None,
            "processes": 10,
            "fileSizeMiB": 2,
            "tmpMiB": 16,
            "readOnlyPaths": ["/opt/tools/"],
            "readWritePaths": ["/srv/cache"],
        },
    )
    assert policy.network is True
    assert policy.limits == SandboxLimits(
        cpu_seconds=5, memory_mib=None, processes=10, file_size_mib=2, tmp_mib=16
    )
    assert policy.read_only == ("/opt/tools",)
    assert policy.read_write == ("/srv/cache",)


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("off", "'sandbox' must be an object"),
        ({"network": "no"}, "sandbox.network"),
        ({"cpuSeconds": 0}, "sandbox.cpuSeconds"),
        ({"processes": True}, "sandbox.processes"),
        ({"readOnlyPaths": ["relative/path"]}, "sandbox.readOnlyPaths"),
        ({"readWritePaths": "/srv"}, "sandbox.readWritePaths"),
        ({"netwrok": False}, "'netwrok'"),
    ],
)
def test_a_bad_policy_names_its_key(raw: Any, names: str) -> None:
    with pytest.raises(ToolConfigError, match=names):
        SandboxPolicy.from_config("bash", raw)


def test_off_needs_no_probe_and_runs_the_program_as_is(tmp_path: Path) -> None:
    found = sandbox.probe(SandboxMode.OFF)
    assert found.backend is SandboxMode.OFF
    done = run("cat /proc/1/cmdline | tr '\\0' ' '", tmp_path, SandboxMode.OFF)
    assert "bwrap" not in done.stdout  # the machine's own PID 1


def test_auto_falls_back_to_the_namespaces_without_bubblewrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.probe.cache_clear()
    try:
        found = sandbox.probe(SandboxMode.AUTO)
        assert found.backend is SandboxMode.NAMESPACES
        assert "bubblewrap is not installed" in found.reason
        alone = sandbox.probe(SandboxMode.BWRAP)
        assert alone.backend is None
        with pytest.raises(SandboxUnavailable) as refused:
            sandbox.prepare(
                ["true"],
                env={},
                cwd="/",
                workdir="/",
                policy=SandboxPolicy(),
                mode=SandboxMode.BWRAP,
            )
        assert refused.value.code == "E_SANDBOX_UNAVAILABLE"
        assert "policy.sandbox" in (refused.value.suggestion or "")
    finally:
        sandbox.probe.cache_clear()


@pytest.mark.parametrize("mode", BACKENDS)
def test_the_view_of_the_machine(tmp_path: Path, mode: SandboxMode) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "mine.txt").write_text("mine")
    (tmp_path / "neighbour.txt").write_text("not yours")
    private = f"/tmp/sandbox-private-{secrets.token_hex(6)}"
    done = run(
        f"cat mine.txt; echo; cat {tmp_path}/neighbour.txt; echo new > made.txt; "
        f"echo private > {private} && cat {private}; touch /usr/x 2>&1 || echo usr-read-only; "
        "ls /proc | grep -cE '^[0-9]+$'; id -u; echo home=$HOME",
        workdir,
        mode,
    )
    out = done.stdout
    assert out.startswith("mine\n")
    assert "not yours" not in out
    assert (workdir / "made.txt").read_text() == "new\n"
    assert "private\n" in out
    assert not Path(private).exists()  # its /tmp was its own
    assert "usr-read-only" in out
    lines = out.splitlines()
    assert int(lines[-3]) <= 5  # its own processes only
    assert run("echo gone > /dev/null && echo ok", workdir, mode).stdout == "ok\n"
    assert lines[-2] == "1000"
    assert lines[-1] == f"home={os.path.realpath(workdir)}"


@pytest.mark.parametrize("mode", BACKENDS)
def test_the_exit_status_and_the_signal_come_through(tmp_path: Path, mode: SandboxMode) -> None:
    assert run("exit 7", tmp_path, mode).returncode == 7
    killed = run("kill -TERM $$", tmp_path, mode).returncode
    # bubblewrap reports a program's death by signal N as 128 + N (bash reads it back).
    assert killed in (-15, 128 + 15)


@pytest.mark.parametrize("mode", BACKENDS)
def test_network_off_or_on_never_shares_the_hosts_namespace(
    tmp_path: Path, mode: SandboxMode
) -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (
            "python3 -c 'import socket,sys; socket.create_connection"
            f'(("127.0.0.1", {port}), timeout=5); print("connected")\' 2>/dev/null '
            "|| echo refused"
        )
        off = run(probe, tmp_path, mode)
        on = run(probe, tmp_path, mode, SandboxPolicy(network=True))
    assert off.stdout.strip() == "refused"
    # On, the program's way out is the proxy (tests/unit/tools_base/test_sandbox_proxy.py):
    # the host's loopback is never its own.
    assert on.stdout.strip() == "refused"


@pytest.mark.parametrize("mode", BACKENDS)
def test_limits_hold(tmp_path: Path, mode: SandboxMode) -> None:
    limits = SandboxLimits(cpu_seconds=1, memory_mib=256, processes=16, file_size_mib=1)
    policy = SandboxPolicy(limits=limits)
    big = run("head -c 5M /dev/zero > big; echo exit=$?", tmp_path, mode, policy)
    assert (tmp_path / "big").stat().st_size <= 1024 * 1024
    assert "exit=0" not in big.stdout
    spin = run("while :; do :; done", tmp_path, mode, policy)
    assert spin.returncode in (-24, -9, 128 + 24, 128 + 9)  # SIGXCPU, then SIGKILL
    forks = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        started += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print(started)\n"
    )
    (tmp_path / "forks.py").write_text(forks)
    fork = run("python3 forks.py", tmp_path, mode, policy)
    assert int(fork.stdout.split()[-1]) < 16
