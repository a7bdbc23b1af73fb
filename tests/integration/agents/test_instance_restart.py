"""``instance restart`` reloads one conversation in its running agent: that instance's Turn is
answered CANCELLED at once, the agent and its other instances carry on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(120)


def send(directory: Path, key: str, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", "beta", text, "--instance", key],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_processing(directory: Path, keys: set[str], deadline: float = 30) -> None:
    """Until every instance of ``keys`` of beta records a running Turn (bounded)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done = run_cli("instances", "beta", "--json", cwd=directory)
        rows = json.loads(done.stdout) if done.returncode == 0 else []
        if keys <= {r["instanceKey"] for r in rows if r.get("status") == "processing"}:
            return
    raise AssertionError(f"instances {keys} never ran a Turn")


def beta_pid(directory: Path) -> int:
    done = run_cli("status", "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    return {r["agent"]: r for r in json.loads(done.stdout)["agents"]}["beta"]["pid"]


def test_restarting_an_instance_stops_its_turn_only(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        daemon.wait_for("orchestrator started")
        first = send(tmp_path, "one", f"hold {tmp_path / 'gate-one'}")
        second = send(tmp_path, "two", f"hold {tmp_path / 'gate-two'}")
        wait_processing(tmp_path, {"one", "two"})
        pid = beta_pid(tmp_path)

        done = run_cli("instance", "restart", "beta", "one", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "beta@one: restarted; 1 running Turn stopped"
        _, error = first.communicate(timeout=30)
        assert first.returncode == 1
        assert "instance 'one' of agent 'beta' was restarted by an operator" in error
        assert "(CANCELLED)" in error

        assert second.poll() is None  # the other instance's Turn runs on
        (tmp_path / "gate-two").touch()
        output, error = second.communicate(timeout=30)
        assert second.returncode == 0, error
        assert output.strip() == "released"
        assert beta_pid(tmp_path) == pid  # the agent process was not restarted

        # its conversation was kept, and it serves again
        again = run_cli("send", "beta", "pid", "--instance", "one", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        conversation = tmp_path / ".goondan" / "agents" / "beta" / "instances" / "one"
        stored = "".join(p.read_text() for p in conversation.rglob("*.jsonl"))
        assert "hold " in stored
        assert "E_TOOL_INTERRUPTED" in stored  # the call cut short is answered

        # the original runtime's form: KEY alone, every running agent that holds it
        upstream = run_cli("instance", "restart", "two", "--json", cwd=tmp_path)
        assert upstream.returncode == 0, upstream.stderr
        rows = {r["agent"]: r for r in json.loads(upstream.stdout)["restarted"]}
        assert rows["beta"]["loaded"] is True
        assert rows["beta"]["stoppedTurns"] == 0
        assert rows["alpha"]["loaded"] is False
    finally:
        daemon.stop()
