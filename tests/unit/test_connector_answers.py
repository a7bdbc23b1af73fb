"""The answers a connector waits for: settlements carry a Turn's answer across the wire and
resolve the waiter of their event only."""

from __future__ import annotations

import asyncio

import pytest

from connector_process.answers import AnswerWaiters
from ipc import build
from ipc.events import ConnectorEventSettled, SendDone, read_event
from ipc.payload import EventBody
from tools_base import TurnAnswer


@pytest.mark.parametrize(
    "body",
    [
        SendDone("e1"),
        SendDone("e1", answer="the answer"),
        SendDone("e1", turn_error="E_MAX_STEPS: too many steps"),
        ConnectorEventSettled("e1"),
        ConnectorEventSettled("e1", None, "the answer"),
        ConnectorEventSettled("e1", "AGENT_UNAVAILABLE: gone"),
        ConnectorEventSettled("e1", None, None, "E_MODEL: refused"),
    ],
)
def test_answers_survive_the_wire(body: EventBody) -> None:
    message = build.event("a", "b", body)
    assert read_event(message) == body


async def test_a_settlement_resolves_its_own_waiter_with_the_answer() -> None:
    waiters = AnswerWaiters()
    first, second = waiters.expect("e1"), waiters.expect("e2")
    waiters.settle(ConnectorEventSettled("e2", None, "two"))
    waiters.settle(ConnectorEventSettled("unknown", None, "nobody waits"))
    assert second.result() == TurnAnswer(text="two")
    assert second.result().ok
    assert not first.done()
    waiters.settle(ConnectorEventSettled("e1", None, None, "E_MAX_STEPS: stopped"))
    assert first.result() == TurnAnswer(error="E_MAX_STEPS: stopped")
    assert not first.result().ok
    assert len(waiters) == 0


async def test_an_undelivered_event_or_a_turn_without_answer_says_why() -> None:
    waiters = AnswerWaiters()
    lost, empty = waiters.expect("lost"), waiters.expect("empty")
    waiters.settle(ConnectorEventSettled("lost", "SHUTTING_DOWN: stopping"))
    waiters.settle(ConnectorEventSettled("empty"))
    assert lost.result().error == "SHUTTING_DOWN: stopping"
    assert empty.result().error == "the Turn ended without an answer"


async def test_a_waiter_that_gives_up_is_forgotten() -> None:
    waiters = AnswerWaiters()
    future = waiters.expect("e1")
    future.cancel()
    await asyncio.sleep(0)  # the done callbacks run on the loop's next turn
    assert len(waiters) == 0
    waiters.settle(ConnectorEventSettled("e1", None, "late"))  # nothing to resolve
