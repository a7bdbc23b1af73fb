"""A streamed response never makes the router wait and holds a bounded amount for a slow
client: it joins text of one Step into fewer pieces, then drops and counts."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from orchestrator.http import streams
from orchestrator.http.streams import Piece, TurnStream, native_events
from orchestrator.requests import Intake, RequestDesk, RequestStore
from tests.support.held_turn import HeldDaemon, HeldRouter


async def stream(relay: bool = False) -> tuple[TurnStream, HeldRouter]:
    router = HeldRouter()
    desk = RequestDesk(HeldDaemon(router), RequestStore(None))  # type: ignore[arg-type]
    intake = Intake(kind="request", agent="alpha", text="hi", instance_key="default", relay=relay)
    admission = await desk.admit(dataclasses.replace(intake, deltas=True))
    turn = TurnStream(desk, admission.request_id)
    async with asyncio.timeout(2):
        await router.asked.wait()
    return turn, router


def delta(text: str, step: str = "s0") -> TextDelta:
    return TextDelta("corr_1", text, "t", "default", "turn-1", step)


async def drain(turn: TurnStream) -> list[Piece | DelegateAnswer | None]:
    async with asyncio.timeout(2):
        return [item async for item in turn.rest()]


async def test_a_slow_client_gets_the_same_text_in_fewer_pieces() -> None:
    turn, router = await stream()
    assert router.sink is not None
    words = [f"w{i} " for i in range(1000)]
    for word in words:
        router.sink("alpha", delta(word))  # the client reads nothing meanwhile
    assert len(turn.pieces) == streams.STREAM_MAX_PIECES
    router.answer.set_result(DelegateAnswer("ok", "".join(words)))
    items = await drain(turn)
    assert isinstance(items[-1], DelegateAnswer)
    pieces = [i for i in items if isinstance(i, Piece)]
    assert "".join(p.text for p in pieces) == "".join(words)
    assert turn.dropped == 0
    assert turn.chars == 0


async def test_text_that_cannot_be_joined_or_is_too_much_is_dropped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "STREAM_MAX_PIECES", 2)
    monkeypatch.setattr(streams, "STREAM_MAX_CHARS", 10)
    turn, router = await stream()
    assert router.sink is not None
    router.sink("alpha", delta("ab"))
    router.sink("alpha", delta("cd"))
    router.sink("alpha", delta("ef"))  # joined to the last piece: same agent, same Step
    router.sink("beta", delta("xx"))  # full, and not the same Step: dropped
    router.sink("alpha", delta("toolong"))  # over the character bound: dropped
    assert [p.text for p in turn.pieces] == ["ab", "cdef"]
    assert turn.dropped == 2
    router.answer.set_result(DelegateAnswer("ok", "abcdef"))
    items = await drain(turn)
    assert items[-1] == DelegateAnswer("ok", "abcdef")


async def test_a_client_that_leaves_stops_the_wait_not_the_turn() -> None:
    turn, router = await stream()
    assert router.sink is not None
    router.sink("alpha", delta("first"))
    first = await turn.first()
    assert isinstance(first, Piece)
    body = native_events(turn, first)
    assert (await anext(body)).startswith(b"id: 1\nevent: delta")
    async with asyncio.timeout(2):
        await body.aclose()  # the response's body closed mid-stream: the client left
    assert turn._task.cancelled()  # the request's wait, not the Turn (the router keeps that)
    router.sink("alpha", delta("late"))  # the router may still call it: never raises
    await turn.aclose()  # what the response runs after its body, however it ended: idempotent
