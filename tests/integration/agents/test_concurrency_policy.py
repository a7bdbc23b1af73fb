"""``policy.concurrency`` on a real daemon: a second message for a conversation whose Turn
runs is queued (``enqueue``), refused 409 ``INSTANCE_BUSY`` (``reject``) or interrupts the
running Turn, both callers getting the new Turn's answer (``interrupt``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agent_process.conversation import ConversationStore
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.concurrency_swarm import write_concurrency_swarm
from tests.support.swarm import started

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with started(
        Orchestrator.from_bundle(write_concurrency_swarm(tmp_path), state_dir=tmp_path / "state")
    ) as orchestrator:
        yield orchestrator


@pytest.fixture
async def client(swarm: Orchestrator) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.AsyncHTTPTransport(uds=str(swarm.state_dir / "api.sock"))
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://goondan", timeout=60
    ) as http:
        yield http


def ask(client: httpx2.AsyncClient, agent: str, text: str, key: str = "k") -> Any:
    body = {"input": text, "instanceKey": key}
    return asyncio.ensure_future(client.post(f"/v1/agents/{agent}/requests", json=body))


async def holding(swarm: Orchestrator, client: httpx2.AsyncClient, agent: str, gate: Path) -> Any:
    """A request whose Turn runs (its tool holding until ``gate`` exists) when this returns."""
    first = ask(client, agent, f"hold {gate}")
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_for_status(agent, ProcessStatus.PROCESSING)
    return first


def users_and_answers(swarm: Orchestrator, agent: str) -> list[tuple[str, Any]]:
    root = swarm.state_dir / "agents" / agent / "instances" / "k" / "conversation"
    return [(m.role, m.content) for m in ConversationStore(root).load() if m.role != "system"]


async def test_enqueue_answers_each_message_in_turn(
    swarm: Orchestrator, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    first = await holding(swarm, client, "queuer", tmp_path / "gate")
    second = ask(client, "queuer", "hello")
    (tmp_path / "gate").touch()
    async with asyncio.timeout(30):
        answers = [await first, await second]
    assert [(a.status_code, a.json()["output"]) for a in answers] == [
        (200, "held: released"),
        (200, "got: hello"),
    ]


async def test_reject_answers_409_instance_busy_on_every_front_door(
    swarm: Orchestrator, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    first = await holding(swarm, client, "rejecter", tmp_path / "gate")
    busy = await ask(client, "rejecter", "hello")
    assert busy.status_code == 409
    error = busy.json()["error"]
    assert error["code"] == "INSTANCE_BUSY"
    assert "policy.concurrency" in error["message"]
    streamed = await client.post(
        "/v1/agents/rejecter/requests",
        json={"input": "hello", "instanceKey": "k", "stream": True},
    )
    assert (streamed.status_code, streamed.json()["error"]["code"]) == (409, "INSTANCE_BUSY")
    chat = await client.post(
        "/v1/chat/completions",
        json={"model": "rejecter", "messages": [{"role": "user", "content": "hello"}]},
        headers={"X-Goondan-Instance": "k"},
    )
    assert (chat.status_code, chat.json()["error"]["code"]) == (409, "INSTANCE_BUSY")
    # Another conversation of the same agent is not held up.
    other = await ask(client, "rejecter", "hi", key="other")
    assert (other.status_code, other.json()["output"]) == (200, "got: hi")
    (tmp_path / "gate").touch()
    async with asyncio.timeout(30):
        done = await first
    assert (done.status_code, done.json()["output"]) == (200, "held: released")
    later = await ask(client, "rejecter", "later")
    assert (later.status_code, later.json()["output"]) == (200, "got: later")
    users = [text for role, text in users_and_answers(swarm, "rejecter") if role == "user"]
    assert users == [f"hold {tmp_path / 'gate'}", "later"]  # refused ones left no trace


async def test_reject_reaches_a_delegating_agent_as_a_structured_error(
    swarm: Orchestrator, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    first = await holding(swarm, client, "rejecter", tmp_path / "gate")
    # queuer's request to rejecter targets the caller's instance key: the held one.
    answer = await ask(client, "queuer", "ask rejecter hello")
    assert (answer.status_code, answer.json()["output"]) == (200, "ERROR INSTANCE_BUSY")
    (tmp_path / "gate").touch()
    async with asyncio.timeout(30):
        assert (await first).status_code == 200


async def test_interrupt_gives_both_callers_the_answer_that_saw_both_messages(
    swarm: Orchestrator, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first = await holding(swarm, client, "interrupter", gate)
    async with swarm.live.subscribe() as subscription:
        second = ask(client, "interrupter", "hello")
        async with asyncio.timeout(30):  # the agent heard it while the tool still holds
            while True:
                event = await subscription.queue.get()
                if event.get("type") == "turn.cancelling":
                    break
    assert "policy.concurrency" in str(event["reason"])
    assert not first.done()
    gate.touch()  # the running Step finishes; the Turn stops before its next
    async with asyncio.timeout(30):
        answers = [await first, await second]
    assert [(a.status_code, a.json()["output"]) for a in answers] == [
        (200, "got: hello"),
        (200, "got: hello"),
    ]
    assert answers[0].json()["turn"]["traceId"] == answers[1].json()["turn"]["traceId"]
    assert [role for role, _ in users_and_answers(swarm, "interrupter")] == [
        "user",
        "assistant",
        "tool",  # the tool call under way ran whole; no model call answered it
        "user",
        "assistant",
    ]
