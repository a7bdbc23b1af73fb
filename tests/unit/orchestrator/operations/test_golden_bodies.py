"""Every HTTP route's body, byte for byte, against a golden file in ``tests/golden/http/``.

The routes are served in-process through httpx's ASGI transport, from two swarms: a real
Orchestrator that was loaded but never started (its status rows, Connections, rate-limit pools,
usage book, conversations and approvals on disk are the daemon's own), and the fake swarm for
what needs running agents (a Turn's answer, a restart, a cancel, a decision). A body that
changes shape, order, spacing or number format fails here.

Regenerate after an intended change: ``GOONDAN_REGOLD=1 python -m pytest -n 0
tests/unit/orchestrator/operations/test_golden_bodies.py`` (then read the diff).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from goondan.state_files.approvals import Approval, write_approval
from goondan.state_files.metadata import write_metadata
from ipc.delegation import DelegateAnswer
from orchestrator.callers import Peer, with_peer
from orchestrator.daemon import Orchestrator
from orchestrator.http.app import build_app
from orchestrator.operations.answers import ApprovalRow, PendingRow
from orchestrator.operations.encoding import convert
from tests.support.connections import FEED_CONNECTION
from tests.support.fake_swarm import FakeSwarm
from tests.support.openapi_fit import schema_problem
from tests.support.swarm import FIXTURES

ROOTS: dict[int, str] = {}
"""Each real swarm's client → its temporary directory (made constant in the goldens)."""
GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "http"
REGOLD = os.environ.get("GOONDAN_REGOLD") == "1"
JSON = {"Content-Type": "application/json"}
OPERATOR = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
"""This process on ``api.sock``: the daemon's own user, no agent of the swarm."""
FAR = 4102444800.0
"""2100-01-01: a pending approval that never expires while the goldens live."""

SWARM = (
    """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  limits: {maxConcurrent: 2, requestsPerMinute: 60, tokensPerMinute: 10000}
  script:
    rules:
      - reply: "got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: alpha}
spec:
  modelConfig: {modelRef: Model/brain}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: beta}
spec:
  modelConfig: {modelRef: Model/brain}
---
"""
    + FEED_CONNECTION.replace("FEED", "/nonexistent/feed")
    + """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: golden}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha, Agent/beta]
  budgets:
    trace: {outputTokens: 500}
"""
)


def seed_instance(state: Path, agent: str, key: str, usage: dict[str, float] | None) -> Path:
    directory = state / "agents" / agent / "instances" / key
    directory.mkdir(parents=True)
    metadata: dict[str, object] = {
        "formatVersion": 1,
        "agentName": agent,
        "instanceKey": key,
        "status": "idle",
        "createdAt": "2026-01-02T03:04:05.000Z",
        "updatedAt": "2026-01-02T03:04:06.500Z",
    }
    if usage is not None:
        metadata["usage"] = usage
    write_metadata(directory, metadata)
    return directory


def seed_approval(directory: Path, number: int, **decided: object) -> None:
    approval = Approval(
        approval_id=f"apr_{number:016x}",
        tool_call_id=f"call-{number}",
        tool_name="bash__exec",
        arguments={"command": "echo héllo", "n": 1.5},
        agent_name=directory.parents[1].name,
        instance_key=directory.name,
        trace_id=f"trace-{number}",
        turn_id=f"turn-{number}",
        requested_at=f"2026-01-02T03:04:0{number}.000Z",
        expires_at_unix=FAR,
        path=directory / "approvals" / f"apr_{number:016x}.json",
        **decided,  # type: ignore[arg-type]
    )
    write_approval(approval)


@pytest.fixture
async def real(tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    """The real Orchestrator, loaded and never started, with conversations, usage and
    approvals on disk."""
    shutil.copy(FIXTURES / "feed_connector.py", tmp_path / "feed_connector.py")
    (tmp_path / "goondan.yaml").write_text(SWARM)
    state = tmp_path / "state"
    usage = {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30, "cost": 0.25, "calls": 2}
    main = seed_instance(state, "alpha", "main", usage)
    seed_instance(state, "alpha", "old", None)
    other = seed_instance(state, "beta", "chat:7", None)
    seed_approval(main, 1)
    seed_approval(
        other,
        2,
        status="rejected",
        decided_at="2026-01-02T03:05:00.000Z",
        reason="no",
        decided_by={"via": "unix", "pid": 1, "uid": 0, "gid": 0, "user": "root"},
    )
    daemon = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=state)
    book = daemon.broker.usage
    book.add("alpha", "trace-1", 100, 40, 0.5, "2026-01-02T03:04:05.000Z")
    book.add("beta", "trace-1", 7, 3, 0.0, "2026-01-02T03:04:06.000Z")
    book.add("alpha", "trace-2", 1, 2, 2e-06, "2026-01-02T03:04:07.000Z")  # "2e-6"
    book.add("beta", "trace-3", 0, 0, 1e20, "2026-01-02T03:04:08.000Z")  # "1e20"
    app = with_peer(build_app(daemon.operations), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as http:
        ROOTS[id(http)] = str(tmp_path)
        yield http


@pytest.fixture
async def fake() -> AsyncIterator[httpx2.AsyncClient]:
    """The fake swarm, with a request waiting, a trace running and a streamed answer."""
    swarm = FakeSwarm(
        answer=DelegateAnswer("ok", "done, ünïcode", {"turnId": "turn-1", "steps": 1}),
        pending_rows=[
            PendingRow(
                request_id="r-1",
                trace_id="t-1",
                caller="external",
                agent="alpha",
                instance_key="default",
                started_at="2026-01-02T03:04:05.000Z",
            )
        ],
        running={"t-1": ["t-1"]},
        approval_rows={
            "apr_0000000000000001": convert(
                {
                    "v": 1,
                    "approvalId": "apr_0000000000000001",
                    "toolCallId": "call-1",
                    "toolName": "bash__exec",
                    "arguments": {"command": "ls"},
                    "agentName": "alpha",
                    "instanceKey": "main",
                    "traceId": "t-1",
                    "turnId": "turn-1",
                    "requestedAt": "2026-01-02T03:04:05.000Z",
                    "expiresAt": "2100-01-01T00:00:00.000Z",
                    "expiresAtUnix": FAR,
                    "status": "pending",
                    "started": False,
                    "settled": False,
                },
                ApprovalRow,
            )
        },
    )
    app = with_peer(build_app(swarm), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as http:
        yield http


REAL = [
    ("healthz", "GET", "/healthz", None),
    ("readyz", "GET", "/readyz", None),
    ("agents", "GET", "/v1/agents", None),
    ("requests-none", "GET", "/v1/requests", None),
    ("instances", "GET", "/v1/instances", None),
    ("instances-of-beta", "GET", "/v1/instances?agent=beta", None),
    ("usage", "GET", "/v1/usage?traces=5", None),
    ("usage-trace", "GET", "/v1/usage?trace=trace-1", None),
    ("usage-trace-unknown", "GET", "/v1/usage?trace=nope", None),
    ("approvals", "GET", "/v1/approvals", None),
    ("approvals-all", "GET", "/v1/approvals?all=1", None),
    ("approval", "GET", "/v1/approvals/apr_0000000000000002", None),
    ("approval-unknown", "GET", "/v1/approvals/apr_00000000000000ff", None),
    ("instance-delete", "DELETE", "/v1/agents/alpha/instances/old", None),
    ("instance-delete-unknown-agent", "DELETE", "/v1/agents/nobody/instances/old", None),
    ("instance-restart", "POST", "/v1/agents/alpha/instances/main/restart", None),
    ("models", "GET", "/v1/models", None),
    ("unknown-route", "GET", "/v2/nothing", None),
]
FAKE = [
    ("requests-one", "GET", "/v1/requests", None),
    ("request", "POST", "/v1/agents/alpha/requests", {"input": "hi", "instanceKey": "k"}),
    ("request-bad-body", "POST", "/v1/agents/alpha/requests", {"input": 5}),
    ("send", "POST", "/v1/agents/beta/sends", {"input": "hi", "instanceKey": "k"}),
    ("restart", "POST", "/v1/agents/alpha/restart", {}),
    ("restart-fresh", "POST", "/v1/agents/alpha/restart?fresh=1", {}),
    ("cancel", "POST", "/v1/requests/t-1/cancel", {"reason": "enough"}),
    ("cancel-unknown", "POST", "/v1/requests/t-9/cancel", {}),
    ("request-unknown", "GET", "/v1/requests/req_00000000000000000000000000000000", None),
    ("approve", "POST", "/v1/approvals/apr_0000000000000001/approve", {}),
    ("approve-unknown", "POST", "/v1/approvals/apr_0000000000000009/approve", {}),
    ("reject-bad", "POST", "/v1/approvals/apr_0000000000000001/reject", {}),
    (
        "chat-completion",
        "POST",
        "/v1/chat/completions",
        {"model": "alpha", "user": "u", "messages": [{"role": "user", "content": "hi"}]},
    ),
]


def normal(body: bytes, root: str | None) -> bytes:
    """The body with what differs from run to run made constant: this process's pid, the
    temporary directory, the OpenAI front door's ids and clock, request ids."""
    text = body.decode("utf-8")
    text = text.replace(f'"pid":{os.getpid()}', '"pid":"<pid>"')
    if root is not None:
        text = text.replace(json.dumps(root)[1:-1], "<root>")
    text = re.sub(r'"id":"chatcmpl-[^"]*"', '"id":"<id>"', text)
    text = re.sub(r'"created":\d+', '"created":"<created>"', text)
    text = re.sub(r'"requestId":"req_[0-9a-f]{32}"', '"requestId":"<request-id>"', text)
    return text.encode("utf-8")


async def check(http: httpx2.AsyncClient, case: tuple[str, str, str, object]) -> None:
    name, method, url, body = case
    content = None if body is None else json.dumps(body).encode()
    headers = JSON if method in ("POST", "DELETE") else {}
    response = await http.request(method, url, content=content, headers=headers)
    problem = schema_problem(method, url, response.status_code, response.json())
    assert problem is None, f"{name}: the body does not fit the OpenAPI document: {problem}"
    got = f"{response.status_code}\n".encode() + normal(response.content, ROOTS.get(id(http)))
    path = GOLDEN / f"{name}.json"
    if REGOLD:
        path.write_bytes(got + b"\n")
    assert got + b"\n" == path.read_bytes(), f"{name}: the body of {method} {url} changed"


@pytest.mark.parametrize("case", REAL, ids=[case[0] for case in REAL])
async def test_a_body_of_the_real_daemon_is_its_golden(
    real: httpx2.AsyncClient, case: tuple[str, str, str, object]
) -> None:
    await check(real, case)


@pytest.mark.parametrize("case", FAKE, ids=[case[0] for case in FAKE])
async def test_a_body_over_the_fake_swarm_is_its_golden(
    fake: httpx2.AsyncClient, case: tuple[str, str, str, object]
) -> None:
    await check(fake, case)


def test_every_golden_is_checked() -> None:
    """No golden file outlives its case (a renamed case leaves none behind unchecked)."""
    names = {case[0] for case in REAL + FAKE}
    assert {path.stem for path in GOLDEN.glob("*.json")} == names
