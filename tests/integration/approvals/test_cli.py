"""``approvals``, ``approve`` and ``reject``: the real CLI against a real daemon process.

Waits are on the daemon's JSON log (agents log to its stderr) and on CLI processes, under
deadlines.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ipc.scope import SCOPE_ENV
from tests.support.approvals import kill_daemon, start_daemon, write_approval_swarm
from tests.support.daemon import read_log_until, run_cli

pytestmark = pytest.mark.timeout(120)


def start_send(directory: Path, agent: str, text: str) -> subprocess.Popen[str]:
    """``send AGENT TEXT`` in the background: it waits for the answer."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", agent, text],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def pending(directory: Path) -> list[dict[str, Any]]:
    listed = run_cli("approvals", "--json", cwd=directory)
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    return rows


def workspace(directory: Path, agent: str) -> Path:
    return directory / ".goondan" / "agents" / agent / "instances" / "default" / "workspace"


def test_list_approve_with_arguments_and_refusals(tmp_path: Path) -> None:
    write_approval_swarm(tmp_path)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(daemon, "orchestrator started")
        send = start_send(tmp_path, "clerk", "run echo from-the-model")
        log = read_log_until(daemon, "tool call waits for approval", log=log)
        [row] = pending(tmp_path)
        assert (row["toolName"], row["arguments"]) == (
            "bash__exec",
            {"command": "echo from-the-model"},
        )
        text = run_cli("approvals", cwd=tmp_path)
        assert row["approvalId"] in text.stdout
        assert "clerk@default  bash__exec" in text.stdout

        not_json = run_cli("approve", row["approvalId"], "--args", "{nope", cwd=tmp_path)
        assert not_json.returncode == 2
        misfit = run_cli("approve", row["approvalId"], "--args", '{"command": 3}', cwd=tmp_path)
        assert misfit.returncode == 1
        assert "APPROVAL_INVALID_ARGUMENTS" in misfit.stderr
        approved = run_cli(
            "approve", row["approvalId"], "--args", '{"command": "echo edited"}', cwd=tmp_path
        )
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == f"approved {row['approvalId']} (bash__exec)"
        answer, complaint = send.communicate(timeout=60)
        assert send.returncode == 0, complaint
        assert answer.strip() == "ran: edited"

        twice = run_cli("reject", row["approvalId"], "--reason", "late", cwd=tmp_path)
        assert twice.returncode == 1
        assert "APPROVAL_ALREADY_DECIDED" in twice.stderr
        unknown = run_cli("approve", "apr_0000000000000000", cwd=tmp_path)
        assert unknown.returncode == 1
        assert "APPROVAL_NOT_FOUND" in unknown.stderr
        assert pending(tmp_path) == []
        decided = json.loads(run_cli("approvals", "--all", "--json", cwd=tmp_path).stdout)
        assert [r["status"] for r in decided] == ["approved"]
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        kill_daemon(daemon)


def test_reject_reaches_the_model(tmp_path: Path) -> None:
    write_approval_swarm(tmp_path)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(daemon, "orchestrator started")
        send = start_send(tmp_path, "clerk", "write secret.txt hush")
        read_log_until(daemon, "tool call waits for approval", log=log)
        [row] = pending(tmp_path)
        missing = run_cli("reject", row["approvalId"], cwd=tmp_path)
        assert missing.returncode == 2  # --reason is required
        rejected = run_cli("reject", row["approvalId"], "--reason", "not today", cwd=tmp_path)
        assert rejected.returncode == 0, rejected.stderr
        answer, _ = send.communicate(timeout=60)
        assert answer.startswith("ERROR E_TOOL_REJECTED: ")
        assert "not today" in answer
        assert not (workspace(tmp_path, "clerk") / "secret.txt").exists()
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        kill_daemon(daemon)


def test_a_parked_call_outlives_a_killed_daemon(tmp_path: Path) -> None:
    # hasty is not the entry agent: the new daemon starts it because it has a parked call.
    write_approval_swarm(tmp_path, hasty_timeout=3600)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(daemon, "orchestrator started")
        send = start_send(tmp_path, "hasty", "write kept.txt across restarts")
        read_log_until(daemon, "tool call waits for approval", log=log)
        [row] = pending(tmp_path)
    finally:
        kill_daemon(daemon)  # SIGKILL to the whole session: the daemon and its agents
        if send is not None:
            send.communicate(timeout=60)  # its daemon is gone: it fails, it does not hang
    assert send.returncode != 0
    # Listed with no daemon running: the records are on disk.
    assert [r["approvalId"] for r in pending(tmp_path)] == [row["approvalId"]]
    assert run_cli("approve", row["approvalId"], cwd=tmp_path).returncode == 5  # no daemon

    daemon = start_daemon(tmp_path)
    try:
        log = read_log_until(daemon, "agent has calls waiting for approval; starting it")
        log = read_log_until(daemon, "resuming a call parked for approval", log=log)
        assert [r["approvalId"] for r in pending(tmp_path)] == [row["approvalId"]]
        approved = run_cli("approve", row["approvalId"], "--wait", cwd=tmp_path)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.splitlines() == [
            f"approved {row['approvalId']} (file-system__write)",
            "wrote 15 bytes to kept.txt",
        ]
        read_log_until(daemon, "resumed turn answered", log=log)
        assert (workspace(tmp_path, "hasty") / "kept.txt").read_text() == "across restarts"
        trace = run_cli("logs", "--trace", row["traceId"], "--json", cwd=tmp_path)
        events = [json.loads(line) for line in trace.stdout.splitlines()]
        # The send the killed daemon had accepted is routed again after the restart: its
        # Turn had ended meanwhile, so its recorded answer is given again (a replay, no Step).
        replays = {e["turnId"] for e in events if e["type"] == "turn.resumed" and e["replayed"]}
        answered = [e for e in events if e["type"] == "turn.completed"]
        ran = [e.get("output") for e in answered if e["turnId"] not in replays]
        assert ran == ["wrote 15 bytes to kept.txt"]  # one Turn ran
        assert len(answered) - len(ran) <= 1  # at most the one replay
    finally:
        kill_daemon(daemon)


def test_a_decision_names_who_made_it(tmp_path: Path) -> None:
    write_approval_swarm(tmp_path)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(daemon, "orchestrator started")
        send = start_send(tmp_path, "clerk", "write notes.txt hi")
        read_log_until(daemon, "tool call waits for approval", log=log)
        [row] = pending(tmp_path)
        approve = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "approve", row["approvalId"]],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, complaint = approve.communicate(timeout=60)
        assert approve.returncode == 0, complaint
        answer, _ = send.communicate(timeout=60)
        assert answer.strip() == "wrote 2 bytes to notes.txt"

        [decided] = json.loads(run_cli("approvals", "--all", "--json", cwd=tmp_path).stdout)
        user = pwd.getpwuid(os.getuid()).pw_name
        assert decided["decidedBy"] == {
            "via": "unix",
            "pid": approve.pid,
            "uid": os.getuid(),
            "gid": os.getgid(),
            "user": user,
        }
        listed = run_cli("approvals", "--all", cwd=tmp_path)
        assert listed.stdout.strip().endswith(
            f"  approved by uid {os.getuid()} ({user}) pid {approve.pid} on api.sock"
            f" at {decided['decidedAt']}"
        )
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        kill_daemon(daemon)


def test_a_program_carrying_an_agents_scope_may_not_decide(tmp_path: Path) -> None:
    write_approval_swarm(tmp_path)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(daemon, "orchestrator started")
        send = start_send(tmp_path, "clerk", "write notes.txt hi")
        read_log_until(daemon, "tool call waits for approval", log=log)
        [row] = pending(tmp_path)
        # The scope of an agent (here another swarm's): whatever runs with it is no operator.
        scoped = {**os.environ, SCOPE_ENV: "1-feedfacefeedface"}
        refused = run_cli("approve", row["approvalId"], cwd=tmp_path, env=scoped)
        assert refused.returncode == 1
        assert "APPROVAL_FORBIDDEN" in refused.stderr
        assert "carries the process scope of an agent of another swarm" in refused.stderr
        assert [r["approvalId"] for r in pending(tmp_path)] == [row["approvalId"]]
        trace = run_cli("logs", "--trace", row["traceId"], "--json", cwd=tmp_path)
        events = [json.loads(line) for line in trace.stdout.splitlines()]
        [attempt] = [e for e in events if e["type"] == "approval.refused"]
        assert (attempt["approvalId"], attempt["decidedBy"]["via"]) == (row["approvalId"], "unix")
        assert send.poll() is None  # the call still waits
    finally:
        if send is not None:
            if send.poll() is None:
                send.kill()
            send.communicate(timeout=30)  # its pipes closed too
        kill_daemon(daemon)
