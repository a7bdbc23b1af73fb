"""Streamed answers of the HTTP API: server-sent events of a request's text as it is produced,
and of the runtime events as they happen.

Streaming. A request with ``"stream": true`` (or ``Accept: text/event-stream``) answers with
server-sent events: ``event: delta`` with ``{agent, instanceKey, traceId, turnId, stepId, text}``
for each piece of model text as the model produces it, then one ``event: answer`` with the
delegate answer (plus ``droppedDeltas`` when a slow client lost some). With ``"relay": true`` the
agents the Turn asks (``agents__request``) stream into it too, each delta naming its ``agent``;
without it only the target's own text streams, and the agents it asks do not stream at all. A
request that fails before any text arrives is answered 502 JSON, as without streaming.
With ``"approvals": true`` the answer is server-sent events too (deltas only with ``stream``):
``event: approval`` carries each ``approval.*`` runtime event of the request's trace (a call
parked, resumed, decided, expired or cancelled, in any agent the request reaches) as it happens.
``/v1/chat/completions`` with ``"stream": true`` sends standard ``chat.completion.chunk`` deltas
the same way (``relay`` as an extra body field; each content chunk carries
``goondan: {agent, instanceKey, stepId}``), then the chunk with ``finish_reason``, a usage chunk
when ``stream_options.include_usage`` is set, and ``data: [DONE]``. The text of every Step
streams, so a Turn whose model talks before calling a tool streams more than its final answer.
Streamed text also appears on ``/v1/events`` as ``text.delta`` events.

Resuming. Each event of a request's stream carries ``id:``, its number in the request's feed
(:mod:`orchestrator.requests.feed`; the answer's is ``answer``): ``GET
/v1/requests/{id}/events`` with ``Last-Event-ID`` replays what came after it, then follows (see
:mod:`orchestrator.http.requests`). A stream whose daemon stops before the answer ends without
one: the client picks the request up again once a daemon runs.

Bounds: the agent never waits for a client (deltas are queued on its pipe and read at once by
the Orchestrator, whose loop never waits either). Each streamed response holds at most
:data:`STREAM_MAX_PIECES` pieces for a slow client; past that, new text joins the last piece of
the same agent's Step (the client gets fewer, bigger chunks, nothing lost), and past
:data:`STREAM_MAX_CHARS` characters waiting, or when it cannot be joined, a delta is dropped and
counted. A client that disconnects mid-stream stops only its stream: the Turn runs to its end,
its answer is recorded, and the stream stops following the request's feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

from goondan.errors import DeliveryCode
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from ipc.runtime_events import AnyEvent, read_event
from orchestrator.approvals import APPROVAL_EVENTS
from orchestrator.eventlog import matches
from orchestrator.operations import SwarmOperations
from orchestrator.operations.live import END_OF_STREAM

if TYPE_CHECKING:
    from orchestrator.requests.desk import RequestDesk

KEEPALIVE_SECONDS = 15.0
"""An idle event stream sends a comment this often, so proxies and clients keep it open."""
STREAM_MAX_PIECES = 256
"""Pieces of text a streamed response holds for a slow client before it joins new text to the
last piece of the same Step."""
STREAM_MAX_CHARS = 4 * 1024 * 1024
"""Characters of text a streamed response holds for a slow client before it drops deltas."""


def sse(
    events: AsyncIterator[bytes], after: Callable[[], Awaitable[None]] | None = None
) -> StreamingResponse:
    """An SSE response of ``events``; ``after`` runs once it ends, however it ends (a client
    that leaves cancels the body, possibly before the body's own ``finally`` could run)."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(after) if after is not None else None,
    )


@dataclass(eq=False, slots=True)
class Piece:
    """Text of one agent's Step waiting for the client (deltas joined while it is slow)."""

    agent: str
    delta: TextDelta
    text: str
    seq: int = 0
    """The number of the last delta joined in (its event's ``id:``)."""


@dataclass(frozen=True, slots=True)
class Notice:
    """An ``approval.*`` (or, when asked for, ``step.*`` or ``tool.*``) runtime event of the
    streamed request's trace."""

    event: AnyEvent
    seq: int = 0
    """Its number in the request's feed (its event's ``id:``)."""


Item = Piece | Notice | DelegateAnswer | None
"""What a streamed request yields: text, an approval event, its answer, or a keepalive."""


class TurnStream:
    """One streamed request: its text as it arrives, then its answer, for one HTTP response.

    It follows the request's feed (:class:`~orchestrator.requests.feed.RequestFeed`, from the
    event after ``after``), which calls :meth:`put` and :meth:`notice` on the loop and never
    waits (see the bounds in the module docstring). The handler awaits :meth:`first`, the
    response body iterates :meth:`rest`, and the response calls :meth:`aclose` when it ends,
    however it ends: a client that leaves stops its own wait, never the request (the desk
    runs it, and records its answer).
    """

    def __init__(
        self,
        desk: RequestDesk,
        request_id: str,
        *,
        after: int = 0,
        deltas: bool = True,
        approvals: bool = False,
        activity: bool = False,
    ) -> None:
        record = desk.record(request_id)
        assert record is not None, "a stream follows a request the desk holds"
        self.request_id = request_id
        self.agent = record.agent
        self.instance_key = record.instance_key
        self.trace_id = record.trace_id
        self.deltas, self.approvals, self.activity = deltas, approvals, activity
        self.pieces: deque[Piece | Notice] = deque()
        self.chars = 0
        self.dropped = 0
        self.answer: DelegateAnswer | None = None
        self.ended = False
        """The request's wait is over (with :attr:`answer`, or without one)."""
        self._wake = asyncio.Event()
        self._feed = desk.feed(request_id)
        if self._feed is not None:
            self._feed.follow(self, after)
        self._task = asyncio.ensure_future(self._run(desk))
        self._items = self.items()

    async def _run(self, desk: RequestDesk) -> None:
        # None: the daemon stops before the answer; the stream ends without one, and the
        # client picks the request up again by its id once the daemon runs again.
        self.answer = await desk.answer(self.request_id)
        self.ended = True
        self._wake.set()

    def put(self, agent: str, delta: TextDelta, seq: int = 0) -> None:
        """Take one delta, numbered ``seq``, from the feed (never blocks)."""
        size = len(delta.text)
        if self.answer is not None or not size or not self.deltas:
            return
        pieces = self.pieces
        if self.chars + size > STREAM_MAX_CHARS:
            self.dropped += 1
            return
        last, step = (pieces[-1] if pieces else None), delta.step_id
        if len(pieces) < STREAM_MAX_PIECES:
            pieces.append(Piece(agent, delta, delta.text, seq))
        elif isinstance(last, Piece) and last.agent == agent and last.delta.step_id == step:
            last.text += delta.text
            last.seq = seq
        else:
            self.dropped += 1
            return
        self.chars += size
        self._wake.set()

    def notice(self, event: AnyEvent, seq: int = 0) -> None:
        """Take an ``approval.*`` event (with ``approvals``) or a ``step.*`` or ``tool.*``
        event (with ``activity``) of this request's trace, numbered ``seq``, from the feed
        (never blocks; never dropped: a Turn's Steps are bounded by its policy)."""
        wanted = self.approvals if event.type in APPROVAL_EVENTS else self.activity
        if self.answer is None and wanted:
            self.pieces.append(Notice(event, seq))
            self._wake.set()

    def ready(self) -> bool:
        """Whether the next item is here already (the next wait for one would not wait)."""
        return bool(self.pieces) or self.answer is not None or self.ended

    async def first(self) -> Item:
        """The first item, before the response starts (so an early failure can be a 502; a
        request the daemon stops under first is answered ``SHUTTING_DOWN``)."""
        try:
            return await anext(self._items)
        except StopAsyncIteration:
            await self.aclose()
            return not_answered_here()
        except BaseException:
            await self.aclose()
            raise

    async def items(self) -> AsyncIterator[Item]:
        """Pieces in order, then the answer; ``None`` after :data:`KEEPALIVE_SECONDS` idle."""
        while True:
            if self.pieces:
                piece = self.pieces.popleft()
                if isinstance(piece, Piece):
                    self.chars -= len(piece.text)
                yield piece
            elif self.answer is not None:
                yield self.answer
                return
            elif self.ended:
                return
            else:
                self._wake.clear()
                try:
                    async with asyncio.timeout(KEEPALIVE_SECONDS):
                        await self._wake.wait()
                except TimeoutError:
                    yield None

    async def rest(self) -> AsyncIterator[Item]:
        """What :meth:`first` left (the response calls :meth:`aclose` when it ends)."""
        async for item in self._items:
            yield item

    async def aclose(self) -> None:
        """Stop waiting for the request (the Turn runs on); idempotent."""
        if self._feed is not None:
            self._feed.unfollow(self)
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def not_answered_here() -> DelegateAnswer:
    """The answer of a request the daemon stopped under: it is answered after the next start,
    and can be asked for by its id."""
    return DelegateAnswer.failure(
        IpcError(
            "the daemon stopped before the request was answered: ask for it by its id "
            "once the daemon runs again",
            code=DeliveryCode.SHUTTING_DOWN,
        )
    )


def delta_json(piece: Piece) -> dict[str, Any]:
    delta = piece.delta
    return {
        "agent": piece.agent,
        "instanceKey": delta.instance_key,
        "traceId": delta.trace_id,
        "turnId": delta.turn_id,
        "stepId": delta.step_id,
        "text": piece.text,
    }


ANSWER_EVENT_ID = "answer"
"""The ``id:`` of a stream's last event, the answer: a client reconnecting with it as its
``Last-Event-ID`` is told there is nothing more (204)."""


def sse_event(kind: str, data: object, event_id: int | str = 0) -> bytes:
    """One server-sent event (with its ``id:`` when it has one)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def answer_json(answer: DelegateAnswer, request_id: str) -> dict[str, object]:
    """The body a request is answered with: the Turn's answer and the request's id."""
    body: dict[str, object] = answer.to_wire()
    body["requestId"] = request_id
    return body


async def native_events(turn: TurnStream, first: Item) -> AsyncIterator[bytes]:
    """``event: delta`` per piece of text, then ``event: answer``, each with its ``id:``."""

    def encode(item: Item) -> bytes:
        if item is None:
            return b": keepalive\n\n"
        if isinstance(item, Piece):
            return sse_event("delta", delta_json(item), item.seq)
        if isinstance(item, Notice):
            return sse_event("approval", item.event.to_builtins(), item.seq)
        answer = answer_json(item, turn.request_id)
        if turn.dropped:
            answer["droppedDeltas"] = turn.dropped
        return sse_event("answer", answer, ANSWER_EVENT_ID)

    try:
        yield encode(first)
        if isinstance(first, DelegateAnswer):
            return
        async for item in turn.rest():
            yield encode(item)
    finally:
        await turn.aclose()


async def event_stream(
    swarm: SwarmOperations, request: Request, agent: str | None, trace: str | None
) -> AsyncIterator[bytes]:
    """Server-sent events: one ``data:`` line per runtime event that passes the filters, as it
    happens, until the client leaves or the daemon stops."""
    async with swarm.subscribe() as subscription:
        yield b": connected\n\n"
        reported = 0
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE_SECONDS):
                    event = await subscription.queue.get()
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield b": keepalive\n\n"
                continue
            if event is END_OF_STREAM:
                return
            if subscription.dropped > reported:
                lost = subscription.dropped - reported
                reported = subscription.dropped
                yield f"event: dropped\ndata: {lost}\n\n".encode()
            typed = read_event(event)
            if matches(typed, agent=agent, trace=trace, since=None):
                line = json.dumps(event, ensure_ascii=False, default=str)
                yield f"event: {typed.type or 'event'}\ndata: {line}\n\n".encode()
