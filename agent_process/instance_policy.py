"""``policy.concurrency``: what a message for an instance whose Turn is running does.

``enqueue`` queues it (Turns of one instance run one after another); ``reject`` refuses it
with :class:`InstanceBusy`; ``interrupt`` marks the admitted Turn before it, running or
queued, superseded by it. A superseded Turn stops at its next Step boundary (a queued one as
soon as it has put its message into the conversation) and its caller is answered with the
answer of the Turn that superseded it, which sees every message before its own; through the
chain, every interrupted caller gets the newest Turn's answer. A superseded Turn that ends on
its own before reaching a boundary keeps its own answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from agent_process.scope import Cancellation
from agent_process.turn_types import TurnInput, TurnResult
from goondan.errors import DeliveryCode, DeliveryError

INTERRUPTED_REASON = "interrupted by a newer message to its conversation (policy.concurrency)"
"""Why an interrupted Turn stopped (its ``CANCELLED`` result says so; its caller never sees
it, being answered by the Turn that superseded it)."""


class InstanceBusy(DeliveryError):
    """The instance is running (or has queued) a Turn and its agent refuses another meanwhile
    (``policy.concurrency: reject``)."""

    code = DeliveryCode.INSTANCE_BUSY


@dataclass(eq=False, slots=True)
class QueuedTurn:
    """A Turn waiting in an instance's queue (or running: its instance's ``current``)."""

    turn_input: TurnInput
    future: asyncio.Future[TurnResult]
    on_start: Callable[[], None] | None = None
    cancellation: Cancellation = field(default_factory=Cancellation)
    """The Turn's own: an interrupt asks it to stop at its next Step boundary."""
    superseded_by: QueuedTurn | None = None
    """The newer Turn whose answer this one's caller gets, when it was interrupted."""


def supersede(earlier: QueuedTurn, newer: QueuedTurn) -> bool:
    """Mark ``earlier`` (an admitted Turn, running or queued) superseded by ``newer`` and ask
    it to stop at its next Step boundary; ``False`` when it has been answered already."""
    if earlier.future.done() or earlier.superseded_by is not None:
        return False
    earlier.superseded_by = newer
    earlier.cancellation.interrupt(INTERRUPTED_REASON)
    return True


def settle(turn: QueuedTurn, result: TurnResult) -> None:
    """Answer ``turn``'s caller with ``result``, or, when the Turn stopped because it was
    superseded, with the answer of the Turn that superseded it (once that one ends)."""
    future = turn.future
    if future.done():
        return
    newer = turn.superseded_by
    interrupted = result.error is not None and result.error.code == DeliveryCode.CANCELLED
    if newer is None or not interrupted or not turn.cancellation.interrupted:
        future.set_result(result)
        return
    newer.future.add_done_callback(lambda answer: _follow(future, answer))


def _follow(future: asyncio.Future[TurnResult], answer: asyncio.Future[TurnResult]) -> None:
    if future.done():
        return
    if answer.cancelled():  # the agent stopped before the newer Turn ended: so did this one
        future.cancel()
    else:
        future.set_result(answer.result())
