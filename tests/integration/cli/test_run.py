"""``python -m orchestrator run`` as a real subprocess: one-shot input, signals, no orphans."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli, wait_gone
from tests.support.swarm import write_swarm

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[3]


def test_the_example_hands_off_to_the_worker_and_answers(tmp_path: Path) -> None:
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml.example")
    done = run_cli(
        "run",
        "goondan.yaml.example",
        "--input",
        "write notes.txt hello world",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "ok"
    assert answer["output"] == "Done. The worker reports: wrote 11 bytes to notes.txt"
    assert (answer["agent"], answer["instanceKey"]) == ("coordinator", "default")
    written = (
        tmp_path
        / ".goondan"
        / "agents"
        / "worker"
        / "instances"
        / "default"
        / "workspace"
        / "notes.txt"
    )
    assert written.read_text() == "hello world"
    # one trace across both agents' log lines
    traces = {
        json.loads(line).get("trace_id")
        for line in done.stderr.splitlines()
        if "turn finished" in line
    }
    assert traces == {answer["traceId"]}


def test_a_failed_request_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    write_swarm(tmp_path)
    done = run_cli("run", "goondan.yaml", "--input", "crash", "--agent", "beta", cwd=tmp_path)
    assert done.returncode == 1
    assert "AGENT_CRASHED" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_invalid_bundle_exits_4_with_errors(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: s}\nspec: {}\n"
    )
    done = run_cli("run", "goondan.yaml", "--input", "x", cwd=tmp_path)
    assert done.returncode == 4
    assert "E_CONFIG_SCHEMA_INVALID" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path)
    yield running
    running.stop()


def test_sigterm_stops_the_daemon_gracefully(daemon: Daemon) -> None:
    daemon.wait_for("agent ready")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.process.wait(timeout=30) == 0
    daemon.wait_for("orchestrator stopped")
    for pid in daemon.child_pids():
        assert wait_gone(pid)


def test_sigkill_of_the_orchestrator_leaves_no_child_alive(daemon: Daemon) -> None:
    daemon.wait_for("agent ready")
    children = daemon.child_pids()
    assert children
    daemon.process.kill()
    daemon.process.wait(timeout=10)
    for pid in children:
        assert wait_gone(pid), f"agent process {pid} outlived the orchestrator"


def test_the_interactive_prompt_answers_and_stops_on_eof(tmp_path: Path) -> None:
    """On a terminal the daemon offers a prompt to the entry agent; Ctrl-D stops it cleanly."""
    import pty

    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    pid, fd = pty.fork()
    if pid == 0:  # the child: become the daemon on the pseudo-terminal
        os.chdir(tmp_path)
        os.execv(
            sys.executable,
            [sys.executable, "-m", "orchestrator", "run", "goondan.yaml", "--log-level", "warning"],
        )
    seen = b""

    def read_until(token: bytes, deadline: float = 30) -> bool:
        nonlocal seen
        end = time.monotonic() + deadline
        while token not in seen and time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                break
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
        return token in seen

    try:
        assert read_until(b"coordinator> "), seen
        os.write(fd, b"write a.txt hi there\n")
        assert read_until(b"wrote 8 bytes to a.txt"), seen
        os.write(fd, b"\x04")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_logs_follow_one_trace_across_agents(tmp_path: Path) -> None:
    """Runtime events: one traceId across the handoff, spans linked caller tool → callee turn."""
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    done = run_cli(
        "run", "goondan.yaml", "--input", "write notes.txt hello", "--json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["traceId"]
    logs = run_cli("logs", "goondan.yaml", "--trace", trace, "--json", cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    events = [json.loads(line) for line in logs.stdout.splitlines()]
    assert {e["traceId"] for e in events} == {trace}
    assert {e["agentName"] for e in events} == {"coordinator", "worker"}
    kinds = [(e["agentName"], e["type"]) for e in events]
    assert kinds[:3] == [
        ("coordinator", "turn.started"),
        ("coordinator", "step.started"),
        ("coordinator", "tool.called"),
    ]
    assert kinds[-1] == ("coordinator", "turn.completed")
    spans = {e["spanId"]: e for e in events}
    delegate_call = next(
        e for e in events if e["type"] == "tool.called" and e["agentName"] == "coordinator"
    )
    worker_turn = next(
        e for e in events if e["type"] == "turn.started" and e["agentName"] == "worker"
    )
    assert worker_turn["parentSpanId"] == delegate_call["spanId"]
    for event in events:
        if event["type"].startswith("step."):
            assert spans[event["parentSpanId"]]["type"].startswith("turn.")
        if event["type"].startswith("tool."):
            assert spans[event["parentSpanId"]]["type"].startswith("step.")
    worker_only = run_cli("logs", "goondan.yaml", "--agent", "worker", "--json", cwd=tmp_path)
    assert {json.loads(line)["agentName"] for line in worker_only.stdout.splitlines()} == {"worker"}
    lifecycle = run_cli("logs", "goondan.yaml", "--since", "1h", cwd=tmp_path)
    assert "process.spawned" in lifecycle.stdout
    assert "process.exited" in lifecycle.stdout
