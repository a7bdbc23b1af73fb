"""The A2A front door in-process: what a message asks, how a request's record reads as a task,
the card over ``api.sock``, and the door's answer when the ``a2a`` extra is missing."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError
from google.protobuf.struct_pb2 import Value

from goondan.errors import DeliveryCode
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import ApprovalDecidedEvent, ApprovalRequestedEvent
from orchestrator.callers import Peer, with_peer
from orchestrator.http.a2a_server import MAX_CONTEXT_ID, context_key, message_text
from orchestrator.http.a2a_tasks import task_of
from orchestrator.http.app import build_app
from orchestrator.operations.protocol import DeltaSink
from orchestrator.requests import RequestDesk, RequestRecord, RequestStore
from tests.support.fake_swarm import FakeSwarm, approval

OPERATOR = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())


def record(**fields: object) -> RequestRecord:
    given: dict[str, object] = {
        "request_id": "req_" + "a" * 32,
        "kind": "a2a",
        "agent": "alpha",
        "instance_key": "ctx-1",
        "input": "hello",
        "trace_id": "t-1",
        **fields,
    }
    return RequestRecord(**given)  # type: ignore[arg-type]


def message(*parts: Part, context_id: str = "") -> Message:
    return Message(role=Role.ROLE_USER, message_id="m-1", context_id=context_id, parts=list(parts))


def test_a_message_asks_its_text_and_data_parts_in_order() -> None:
    data = Part(data=Value(string_value="x"))
    assert message_text(message(Part(text="one"), data, Part(text="two"))) == 'one\n"x"\ntwo'
    with pytest.raises(InvalidParamsError) as refused:
        message_text(message(Part(text="see"), Part(url="https://example.com/a.png")))
    assert refused.value.data == {
        "errors": [{"field": "message.parts[1]", "message": refused.value.message}]
    }
    with pytest.raises(InvalidParamsError, match="no text"):
        message_text(message(Part(text="  ")))


def test_a_context_id_names_the_conversation_or_a_new_one_is_made() -> None:
    assert context_key(message(Part(text="hi"), context_id="ctx-7")) == "ctx-7"
    made = {context_key(message(Part(text="hi"))) for _ in range(3)}
    assert len(made) == 3
    assert all(key.startswith("a2a-") for key in made)
    with pytest.raises(InvalidParamsError) as refused:
        context_key(message(Part(text="hi"), context_id="x" * (MAX_CONTEXT_ID + 1)))
    assert refused.value.data is not None
    assert refused.value.data["errors"][0]["field"] == "message.contextId"


def test_a_record_reads_as_a_task_in_the_state_of_its_turn() -> None:
    running = task_of(record())
    assert (running.id, running.context_id) == ("req_" + "a" * 32, "ctx-1")
    assert running.status.state == TaskState.TASK_STATE_WORKING
    assert [m.parts[0].text for m in running.history] == ["hello"]

    waiting = task_of(record(), waiting=approval("apr_0123456789abcdef", toolName="bash__exec"))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.metadata["approvalId"] == "apr_0123456789abcdef"
    assert "bash__exec" in waiting.status.message.parts[0].text

    done = task_of(record(finished_at=1.5), DelegateAnswer("ok", {"n": 1}))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text == '{"n": 1}'  # a structured answer as JSON

    failed = IpcError("no model", code=DeliveryCode.AGENT_TURN_FAILED)
    broke = task_of(record(), DelegateAnswer.failure(failed))
    assert broke.status.state == TaskState.TASK_STATE_FAILED
    assert not broke.artifacts
    assert broke.status.message.parts[0].text == "no model"
    assert broke.status.message.metadata["code"] == "AGENT_TURN_FAILED"

    stopped = IpcError("stop", code=DeliveryCode.CANCELLED)
    assert task_of(record(), DelegateAnswer.failure(stopped)).status.state == (
        TaskState.TASK_STATE_CANCELED
    )


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    swarm = FakeSwarm(answer=DelegateAnswer("ok", "done here"))
    desk = RequestDesk(swarm, RequestStore(None))
    app = with_peer(build_app(swarm, desk=desk), OPERATOR)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://goondan") as client:
        yield client
    await desk.close()


async def test_over_the_socket_the_card_asks_no_token_and_a_message_is_answered(
    http: httpx.AsyncClient,
) -> None:
    card = await A2ACardResolver(http, "http://goondan/a2a/alpha").get_agent_card()
    assert card.supported_interfaces[0].url == "http://goondan/a2a/alpha"
    assert not card.security_schemes  # api.sock: its file mode is the check
    assert card.description == "The alpha agent of the demo swarm."
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    sent = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text="hi")])
    [response] = [r async for r in client.send_message(SendMessageRequest(message=sent))]
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert response.task.artifacts[0].parts[0].text == "done here"


async def test_without_the_sdk_the_routes_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "a2a.server.routes.jsonrpc_dispatcher", None)
    swarm = FakeSwarm()
    app = with_peer(build_app(swarm), OPERATOR)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://goondan") as client:
        answers = [
            await client.get("/.well-known/agent-card.json"),
            await client.get("/a2a/alpha/.well-known/agent-card.json"),
            await client.post("/a2a/alpha", json={"jsonrpc": "2.0", "method": "SendMessage"}),
        ]
    for answer in answers:
        assert answer.status_code == 501
        assert "pip install 'goondan-py[a2a]'" in answer.json()["error"]["message"]


@dataclass
class ParkingSwarm(FakeSwarm):
    """A fake swarm whose Turns wait for :attr:`gate` (the test publishes their approval
    events meanwhile)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    trace_ids: list[str] = field(default_factory=list)

    async def request(  # type: ignore[override]
        self, text: str, *, on_delta: DeltaSink | None = None, **options: Any
    ) -> DelegateAnswer:
        self.trace_ids.append(options["trace_id"])
        self.started.set()
        await self.gate.wait()
        return self.answer


async def test_a_message_sent_again_after_its_approval_was_decided_waits_for_the_answer() -> None:
    swarm = ParkingSwarm(answer=DelegateAnswer("ok", "written"))
    desk = RequestDesk(swarm, RequestStore(None))
    app = with_peer(build_app(swarm, desk=desk), OPERATOR)
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://goondan") as http,
        asyncio.timeout(30),
    ):
        card = await A2ACardResolver(http, "http://goondan/a2a/alpha").get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        sent = Message(role=Role.ROLE_USER, message_id="m-park", parts=[Part(text="write")])

        async def send() -> Task:
            request = SendMessageRequest(message=sent)
            [response] = [r async for r in client.send_message(request)]
            return response.task

        first = asyncio.create_task(send())
        await swarm.started.wait()
        fields = {"trace_id": swarm.trace_ids[0], "approval_id": "apr_1", "tool_name": "x__y"}
        swarm.live.publish(ApprovalRequestedEvent(**fields))
        waiting = await first
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        swarm.live.publish(ApprovalDecidedEvent(**fields))
        again = asyncio.create_task(send())  # replayed: asked, then decided: no wait now
        swarm.gate.set()
        finished = await again
    assert finished.id == waiting.id
    assert finished.status.state == TaskState.TASK_STATE_COMPLETED
    assert finished.artifacts[0].parts[0].text == "written"
    await desk.close()
