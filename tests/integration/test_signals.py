"""Signals meant for the daemon (Ctrl-C, ``systemctl stop``) reach every process of its group:
agents must not die of them mid-Turn. The Turn finishes, its answer is delivered, all exit."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.swarm import write_swarm
from tests.integration.test_cli import run_cli

pytestmark = pytest.mark.timeout(120)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until_processing(directory: Path, agent: str, deadline: float = 30) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done = run_cli("status", "--json", cwd=directory)
        if done.returncode == 0:
            rows = {r["agent"]: r for r in json.loads(done.stdout)["agents"]}
            if rows.get(agent, {}).get("status") == "processing":
                return
    raise AssertionError(f"{agent} never started processing")


def agent_pids(stderr: str) -> set[int]:
    pids = set()
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "agent process spawned":
            pids.add(int(record["pid"]))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_group_lets_the_running_turn_finish(
    tmp_path: Path, sig: signal.Signals
) -> None:
    write_swarm(tmp_path, grace=20)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml", "--input", "ask beta slow 3"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until_processing(tmp_path, "beta")
        os.killpg(daemon.pid, sig)  # what Ctrl-C and KillMode=control-group do
        stdout, stderr = daemon.communicate(timeout=60)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert daemon.returncode == 0, stderr
    assert stdout.strip() == "slow done", stderr
    pids = agent_pids(stderr)
    assert len(pids) == 2  # alpha and beta, neither restarted
    assert "AGENT_CRASHED" not in stderr
    end = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_sigterm_to_an_agent_alone_drains_it_and_it_exits_clean(tmp_path: Path) -> None:
    write_swarm(tmp_path, grace=20)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml", "--input", "ask beta slow 2"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until_processing(tmp_path, "beta")
        rows = {
            r["agent"]: r
            for r in json.loads(run_cli("status", "--json", cwd=tmp_path).stdout)["agents"]
        }
        os.kill(int(rows["beta"]["pid"]), signal.SIGTERM)
        stdout, stderr = daemon.communicate(timeout=60)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert daemon.returncode == 0, stderr
    assert stdout.strip() == "slow done"
    exits = [
        json.loads(line)
        for line in stderr.splitlines()
        if line.startswith("{") and '"agent process' in line and '"beta"' in line
    ]
    assert not [e for e in exits if "crashed" in str(e.get("event"))], exits


def test_ctrl_c_at_the_prompt_lets_the_turn_finish(tmp_path: Path) -> None:
    import pty

    write_swarm(tmp_path, grace=20)
    leader, follower = pty.openpty()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""

    def read_until(marker: bytes, deadline: float = 30) -> None:
        nonlocal seen
        end = time.monotonic() + deadline
        while marker not in seen:
            ready, _, _ = select.select([leader], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {marker!r} in {seen!r}")
            try:
                seen += os.read(leader, 4096)
            except OSError:  # the terminal closed
                raise AssertionError(f"no {marker!r} in {seen!r}") from None

    try:
        read_until(b"alpha> ")
        os.write(leader, b"ask beta slow 2\n")
        wait_until_processing(tmp_path, "beta")
        os.killpg(daemon.pid, signal.SIGINT)  # the terminal's Ctrl-C: the foreground group
        read_until(b"slow done")
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        os.close(leader)
