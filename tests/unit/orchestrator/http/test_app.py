"""The HTTP API's routes, served in-process from a fake swarm through httpx's ASGI transport:
status codes, bodies, errors naming the field, what reaches the swarm, and the doors (token,
origin, content type). What must cross a real socket (peers, hostile clients, listeners) is in
tests/integration/http."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Sequence

import httpx2
import pytest
from starlette.types import ASGIApp

from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import (
    ApprovalRefusedEvent,
    ProcessAdoptedEvent,
    ProcessConfigAppliedEvent,
    ProcessSpawnedEvent,
)
from orchestrator.callers import ApiToken, Peer, with_peer
from orchestrator.http.app import build_app
from orchestrator.http.metrics import SwarmMetrics
from orchestrator.limits.usage import TRACES_KEPT
from orchestrator.operations.answers import (
    ApprovalRow,
    ApprovalStatus,
    InstanceRow,
    PendingRow,
    TraceUsage,
)
from orchestrator.operations.encoding import convert, plain
from orchestrator.status import ExitInfo
from tests.support.fake_swarm import FakeSwarm, approval

JSON = {"Content-Type": "application/json"}
"""What every POST and DELETE says, a body or not."""
OPERATOR = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
"""This process on ``api.sock``: the daemon's own user, no agent of the swarm."""


def serve(
    swarm: FakeSwarm,
    *,
    tokens: Sequence[ApiToken] = (),
    peer: Peer | None = OPERATOR,
    metrics: SwarmMetrics | None = None,
) -> httpx2.AsyncClient:
    app: ASGIApp = with_peer(build_app(swarm, tokens, metrics=metrics), peer)
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://goondan")


@pytest.fixture
def swarm() -> FakeSwarm:
    return FakeSwarm()


@pytest.fixture
async def client(swarm: FakeSwarm) -> AsyncIterator[httpx2.AsyncClient]:
    async with serve(swarm) as http:
        yield http


def error_of(response: httpx2.Response) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


async def test_health_readiness_and_status(client: httpx2.AsyncClient, swarm: FakeSwarm) -> None:
    health = await client.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"ok": True, "pid": os.getpid()})
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (
        200,
        {"ready": True, "entryAgent": "alpha", "status": "idle"},
    )
    status = (await client.get("/v1/agents")).json()
    assert (status["swarm"], status["pid"]) == ("demo", os.getpid())
    assert [row["agent"] for row in status["agents"]] == ["alpha", "beta"]
    swarm.stopping = True
    assert (await client.get("/readyz")).status_code == 503


async def test_an_entry_agent_not_started_is_not_ready(swarm: FakeSwarm) -> None:
    swarm.entry_agent = "beta"
    async with serve(swarm) as client:
        ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()["status"]) == (503, "notStarted")


async def test_a_request_reaches_the_swarm_with_its_options(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    body = {"input": "hello", "instanceKey": "k1", "timeoutMs": 5000}
    answer = await client.post("/v1/agents/beta/requests", json=body)
    assert (answer.status_code, answer.json()["output"]) == (200, "done")
    assert swarm.asked == [
        {
            "text": "hello",
            "agent": "beta",
            "instanceKey": "k1",
            "timeoutMs": 5000,
            "relay": False,
            "streamed": False,
        }
    ]


async def test_a_failed_request_is_a_502_with_the_structured_error(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.answer = DelegateAnswer.failure(IpcError("it crashed", code="AGENT_CRASHED"))
    answer = await client.post("/v1/agents/alpha/requests", json={"input": "crash"})
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "AGENT_CRASHED"


@pytest.mark.parametrize(
    ("method", "path", "content", "status", "code", "field"),
    [
        ("GET", "/nowhere", None, 404, "NOT_FOUND", None),
        ("POST", "/v1/agents/nobody/requests", b'{"input": "hi"}', 404, "NOT_FOUND", None),
        ("POST", "/v1/agents/nobody/sends", b'{"input": "hi"}', 404, "NOT_FOUND", None),
        ("POST", "/v1/agents/nobody/restart", None, 404, "NOT_FOUND", None),
        ("GET", "/v1/instances?agent=nobody", None, 404, "NOT_FOUND", None),
        ("GET", "/v1/approvals?agent=nobody", None, 404, "NOT_FOUND", None),
        ("GET", "/v1/events?agent=nobody", None, 404, "NOT_FOUND", None),
        ("GET", "/v1/agents/alpha/requests", None, 405, "METHOD_NOT_ALLOWED", None),
        ("POST", "/v1/agents/alpha/requests", b"{not json", 400, "BAD_REQUEST", None),
        ("POST", "/v1/agents/alpha/requests", b"[1, 2]", 400, "BAD_REQUEST", None),
        ("POST", "/v1/agents/alpha/requests", b'{"input": "  "}', 400, "BAD_REQUEST", "input"),
        ("POST", "/v1/agents/alpha/requests", b"{}", 400, "BAD_REQUEST", "input"),
        (
            "POST",
            "/v1/agents/alpha/requests",
            b'{"input": "hi", "timeoutMs": -1}',
            400,
            "BAD_REQUEST",
            "timeoutMs",
        ),
        (
            "POST",
            "/v1/agents/alpha/requests",
            b'{"input": "hi", "instanceKey": 7}',
            400,
            "BAD_REQUEST",
            "instanceKey",
        ),
        (
            "POST",
            "/v1/agents/alpha/sends",
            b'{"input": "hi", "stream": true}',
            400,
            "BAD_REQUEST",
            "stream",
        ),
        (
            "POST",
            "/v1/agents/alpha/requests",
            b"x" * (1024 * 1024 + 1),
            413,
            "PAYLOAD_TOO_LARGE",
            None,
        ),
        ("GET", "/v1/usage?traces=many", None, 400, "BAD_REQUEST", None),
    ],
)
async def test_bad_requests_get_a_json_error_naming_the_field(
    client: httpx2.AsyncClient,
    swarm: FakeSwarm,
    method: str,
    path: str,
    content: bytes | None,
    status: int,
    code: str,
    field: str | None,
) -> None:
    response = await client.request(method, path, content=content, headers=JSON)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["code"] == code
    assert error.get("field") == field
    assert swarm.asked == []  # nothing reached the swarm


async def test_a_send_is_accepted_and_handed_over(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    body = {"input": "remember the milk", "instanceKey": "notes"}
    sent = await client.post("/v1/agents/beta/sends", json=body)
    request_id = sent.headers["x-goondan-request-id"]
    assert (sent.status_code, sent.json()) == (
        202,
        {"accepted": True, "agent": "beta", "instanceKey": "notes", "requestId": request_id},
    )
    done = await client.get(f"/v1/requests/{request_id}?wait=5")  # the Turn, once it ran
    assert done.json()["state"] == "done"
    assert swarm.asked == [
        {
            "text": "remember the milk",
            "agent": "beta",
            "instanceKey": "notes",
            "timeoutMs": None,
            "relay": False,
            "streamed": False,
        }
    ]
    assert swarm.request_ids == [request_id]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/agents/alpha/requests"),
        ("POST", "/v1/agents/alpha/sends"),
        ("POST", "/v1/agents/alpha/restart"),
        ("POST", "/v1/agents/alpha/instances/k1/restart"),
        ("POST", "/v1/chat/completions"),
    ],
)
async def test_a_stopping_daemon_refuses_new_work(
    client: httpx2.AsyncClient, swarm: FakeSwarm, method: str, path: str
) -> None:
    swarm.stopping = True
    chat = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    body = chat if "chat" in path else {"input": "hi"}
    response = await client.request(method, path, json=body)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "SHUTTING_DOWN"
    assert swarm.asked == []


async def test_a_restart_answers_the_new_pid_and_what_fresh_deleted(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    plain = await client.post("/v1/agents/alpha/restart", headers=JSON)
    assert (plain.status_code, plain.json()) == (200, {"agent": "alpha", "pid": 5151})
    fresh = await client.post("/v1/agents/alpha/restart?fresh=1", headers=JSON)
    assert fresh.json()["deletedInstances"] == ["default"]
    assert swarm.asked == [
        {"restart": "alpha", "fresh": False},
        {"restart": "alpha", "fresh": True},
    ]


async def test_a_restart_the_swarm_refuses_is_a_409_saying_why(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.restart_refusal = "agent 'alpha' runs on node 'n1', which keeps its conversations"
    refused = await client.post("/v1/agents/alpha/restart?fresh=1", headers=JSON)
    assert refused.status_code == 409
    assert error_of(refused) == {"code": "HTTP_ERROR", "message": swarm.restart_refusal}


async def test_requests_are_listed_and_cancelled(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    row = {
        "requestId": "r1",
        "traceId": "t1",
        "caller": "external",
        "agent": "alpha",
        "instanceKey": "default",
        "startedAt": "2026-01-02T03:04:05.000Z",
    }
    swarm.pending_rows.append(convert(row, PendingRow))
    assert (await client.get("/v1/requests")).json() == {"requests": [row]}
    swarm.running["r1"] = ["t1"]
    cancelled = await client.post("/v1/requests/r1/cancel", json={"reason": "enough"})
    assert (cancelled.status_code, cancelled.json()) == (
        200,
        {"cancelled": ["t1"], "reason": "enough"},
    )
    again = await client.post("/v1/requests/r1/cancel", headers=JSON)
    assert (again.status_code, error_of(again)["code"]) == (404, "NOT_FOUND")
    bad = await client.post("/v1/requests/r1/cancel", json={"reason": 3})
    assert (bad.status_code, error_of(bad)["field"]) == (400, "reason")


async def test_usage_of_a_trace_and_of_the_latest_ones(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    trace = {
        "traceId": "t1",
        "root": "alpha",
        "agents": ["alpha"],
        "startedAt": None,
        "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "cost": 0, "calls": 2},
    }
    swarm.traces["t1"] = convert(trace, TraceUsage)
    assert (await client.get("/v1/usage?trace=t1")).json() == trace
    unknown = await client.get("/v1/usage?trace=t2")
    assert (unknown.status_code, error_of(unknown)["code"]) == (404, "NOT_FOUND")
    assert len((await client.get("/v1/usage")).json()["traces"]) == 50
    capped = await client.get(f"/v1/usage?traces={TRACES_KEPT + 1}")
    assert len(capped.json()["traces"]) == TRACES_KEPT


async def test_instances_are_listed_deleted_and_restarted(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.instance_rows = [
        InstanceRow(agent_name="alpha", instance_key="a1", directory="/a1"),
        InstanceRow(agent_name="beta", instance_key="b1", directory="/b1"),
    ]
    listed = (await client.get("/v1/instances", params={"agent": "beta"})).json()
    row = {"agentName": "beta", "instanceKey": "b1", "directory": "/b1"}
    assert listed == {"instances": [row]}
    deleted = await client.delete("/v1/agents/beta/instances/b1", headers=JSON)
    assert (deleted.status_code, deleted.json()) == (200, {"ok": True, "deleted": True})
    restarted = await client.post("/v1/agents/beta/instances/b1/restart", headers=JSON)
    assert (restarted.status_code, restarted.json()) == (
        200,
        {"agent": "beta", "instanceKey": "b1", "ok": True, "loaded": True, "stoppedTurns": 1},
    )
    swarm.instance_refusal = "a Turn of it runs"
    refused = await client.delete("/v1/agents/beta/instances/b1", headers=JSON)
    assert (refused.status_code, error_of(refused)) == (
        409,
        {"code": "INSTANCE_NOT_DELETED", "message": "a Turn of it runs"},
    )
    restart = await client.post("/v1/agents/beta/instances/b1/restart", headers=JSON)
    assert (restart.status_code, error_of(restart)["code"]) == (409, "INSTANCE_NOT_RESTARTED")


def parked(approval_id: str, status: ApprovalStatus = "pending") -> ApprovalRow:
    return approval(approval_id, status)


async def test_approvals_are_listed_and_shown(client: httpx2.AsyncClient, swarm: FakeSwarm) -> None:
    swarm.approval_rows = {"a1": parked("a1"), "a2": parked("a2", "approved")}
    pending = (await client.get("/v1/approvals")).json()["approvals"]
    assert [row["approvalId"] for row in pending] == ["a1"]
    every = (await client.get("/v1/approvals?all=1")).json()["approvals"]
    assert [row["approvalId"] for row in every] == ["a1", "a2"]
    shown = (await client.get("/v1/approvals/a2")).json()
    assert shown == {"approval": plain(parked("a2", "approved"))}
    unknown = await client.get("/v1/approvals/a3")
    assert (unknown.status_code, error_of(unknown)["code"]) == (404, "APPROVAL_NOT_FOUND")


async def test_an_operators_decision_reaches_the_swarm_with_who_made_it(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.approval_rows = {"a1": parked("a1"), "a2": parked("a2")}
    approved = await client.post("/v1/approvals/a1/approve?wait=1", json={"arguments": {"n": 1}})
    assert approved.status_code == 200
    rejected = await client.post("/v1/approvals/a2/reject", json={"reason": " too risky "})
    assert rejected.status_code == 200
    (approval, waited), (rejection, not_waited) = swarm.decisions
    assert (approval.decision, approval.arguments, waited) == ("approve", {"n": 1}, True)
    assert (rejection.decision, rejection.reason, not_waited) == ("reject", "too risky", False)
    assert approval.decided_by is not None
    assert (approval.decided_by["via"], approval.decided_by["pid"]) == ("unix", os.getpid())


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/approvals/a1/reject", {}),
        ("/v1/approvals/a1/reject", {"reason": "no", "extra": 1}),
        ("/v1/approvals/a1/approve", {"arguments": [1]}),
    ],
)
async def test_a_bad_decision_body_is_a_400(
    client: httpx2.AsyncClient, swarm: FakeSwarm, path: str, body: dict[str, object]
) -> None:
    response = await client.post(path, json=body)
    assert (response.status_code, error_of(response)["code"]) == (400, "BAD_REQUEST")
    assert swarm.decisions == []


async def test_a_decision_from_an_agents_process_is_refused_and_recorded(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.daemon_pid = 1  # the daemon is elsewhere; this process is an agent's
    swarm.agent_pids[os.getpid()] = "agent 'rogue'"
    swarm.approval_rows["a1"] = parked("a1")
    refused = await client.post("/v1/approvals/a1/approve", headers=JSON)
    assert (refused.status_code, error_of(refused)["code"]) == (403, "APPROVAL_FORBIDDEN")
    assert swarm.decisions == []
    [(event, agent)] = swarm.recorded
    assert isinstance(event, ApprovalRefusedEvent)
    assert (agent, event.approval_id) == ("alpha", "a1")


async def test_a_listener_with_tokens_wants_one_where_the_peer_is_not_api_sock(
    swarm: FakeSwarm,
) -> None:
    token = ApiToken("ci", "s3cret")
    async with serve(swarm, tokens=[token], peer=None) as client:
        bare = await client.get("/v1/agents")
        assert (bare.status_code, error_of(bare)["code"]) == (401, "UNAUTHORIZED")
        assert bare.headers["www-authenticate"] == "Bearer"
        wrong = await client.get("/v1/agents", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = await client.get("/v1/agents", headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200
    async with serve(swarm, tokens=[token]) as on_the_socket:
        assert (await on_the_socket.get("/v1/agents")).status_code == 200


async def test_web_pages_are_kept_out(client: httpx2.AsyncClient, swarm: FakeSwarm) -> None:
    page = await client.post(
        "/v1/agents/alpha/requests",
        json={"input": "hi"},
        headers={"Origin": "https://evil.example"},
    )
    assert (page.status_code, error_of(page)["code"]) == (403, "ORIGIN_NOT_ALLOWED")
    form = await client.post("/v1/agents/alpha/requests", content=b"input=hi")
    assert (form.status_code, error_of(form)["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert swarm.asked == []


def events_of(text: str) -> list[tuple[str, object]]:
    """``(event, data)`` of each server-sent event of ``text``."""
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


async def test_a_streamed_request_sends_its_text_then_its_answer(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.deltas = ["hel", "lo"]
    response = await client.post(
        "/v1/agents/alpha/requests", json={"input": "hi", "stream": True, "relay": True}
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response.text)
    assert [kind for kind, _ in events] == ["delta", "delta", "answer"]
    assert [data["text"] for _, data in events[:2]] == ["hel", "lo"]  # type: ignore[index]
    assert events[-1][1]["output"] == "done"  # type: ignore[index]
    assert swarm.asked[0]["streamed"]
    assert swarm.asked[0]["relay"]


async def test_a_streamed_request_failing_before_any_text_is_a_502(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.answer = DelegateAnswer.failure(IpcError("gone", code="AGENT_CRASHED"))
    response = await client.post(
        "/v1/agents/alpha/requests",
        json={"input": "hi"},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "AGENT_CRASHED"


async def test_the_openai_door_names_agents_as_models(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["alpha", "beta"]
    assert {m["owned_by"] for m in models["data"]} == {"demo"}
    chat = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "user": "u1"}
    completion = await client.post("/v1/chat/completions", json=chat)
    assert completion.status_code == 200
    assert completion.json()["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    assert (swarm.asked[0]["agent"], swarm.asked[0]["instanceKey"]) == ("alpha", "u1")
    unknown = await client.post("/v1/chat/completions", json={**chat, "model": "gpt-4"})
    assert unknown.status_code == 404
    assert (unknown.json()["error"]["code"], unknown.json()["error"]["param"]) == (
        "AGENT_NOT_FOUND",
        "model",
    )


async def test_a_used_up_budget_is_a_429_the_openai_sdks_do_not_retry(
    client: httpx2.AsyncClient, swarm: FakeSwarm
) -> None:
    swarm.answer = DelegateAnswer.failure(IpcError("no budget", code="E_BUDGET_EXCEEDED"))
    chat = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    response = await client.post("/v1/chat/completions", json=chat)
    assert (response.status_code, response.headers["x-should-retry"]) == (429, "false")
    assert response.json()["error"]["type"] == "insufficient_quota"


async def test_metrics_count_each_request_by_route_template(swarm: FakeSwarm) -> None:
    metrics = SwarmMetrics(swarm)
    async with serve(swarm, metrics=metrics) as client:
        await client.get("/v1/instances", params={"agent": "beta"})
        await client.get("/v1/instances", params={"agent": "nobody"})
        scraped = (await client.get("/metrics")).text
    assert 'goondan_http_requests_total{method="GET",route="/v1/instances",status="200"} 1.0' in (
        scraped
    )
    assert 'route="/v1/instances",status="404"} 1.0' in scraped
    assert 'goondan_agent_up{agent="alpha",status="idle"} 1.0' in scraped


async def test_without_metrics_there_is_no_metrics_route(client: httpx2.AsyncClient) -> None:
    response = await client.get("/metrics")
    assert (response.status_code, error_of(response)["code"]) == (404, "NOT_FOUND")


def test_metrics_label_lifecycle_events_by_kind_and_count_crashes(swarm: FakeSwarm) -> None:
    metrics = SwarmMetrics(swarm)
    for event in (
        ProcessSpawnedEvent(agent_name="alpha", pid=7),
        ProcessAdoptedEvent(agent_name="alpha", pid=7),
        ExitInfo(-9).event(expected=False, consecutive_crashes=1),
        ProcessConfigAppliedEvent(agent_name="orchestrator", restarted=[]),
    ):
        if not event.agent_name:
            event.agent_name = "alpha"
        metrics.observe(event)
    scraped = metrics.exposition().decode()
    for agent, kind in [
        ("alpha", "spawned"),
        ("alpha", "other"),  # an adoption is not one of the kinds labelled by name
        ("alpha", "exited"),
        ("orchestrator", "config_applied"),
    ]:
        assert f'goondan_process_events_total{{agent="{agent}",event="{kind}"}} 1.0' in scraped
    assert 'goondan_agent_crashes_total{agent="alpha"} 1.0' in scraped
