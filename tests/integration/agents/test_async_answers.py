"""An asynchronous ``agents__request`` answered into the requester's conversation, in real
processes: upstream's content and ``__goondanInterAgentResponse`` metadata (reference §4.2)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from orchestrator.daemon import Orchestrator
from tests.support.pair import running_pair
from tools_base import Message

pytestmark = pytest.mark.timeout(120)


async def answered_later(swarm: Orchestrator, text: str) -> tuple[list[str], Message]:
    """Ask ``lead`` ``text`` (it asks ``helper`` asynchronously); once the Turn the answer
    wakes has ended too, its tool's ``correlationId`` and ``eventId`` and the message."""
    async with swarm.live.subscribe() as subscription, asyncio.timeout(30):
        answer = await swarm.request(text)
        assert answer.status == "ok", answer
        ended = 0
        while ended < 2:  # the asking Turn, then the one the answer wakes
            event: dict[str, Any] = await subscription.queue.get()
            if event.get("agentName") == "lead" and event["type"] == "turn.completed":
                ended += 1
    ids = str(answer.output).split("|")[1:]
    conversation = swarm.state_dir / "agents" / "lead" / "instances" / "default" / "conversation"
    [message] = [
        m
        for m in ConversationStore(conversation).load()
        if "__goondanInterAgentResponse" in m.metadata
    ]
    return ids, message


async def test_an_async_answer_has_upstreams_shape_and_metadata(tmp_path: Path) -> None:
    async with running_pair(tmp_path) as swarm:
        (request_id, event_id), message = await answered_later(swarm, "later find papers")
    assert message.role == "user"
    assert json.loads(message.content) == {
        "type": "inter_agent_response",
        "requestId": request_id,
        "fromAgentId": "helper",
        "toAgentId": "lead",
        "status": "ok",
        "response": "helper got: find papers",
    }
    about = message.metadata["__goondanInterAgentResponse"]
    assert isinstance(about, dict)
    assert about.pop("receivedAt")
    trace_id = about.pop("traceId")
    assert isinstance(trace_id, str)
    assert len(trace_id) == 32
    assert message.metadata["traceId"] == trace_id
    assert about == {
        "kind": "inter_agent_response",
        "version": 1,
        "requestId": request_id,
        "requestEventId": event_id,
        "fromAgentId": "helper",
        "toAgentId": "lead",
        "async": True,
        "status": "ok",
        "requestEventType": "agent.request",
        "requestMetadata": {"topic": "papers"},
    }


async def test_an_async_request_past_its_timeout_answers_status_timeout(tmp_path: Path) -> None:
    async with running_pair(tmp_path) as swarm:
        (request_id, _), message = await answered_later(swarm, "later timeout=300 slow 2")
    content = json.loads(message.content)
    assert (content["requestId"], content["status"]) == (request_id, "timeout")
    assert content["error"]["code"] == "AGENT_REQUEST_TIMEOUT"
    about = message.metadata["__goondanInterAgentResponse"]
    assert isinstance(about, dict)
    assert (about["status"], about["errorCode"]) == ("timeout", "AGENT_REQUEST_TIMEOUT")
    assert about["errorMessage"] == content["error"]["message"]
