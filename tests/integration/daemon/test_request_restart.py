"""A request the daemon accepted survives the daemon's SIGKILL: the next daemon on the same
state routes it again on start and records its answer, so a caller re-attaching by its id gets
it, and a retry with the same ``Idempotency-Key`` starts no second Turn."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.support.daemon import Daemon, wait_until_processing

pytestmark = pytest.mark.timeout(120)


def client(directory: Path) -> httpx2.Client:
    transport = httpx2.HTTPTransport(uds=str(directory / ".goondan" / "api.sock"))
    return httpx2.Client(transport=transport, base_url="http://goondan", timeout=60)


def test_a_request_accepted_before_a_daemon_sigkill_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    body = {"input": f"hold {gate}", "instanceKey": "r1"}
    headers = {"Idempotency-Key": "restart-1"}
    first = Daemon(tmp_path)
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
    record = json.loads((tmp_path / ".goondan" / "requests" / f"{request_id}.json").read_text())
    assert record["state"] == "running"
    gate.touch()  # the Turn, routed again, may now finish
    second = Daemon(tmp_path)
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
