"""The operator CLI against a real daemon, through its API socket: status, send, restart,
instances, one daemon per state, stale sockets, hostile clients."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path)
    running.wait_for("agent ready")
    yield running
    running.stop()


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=tmp_path)


def test_socket_is_owner_only(daemon: Daemon, tmp_path: Path) -> None:
    path = tmp_path / ".goondan" / "api.sock"
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_status_send_and_restart(daemon: Daemon, tmp_path: Path) -> None:
    status = json.loads(cli(tmp_path, "status", "--json").stdout)
    rows = {row["agent"]: row for row in status["agents"]}
    assert rows["alpha"]["status"] == "idle"
    assert rows["beta"]["status"] == "notStarted"  # not started until first use

    sent = cli(tmp_path, "send", "beta", "hello there")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "beta got: hello there"
    beta_pid = json.loads(cli(tmp_path, "status", "--json").stdout)["agents"][1]["pid"]

    restarted = cli(tmp_path, "restart", "beta", "--json")
    assert restarted.returncode == 0, restarted.stderr
    new_pid = json.loads(restarted.stdout)["restarted"][0]["pid"]
    assert new_pid != beta_pid
    # the conversation survives the restart: the earlier user message is still on disk
    conversation = (
        tmp_path
        / ".goondan"
        / "agents"
        / "beta"
        / "instances"
        / "default"
        / "conversation"
        / "base.jsonl"
    )
    assert "hello there" in conversation.read_text()
    assert cli(tmp_path, "send", "beta", "again").stdout.strip() == "beta got: again"

    text = cli(tmp_path, "status").stdout
    assert "alpha" in text
    assert "idle" in text


def test_a_second_daemon_on_the_same_state_is_refused(daemon: Daemon, tmp_path: Path) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert cli(tmp_path, "status").returncode == 0  # the first one is unharmed


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    state = tmp_path / ".goondan"
    state.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(state / "api.sock"))
    stale.close()  # a socket file nobody listens on, as a SIGKILLed daemon leaves behind
    running = Daemon(tmp_path)
    try:
        running.wait_for("agent ready")
        assert cli(tmp_path, "status").returncode == 0
    finally:
        running.stop()


def test_status_without_a_daemon_exits_non_zero(tmp_path: Path) -> None:
    done = cli(tmp_path, "status")
    assert done.returncode == 5  # network: nobody answers
    assert "no daemon is running" in done.stderr


def test_the_socket_is_removed_on_exit(tmp_path: Path) -> None:
    import signal

    running = Daemon(tmp_path)
    running.wait_for("agent ready")
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(timeout=30) == 0
    running.stop()
    assert not (tmp_path / ".goondan" / "api.sock").exists()
    assert os.path.isdir(tmp_path / ".goondan")


def test_instances_list_and_delete(daemon: Daemon, tmp_path: Path) -> None:
    assert cli(tmp_path, "send", "beta", "one", "--instance", "u/1").returncode == 0
    assert cli(tmp_path, "send", "beta", "two").returncode == 0
    rows = json.loads(cli(tmp_path, "instances", "beta", "--json").stdout)
    assert sorted(r["instanceKey"] for r in rows) == ["default", "u/1"]
    deleted = cli(tmp_path, "instances", "delete", "beta", "u/1")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == "deleted"
    rows = json.loads(cli(tmp_path, "instances", "--json").stdout)
    assert ("beta", "u/1") not in {(r["agentName"], r["instanceKey"]) for r in rows}
    assert cli(tmp_path, "instances", "delete", "beta", "nope").stdout.strip() == "not found"
    # the agent starts that conversation afresh
    assert cli(tmp_path, "send", "beta", "three", "--instance", "u/1").returncode == 0
    rows = json.loads(cli(tmp_path, "instances", "beta", "--json").stdout)
    assert "u/1" in {r["instanceKey"] for r in rows}


def wait_status(tmp_path: Path, agent: str, wanted: str, deadline: float = 20) -> dict[str, object]:
    """Ask the daemon until ``agent`` is in ``wanted`` (each ask is a real status command)."""
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        rows = {
            r["agent"]: r for r in json.loads(cli(tmp_path, "status", "--json").stdout)["agents"]
        }
        if rows[agent]["status"] == wanted:
            return rows[agent]
    raise AssertionError(f"{agent} never became {wanted}")


def test_status_follows_processing_crash_and_restart(daemon: Daemon, tmp_path: Path) -> None:
    assert cli(tmp_path, "send", "beta", "hi").returncode == 0
    gate = tmp_path / "gate"  # the Turn runs until this file exists
    assert cli(tmp_path, "send", "beta", f"hold {gate}", "--no-wait").returncode == 0
    busy = wait_status(tmp_path, "beta", "processing")
    assert busy["pid"]
    gate.touch()
    wait_status(tmp_path, "beta", "idle")
    crashed = cli(tmp_path, "send", "beta", "crash")
    assert crashed.returncode == 1
    assert "AGENT_CRASHED" in crashed.stderr
    row = wait_status(tmp_path, "beta", "idle")
    assert row["crashes"] == 1
    assert row["restarts"] >= 1
    assert row["lastExit"] == {"exitCode": 1, "signal": None, "reason": "exit code 1"}


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_an_empty_send_is_refused_before_it_is_queued(
    daemon: Daemon, tmp_path: Path, text: str
) -> None:
    sent = cli(tmp_path, "send", "beta", text)
    assert sent.returncode == 1
    assert "empty" in sent.stderr
    assert "internal error" not in sent.stderr
    # nothing reached the agent: it was never even started
    rows = {r["agent"]: r for r in json.loads(cli(tmp_path, "status", "--json").stdout)["agents"]}
    assert rows["beta"]["status"] == "notStarted"


def test_a_delegate_without_text_from_an_agent_is_refused(daemon: Daemon, tmp_path: Path) -> None:
    # alpha's rule "ask beta <text>" with only blanks after it: the router refuses at once
    sent = cli(tmp_path, "send", "alpha", "ask beta timeout=5000   ")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("ERROR EMPTY_INPUT"), sent.stdout


def test_the_daemon_dying_during_a_send_is_its_own_error(daemon: Daemon, tmp_path: Path) -> None:
    import signal
    import time

    from orchestrator.http.client import EXIT_NO_ANSWER

    client = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", "beta", "slow 30", "--reattach", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until beta runs the Turn (a real status ask)
            rows = {
                r["agent"]: r
                for r in json.loads(cli(tmp_path, "status", "--json").stdout)["agents"]
            }
            if rows["beta"]["status"] == "processing":
                break
        else:
            raise AssertionError("beta never started the slow Turn")
        os.killpg(daemon.process.pid, signal.SIGKILL)
        _, stderr = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == EXIT_NO_ANSWER, stderr
    assert "the daemon went away before answering" in stderr
    assert "internal error" not in stderr


def test_hundreds_of_concurrent_requests_are_all_answered(daemon: Daemon, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.http.client import DaemonApi

    api = DaemonApi(tmp_path / ".goondan")
    with ThreadPoolExecutor(max_workers=600) as pool:
        answers = list(pool.map(lambda _: api.call("GET", "/v1/agents"), range(600)))
    assert all(status == 200 and body["agents"] for status, body in answers)


def test_idle_connections_cannot_lock_operators_out(daemon: Daemon, tmp_path: Path) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    # The usual limit of a service: fewer descriptors than the connections below.
    resource.prlimit(daemon.process.pid, resource.RLIMIT_NOFILE, (1024, 1024))
    path = str(tmp_path / ".goondan" / "api.sock")
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):  # more than the daemon's 1024 descriptors
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            idle.append(client)
        status = cli(tmp_path, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["agents"]
        restarted = cli(tmp_path, "restart", "alpha")
        assert restarted.returncode == 0, restarted.stderr
    finally:
        for client in idle:
            client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_cancel_answers_the_waiting_send_with_cancelled(daemon: Daemon, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    held = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", "beta", f"hold {gate}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_status(tmp_path, "beta", "processing")
        listed = cli(tmp_path, "requests", "--json")
        assert listed.returncode == 0, listed.stderr
        [request] = json.loads(listed.stdout)
        assert (request["caller"], request["agent"]) == ("user", "beta")
        assert request["requestId"] in cli(tmp_path, "requests").stdout
        done = cli(tmp_path, "cancel", request["traceId"], "--reason", "changed my mind")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"cancelled trace {request['traceId']}"
        _, stderr = held.communicate(timeout=30)
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
        gate.touch()
    assert held.returncode == 1
    assert "CANCELLED" in stderr
    assert "changed my mind" in stderr
    again = cli(tmp_path, "cancel", request["traceId"])
    assert again.returncode == 1
    assert "no running request" in again.stderr
