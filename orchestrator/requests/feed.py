"""A running request's stream, kept so a client that lost its connection can pick it up again.

Each piece of streamed text (and each ``approval.*``, ``step.*`` and ``tool.*`` event of the
request's trace, when they were asked for) gets the next number of the request, the ``id:`` of its server-sent event; a
follower (a response streaming the request) gets each event as it is added, never waiting. A
client reconnecting with ``Last-Event-ID: N`` is replayed what came after ``N``, then follows.

Bounds: the feed holds at most :data:`FEED_MAX_CHARS` characters of text and
:data:`FEED_MAX_EVENTS` events; past either, the oldest are let go (a client that reconnects
from before them gets what is left, and the answer, which carries the whole text). The feed
lives in memory while its request runs; once answered, only the answer remains (on disk).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from ipc.runtime_events import AnyEvent, EventType
from orchestrator.approvals import APPROVAL_EVENTS

FEED_MAX_CHARS = 4 * 1024 * 1024
"""Characters of streamed text a running request keeps for clients that reconnect."""
FEED_MAX_EVENTS = 65_536
"""Events a running request keeps for clients that reconnect."""
ACTIVITY_EVENTS: frozenset[str] = frozenset(
    kind.value
    for kind in (
        EventType.STEP_STARTED,
        EventType.STEP_COMPLETED,
        EventType.STEP_FAILED,
        EventType.TOOL_CALLED,
        EventType.TOOL_COMPLETED,
        EventType.TOOL_FAILED,
    )
)
"""The Steps and tool calls of a request's trace, which front doors that show a Turn's work
(AG-UI, the Responses API) follow."""
NOTICED_EVENTS = APPROVAL_EVENTS | ACTIVITY_EVENTS
"""The runtime events a feed keeps beside text."""


class Follower(Protocol):
    """Takes a request's events as they come; neither method may block."""

    def put(self, agent: str, delta: TextDelta, seq: int = 0) -> None:
        """A piece of text, numbered ``seq``."""
        ...

    def notice(self, event: AnyEvent, seq: int = 0) -> None:
        """An ``approval.*``, ``step.*`` or ``tool.*`` event, numbered ``seq``."""
        ...


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One numbered event: a piece of text of ``agent``, or a runtime event."""

    seq: int
    agent: str
    delta: TextDelta | None = None
    event: AnyEvent | None = None


class RequestFeed:
    """The numbered events of one running request (see the module docstring)."""

    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self.events: deque[FeedEvent] = deque()
        self.seq = 0
        """The number of the last event added."""
        self.chars = 0
        self.followers: list[Follower] = []
        self.answer: DelegateAnswer | None = None
        self.answered = asyncio.Event()

    def delta(self, agent: str, delta: TextDelta) -> None:
        """Add a piece of text (the router's sink: never blocks)."""
        if self.answer is not None or not delta.text:
            return
        self.seq += 1
        self.events.append(FeedEvent(self.seq, agent, delta=delta))
        self.chars += len(delta.text)
        self._trim()
        for follower in list(self.followers):
            follower.put(agent, delta, self.seq)

    def notice(self, event: AnyEvent) -> None:
        """Add an event of :data:`NOTICED_EVENTS` if it is of this request's trace (never
        blocks)."""
        if self.answer is not None or event.trace != self.trace_id:
            return
        if event.type not in NOTICED_EVENTS:
            return
        self.seq += 1
        self.events.append(FeedEvent(self.seq, event.agent_name or "", event=event))
        self._trim()
        for follower in list(self.followers):
            follower.notice(event, self.seq)

    def follow(self, follower: Follower, after: int = 0) -> None:
        """Hand ``follower`` what is kept after event ``after``, then each new event."""
        for kept in self.events:
            if kept.seq <= after:
                continue
            if kept.delta is not None:
                follower.put(kept.agent, kept.delta, kept.seq)
            elif kept.event is not None:
                follower.notice(kept.event, kept.seq)
        self.followers.append(follower)

    def unfollow(self, follower: Follower) -> None:
        """Stop handing ``follower`` events (a response that ended); idempotent."""
        if follower in self.followers:
            self.followers.remove(follower)

    def finish(self, answer: DelegateAnswer) -> None:
        """The request is answered: its followers get nothing more, its text is let go."""
        self.answer = answer
        self.seq += 1  # the answer's own number
        self.events.clear()
        self.chars = 0
        self.followers.clear()
        self.answered.set()

    def _trim(self) -> None:
        events = self.events
        while events and (self.chars > FEED_MAX_CHARS or len(events) > FEED_MAX_EVENTS):
            gone = events.popleft()
            if gone.delta is not None:
                self.chars -= len(gone.delta.text)
