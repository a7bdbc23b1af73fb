"""Live runtime events for whoever listens (the HTTP API's event stream).

Every event the daemon logs is offered to each subscriber's bounded queue as its JSON object
(what the event stream sends); watchers in this process are told of it typed. A subscriber that
falls behind loses its oldest events, never the daemon's time: publishing never blocks, and the
stream says how many it dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ipc.runtime_events import AnyEvent, StreamEndEvent

SUBSCRIBER_QUEUE = 1000
"""Events one subscriber may fall behind by before the oldest are dropped."""


@dataclass(eq=False)
class Subscription:
    """One listener's queue and what it lost."""

    queue: asyncio.Queue[dict[str, Any]] = field(
        default_factory=lambda: asyncio.Queue(SUBSCRIBER_QUEUE)
    )
    dropped: int = 0


_STREAM_END = StreamEndEvent()
END_OF_STREAM: dict[str, Any] = _STREAM_END.to_builtins()
"""The last item every subscriber gets when the hub closes (the daemon stops)."""


class EventHub:
    """Fans events out to subscribers; ``publish`` is an ``EventLog`` listener."""

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self._watchers: list[Callable[[AnyEvent], None]] = []
        self.closed = False

    def close(self) -> None:
        """End every subscription: each gets :data:`END_OF_STREAM` (after what it has queued)."""
        self.publish(_STREAM_END)
        self.closed = True

    def publish(self, event: AnyEvent) -> None:
        """Offer ``event`` to every subscriber (dropping a slow one's oldest event)."""
        for watcher in list(self._watchers):
            with contextlib.suppress(Exception):  # one bad watcher costs no one else an event
                watcher(event)
        if not self._subscribers:
            return
        data = END_OF_STREAM if event is _STREAM_END else event.to_builtins()
        for subscription in self._subscribers:
            queue = subscription.queue
            if queue.full():
                queue.get_nowait()
                subscription.dropped += 1
            queue.put_nowait(data)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        """A subscription for the duration of the ``async with``."""
        subscription = Subscription()
        if self.closed:
            subscription.queue.put_nowait(END_OF_STREAM)
        self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)

    @contextmanager
    def watching(self, watcher: Callable[[AnyEvent], None]) -> Iterator[None]:
        """Call ``watcher`` with each event as it is published, for the ``with`` block.

        Unlike a subscription it has no queue to fall behind in, so it never loses an event to
        a busy daemon: it runs on the loop, so it must not block.
        """
        self._watchers.append(watcher)
        try:
            yield
        finally:
            self._watchers.remove(watcher)

    def __len__(self) -> int:
        return len(self._subscribers)  # text deltas are published for subscribers alone
