"""The answers a connector waits for: how the Turn each of its events started ended.

The daemon settles every event a connector emitted (``connector_event_settled``); for an event
whose Turn ended, the settlement carries the Turn's answer (or why it failed). A connector that
asked for it (``ConnectorContext.emit_awaiting_answer``) gets a future, resolved here when the
settlement arrives; the other settlements pass by.
"""

from __future__ import annotations

import asyncio

from ipc.events import ConnectorEventSettled
from tools_base import TurnAnswer


class AnswerWaiters:
    """Futures of answers, by event id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[TurnAnswer]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, event_id: str) -> asyncio.Future[TurnAnswer]:
        """A future resolved by the settlement of ``event_id`` (call it before that can come).

        A waiter that stops waiting (its future cancelled) is forgotten at once.
        """
        future: asyncio.Future[TurnAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[event_id] = future
        future.add_done_callback(lambda _: self._forget(event_id, future))
        return future

    def _forget(self, event_id: str, future: asyncio.Future[TurnAnswer]) -> None:
        if self._waiting.get(event_id) is future:
            del self._waiting[event_id]

    def settle(self, body: ConnectorEventSettled) -> None:
        """Resolve the waiter of the settled event, if one waits."""
        future = self._waiting.pop(body.event_id, None)
        if future is None or future.done():
            return
        error = body.error or body.turn_error
        if error is None and body.answer is None:
            error = "the Turn ended without an answer"
        future.set_result(TurnAnswer(text=body.answer, error=error))
