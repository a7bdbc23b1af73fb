"""A request the daemon accepted survives the daemon's SIGKILL: the next daemon on the same
state routes it again on start and records its answer, so a caller re-attaching by its id gets
it, and a retry with the same ``Idempotency-Key`` starts no second Turn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tests.support.daemon import Daemon, run_cli, wait_until_processing

pytestmark = pytest.mark.timeout(120)
RESUMES = 3
"""``policy.crash.maxTurnAttempts``: the daemon's SIGKILL takes its agents with it, and the
Turn it interrupted resumes after the restart."""


def client(directory: Path) -> httpx2.Client:
    transport = httpx2.HTTPTransport(uds=str(directory / ".goondan" / "api.sock"))
    return httpx2.Client(transport=transport, base_url="http://goondan", timeout=60)


def test_a_request_accepted_before_a_daemon_sigkill_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    body = {"input": f"hold {gate}", "instanceKey": "r1"}
    headers = {"Idempotency-Key": "restart-1"}
    first = Daemon(tmp_path, turn_attempts=RESUMES)
    try:
        first.wait_for("orchestrator started")
        with client(tmp_path) as http:
            sent = http.post("/v1/agents/beta/sends", json=body, headers=headers)
            assert sent.status_code == 202
            request_id = sent.headers["x-goondan-request-id"]
            wait_until_processing(tmp_path, "beta")
            running = http.get(f"/v1/requests/{request_id}")
            assert running.json() == {"requestId": request_id, "state": "running"}
    finally:
        first.stop()  # SIGKILL, the whole group: the daemon and its agents
    journal = (tmp_path / ".goondan" / "requests").glob("journal-*.jsonl")
    lines = [json.loads(line) for path in journal for line in path.read_text().splitlines()]
    [record] = [line for line in lines if line["requestId"] == request_id]
    assert record["state"] == "running"  # the one line a killed daemon left: accepted
    gate.touch()  # the Turn, routed again, may now finish
    second = Daemon(tmp_path, turn_attempts=RESUMES)
    try:
        second.wait_for("orchestrator started")
        resumed = second.wait_for("resuming an accepted request")
        assert resumed["request_id"] == request_id
        with client(tmp_path) as http:
            done = http.get(f"/v1/requests/{request_id}?wait=60")
            assert done.json()["state"] == "done"
            answer = done.json()["answer"]
            assert (answer["status"], answer["output"]) == ("ok", "released")
            assert answer["requestId"] == request_id
            again = http.post("/v1/agents/beta/sends", json=body, headers=headers)
            assert again.status_code == 202
            assert again.headers["idempotent-replayed"] == "true"
            assert again.json()["requestId"] == request_id
            other = {**body, "input": "something else"}
            refused = http.post("/v1/agents/beta/sends", json=other, headers=headers)
            assert refused.status_code == 422
    finally:
        second.stop()


def test_a_cli_send_rides_out_a_daemon_restart_and_a_retry_runs_no_second_turn(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    command = [sys.executable, "-m", "orchestrator", "send", "beta", f"hold {gate}"]
    command += ["--instance", "c1", "--idempotency-key", "cli-1"]
    first = Daemon(tmp_path, turn_attempts=RESUMES)
    waiting: subprocess.Popen[str] | None = None
    try:
        first.wait_for("orchestrator started")
        waiting = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_until_processing(tmp_path, "beta")
        first.stop()  # SIGKILL mid-Turn: the CLI's connection drops
        gate.touch()
        second = Daemon(tmp_path, turn_attempts=RESUMES)
        try:
            second.wait_for("orchestrator started")
            out, err = waiting.communicate(timeout=90)  # it picks the request up by its id
            assert (waiting.returncode, out.strip()) == (0, "released"), err
            again = run_cli(*command[3:], cwd=tmp_path)  # the same key: the same answer
            assert (again.returncode, again.stdout.strip()) == (0, "released")
            other = run_cli("send", "beta", "else", "--idempotency-key", "cli-1", cwd=tmp_path)
            assert other.returncode == 1
            assert "IDEMPOTENCY_KEY_REUSED" in other.stderr or "another" in other.stderr
        finally:
            second.stop()
    finally:
        first.stop()
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait()
