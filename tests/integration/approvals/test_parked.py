"""Tool calls parked for approval, through a real daemon, real agent processes and the HTTP API.

Every wait is on an event (the daemon's live runtime events) or an answer, under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orchestrator.callers import ApiToken
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.approvals import approval_swarm, runtime_events, watching

pytestmark = pytest.mark.timeout(120)


JSON = {"Content-Type": "application/json"}
"""What every POST says, a body or not."""


def client_of(state_dir: Path) -> httpx2.AsyncClient:
    transport = httpx2.AsyncHTTPTransport(uds=str(state_dir / "api.sock"))
    return httpx2.AsyncClient(transport=transport, base_url="http://goondan", timeout=30)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with approval_swarm(tmp_path) as orchestrator:
        yield orchestrator


@pytest.fixture
async def client(swarm: Orchestrator) -> AsyncIterator[httpx2.AsyncClient]:
    async with client_of(swarm.state_dir) as http:
        yield http


def workspace(orchestrator: Orchestrator, agent: str = "clerk") -> Path:
    return orchestrator.state_dir / "agents" / agent / "instances" / "default" / "workspace"


async def parked_request(
    orchestrator: Orchestrator, text: str, agent: str = "clerk"
) -> tuple[asyncio.Task[Any], dict[str, Any]]:
    """Start a request whose tool call parks; the request task and the approval event."""
    async with watching(orchestrator) as events:
        request = asyncio.ensure_future(orchestrator.request(text, agent=agent))
        requested = await events.next("approval.requested", agentName=agent)
    return request, requested


async def test_an_approved_call_runs_and_the_caller_gets_the_answer(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    request, requested = await parked_request(swarm, "write notes.txt hello world")
    approval_id = requested["approvalId"]
    assert not (workspace(swarm) / "notes.txt").exists()

    listed = (await client.get("/v1/approvals")).json()["approvals"]
    assert [row["approvalId"] for row in listed] == [approval_id]
    row = listed[0]
    assert (row["agentName"], row["instanceKey"], row["toolName"]) == (
        "clerk",
        "default",
        "file-system__write",
    )
    assert row["arguments"] == {"path": "notes.txt", "content": "hello world"}
    assert row["traceId"] == requested["traceId"]
    assert row["status"] == "pending"
    assert row["expiresAt"] > row["requestedAt"]

    approved = await client.post(f"/v1/approvals/{approval_id}/approve", headers=JSON)
    assert approved.status_code == 200
    assert approved.json()["approval"]["status"] == "approved"
    # Who approved: this process (the daemon runs in it too), as api.sock's peer.
    assert approved.json()["approval"]["decidedBy"] == {
        "via": "unix",
        "pid": os.getpid(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "user": pwd.getpwuid(os.getuid()).pw_name,
    }
    async with asyncio.timeout(30):
        answer = await request
    assert (answer.status, answer.output) == ("ok", "wrote 11 bytes to notes.txt")
    assert (workspace(swarm) / "notes.txt").read_text() == "hello world"
    assert (await client.get("/v1/approvals")).json()["approvals"] == []
    every = (await client.get("/v1/approvals", params={"all": "1"})).json()["approvals"]
    assert [r["status"] for r in every] == ["approved"]
    assert every[0]["decidedBy"] == approved.json()["approval"]["decidedBy"]


async def test_an_approval_with_edited_arguments_runs_those(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    request, requested = await parked_request(swarm, "write notes.txt rm -rf")
    edited = {"path": "safe.txt", "content": "ok"}
    approved = await client.post(
        f"/v1/approvals/{requested['approvalId']}/approve", json={"arguments": edited}
    )
    assert approved.status_code == 200
    assert approved.json()["approval"]["decidedArguments"] == edited
    async with asyncio.timeout(30):
        answer = await request
    assert answer.output == "wrote 2 bytes to safe.txt"
    assert (workspace(swarm) / "safe.txt").read_text() == "ok"
    assert not (workspace(swarm) / "notes.txt").exists()


async def test_a_rejection_reaches_the_model_as_e_tool_rejected(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    request, requested = await parked_request(swarm, "run echo hi")
    rejected = await client.post(
        f"/v1/approvals/{requested['approvalId']}/reject", json={"reason": "no shell today"}
    )
    assert rejected.status_code == 200
    assert rejected.json()["approval"]["status"] == "rejected"
    async with asyncio.timeout(30):
        answer = await request
    assert answer.output.startswith("ERROR E_TOOL_REJECTED: ")
    assert "no shell today" in answer.output


async def test_no_decision_in_time_is_e_tool_approval_timeout(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    request, requested = await parked_request(swarm, "write late.txt x", agent="hasty")
    async with asyncio.timeout(30):
        answer = await request  # hasty waits one second
    assert answer.output.startswith("ERROR E_TOOL_APPROVAL_TIMEOUT: ")
    assert not (workspace(swarm, "hasty") / "late.txt").exists()
    late = await client.post(f"/v1/approvals/{requested['approvalId']}/approve", headers=JSON)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "APPROVAL_ALREADY_DECIDED")


async def test_unknown_twice_and_bad_bodies(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    unknown = await client.post("/v1/approvals/apr_0123456789abcdef/approve", headers=JSON)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "APPROVAL_NOT_FOUND")
    assert (await client.get("/v1/approvals/../../etc")).status_code == 404
    assert (await client.get("/v1/approvals/apr_0123456789abcdef")).status_code == 404

    request, requested = await parked_request(swarm, "write a.txt b")
    path = f"/v1/approvals/{requested['approvalId']}"
    for url, body in [
        (f"{path}/reject", {}),
        (f"{path}/reject", {"reason": "   "}),
        (f"{path}/approve", {"arguments": "rm -rf /"}),
        (f"{path}/approve", {"args": {}}),
    ]:
        bad = await client.post(url, json=body)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "BAD_REQUEST"), body
    not_json = await client.post(f"{path}/approve", content=b"[1]", headers=JSON)
    assert not_json.status_code == 400
    misfit = await client.post(f"{path}/approve", json={"arguments": {"path": 3}})
    assert (misfit.status_code, misfit.json()["error"]["code"]) == (
        400,
        "APPROVAL_INVALID_ARGUMENTS",
    )
    assert (await client.get(path)).json()["approval"]["status"] == "pending"

    assert (await client.post(f"{path}/approve", headers=JSON)).status_code == 200
    twice = await client.post(f"{path}/reject", json={"reason": "too late"})
    assert (twice.status_code, twice.json()["error"]["code"]) == (409, "APPROVAL_ALREADY_DECIDED")
    async with asyncio.timeout(30):
        assert (await request).output == "wrote 1 bytes to a.txt"


async def test_a_parked_call_survives_a_sigkill_of_its_agent(
    swarm: Orchestrator, client: httpx2.AsyncClient
) -> None:
    request, requested = await parked_request(swarm, "write kept.txt still here")
    approval_id = requested["approvalId"]
    handle = swarm.supervisor.handle("clerk")
    old_pid = handle.pid
    assert old_pid is not None
    async with watching(swarm) as events:
        os.kill(old_pid, signal.SIGKILL)
        # The restarted agent takes the parked Turn up again; the caller keeps waiting.
        resumed = await events.next("approval.resumed", approvalId=approval_id)
    assert not request.done()
    assert handle.pid not in (None, old_pid)
    listed = (await client.get("/v1/approvals")).json()["approvals"]
    assert [row["approvalId"] for row in listed] == [approval_id]

    async with watching(swarm) as events:
        approved = await client.post(f"/v1/approvals/{approval_id}/approve?wait=1", headers=JSON)
        assert approved.status_code == 200
        done = await events.next("turn.completed", traceId=resumed["traceId"])
    assert done["output"] == "wrote 10 bytes to kept.txt"
    # The approve call waited for the resumed Turn and returns its answer.
    assert approved.json()["turn"]["status"] == "ok"
    assert approved.json()["turn"]["output"] == "wrote 10 bytes to kept.txt"
    async with asyncio.timeout(30):  # and so does the caller who asked before the kill
        assert (await request).output == "wrote 10 bytes to kept.txt"
    assert (workspace(swarm) / "kept.txt").read_text() == "still here"
    # The resumed Turn's answer is in the conversation, after the tool result, once.
    conversation = await client.post("/v1/agents/clerk/requests", json={"input": "read kept.txt"})
    assert conversation.json()["output"] == "read: still here"
    base = (workspace(swarm).parent / "conversation" / "base.jsonl").read_text()
    assert base.count("wrote 10 bytes to kept.txt") == 1
    assert base.count('"E_TOOL_INTERRUPTED"') == 0


async def test_a_parked_call_survives_a_daemon_restart(tmp_path: Path) -> None:
    async with approval_swarm(tmp_path) as first:
        request, requested = await parked_request(first, "write after.txt restarted")
        approval_id = requested["approvalId"]
    # The graceful stop answered the caller (the Turn is cut short), the call stays parked.
    crashed = await request
    assert crashed.error is not None
    assert crashed.error.code == "SHUTTING_DOWN"
    assert approval_id in crashed.error.message

    async with approval_swarm(tmp_path) as second, client_of(second.state_dir) as client:
        listed = (await client.get("/v1/approvals")).json()["approvals"]
        assert [row["approvalId"] for row in listed] == [approval_id]
        async with watching(second) as events:
            approved = await client.post(f"/v1/approvals/{approval_id}/approve", headers=JSON)
            assert approved.status_code == 200
            done = await events.next("turn.completed", traceId=requested["traceId"])
        assert done["output"] == "wrote 9 bytes to after.txt"
        assert (workspace(second) / "after.txt").read_text() == "restarted"
        handle = second.supervisor.handle("clerk")
        assert handle.status in (ProcessStatus.IDLE, ProcessStatus.PROCESSING)
    types = [e["type"] for e in runtime_events(tmp_path / "state") if e.get("approvalId")]
    assert types == [
        "approval.requested",
        "approval.resumed",
        "approval.decided",
    ]


async def test_a_token_names_the_decision_and_api_sock_needs_none(tmp_path: Path) -> None:
    token = ApiToken("OPS_TOKEN", "s3cret-token")
    options: dict[str, Any] = {"api_listen": "127.0.0.1:0", "api_token": token}
    async with approval_swarm(tmp_path, **options) as swarm, watching(swarm) as events:
        assert swarm.api is not None
        request, requested = await parked_request(swarm, "write notes.txt by token")
        approve = f"/v1/approvals/{requested['approvalId']}/approve"
        base = f"http://127.0.0.1:{swarm.api.port}"
        async with httpx2.AsyncClient(base_url=base, timeout=30) as anonymous:
            assert (await anonymous.post(approve, headers=JSON)).status_code == 401
        async with client_of(swarm.state_dir) as http:  # the CLI's way in holds no token
            assert (await http.get("/v1/approvals")).status_code == 200
        bearer = {"Authorization": f"Bearer {token.secret}"}
        async with httpx2.AsyncClient(base_url=base, headers=bearer, timeout=30) as http:
            approved = await http.post(approve, headers=JSON)
        assert approved.status_code == 200, approved.text
        decided_by = approved.json()["approval"]["decidedBy"]
        assert decided_by["via"] == "tcp"
        assert decided_by["token"] == "OPS_TOKEN"
        assert decided_by["address"].startswith("127.0.0.1:")
        assert "anonymous" not in decided_by
        assert "s3cret" not in json.dumps(decided_by)
        decided = await events.next("approval.decided", approvalId=requested["approvalId"])
        assert decided["decidedBy"] == decided_by
        async with asyncio.timeout(30):
            assert (await request).status == "ok"
