"""A daemon whose stderr nobody reads (a full pipe) or nobody holds (a closed pipe) keeps
answering, obeys signals, and its agents never outlive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.daemon import run_cli
from tests.support.swarm import write_swarm

pytestmark = pytest.mark.timeout(120)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: set[int], deadline: float = 20) -> None:
    end = time.monotonic() + deadline
    while any(alive(p) for p in pids):
        if time.monotonic() > end:
            raise AssertionError(f"still running: {[p for p in pids if alive(p)]}")
        time.sleep(0.05)


def start(tmp_path: Path) -> subprocess.Popen[bytes]:
    write_swarm(tmp_path)
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def status(tmp_path: Path) -> dict[str, dict[str, object]]:
    end = time.monotonic() + 30
    while True:
        done = run_cli("status", "--json", cwd=tmp_path, timeout=20)
        if done.returncode == 0:
            return {r["agent"]: r for r in json.loads(done.stdout)["agents"]}
        if time.monotonic() > end:
            raise AssertionError(done.stderr)


def flood(tmp_path: Path) -> None:
    """A request whose tool logs about 400 KB: several times what a pipe holds."""
    sent = run_cli("send", "beta", "chatter 2000", cwd=tmp_path, timeout=30)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "logged 2000"


@pytest.mark.parametrize("reader", ["closed", "never reads"])
def test_the_daemon_answers_and_stops_whatever_happens_to_its_stderr(
    tmp_path: Path, reader: str
) -> None:
    daemon = start(tmp_path)
    assert daemon.stderr is not None
    try:
        status(tmp_path)  # up
        if reader == "closed":
            daemon.stderr.close()
        flood(tmp_path)
        rows = status(tmp_path)
        assert rows["beta"]["status"] == "idle"
        agents = {int(r["pid"]) for r in rows.values() if r.get("pid")}  # type: ignore[call-overload]
        os.killpg(daemon.pid, signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        wait_gone(agents)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        daemon.stderr.close()


def test_agents_exit_when_a_daemon_with_a_full_stderr_is_killed(tmp_path: Path) -> None:
    daemon = start(tmp_path)
    try:
        status(tmp_path)
        flood(tmp_path)
        rows = status(tmp_path)
        agents = {int(r["pid"]) for r in rows.values() if r.get("pid")}  # type: ignore[call-overload]
        assert len(agents) == 2
        daemon.kill()  # the daemon alone: its agents must notice and go
        daemon.wait(timeout=10)
        wait_gone(agents)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        assert daemon.stderr is not None
        daemon.stderr.close()
        with_pgid_gone = subprocess.run(["pkill", "-KILL", "-g", str(daemon.pid)], check=False)
        assert with_pgid_gone.returncode in (0, 1)
