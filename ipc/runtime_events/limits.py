"""The events of the swarm's limits: budgets, lost deliveries, full inboxes, cancelled requests
and model permits from their rate pools.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from goondan.usage import Reached
from ipc.runtime_events.base import Number, RuntimeEvent
from ipc.runtime_events.types import EventType

# -- budgets, deliveries, requests ----------------------------------------------------------


class BudgetExceededEvent(RuntimeEvent, tag=EventType.BUDGET_EXCEEDED.value):
    """A model call was refused: a budget's ceiling is reached, or the call would not fit."""

    turn_id: str | UnsetType = UNSET
    budget: str | UnsetType = UNSET
    """``turn``, ``instance`` or ``trace``."""
    root: str | UnsetType = UNSET
    """The agent whose trace budget it is (``trace``)."""
    figure: str | UnsetType = UNSET
    used: Number | UnsetType = UNSET
    limit: Number | UnsetType = UNSET
    reserved: Number | UnsetType = UNSET
    needed: Number | UnsetType = UNSET

    @classmethod
    def of(cls, reached: Reached, budget: str) -> BudgetExceededEvent:
        """The event of ``budget`` reaching ``reached`` (``reserved`` and ``needed`` only when
        the ceiling itself is not reached: the call would not fit under it)."""
        event = cls(budget=budget, figure=reached.figure, used=reached.used, limit=reached.limit)
        if not reached.reached:
            event.reserved, event.needed = reached.reserved, reached.needed
        return event


class DeliveryLostEvent(RuntimeEvent, tag=EventType.DELIVERY_LOST.value):
    """A send nobody waits for was not delivered."""

    event_id: str | UnsetType = UNSET
    sender: str | UnsetType = UNSET
    sender_instance_key: str | UnsetType | None = UNSET
    started: bool | UnsetType = UNSET
    attempts: int | UnsetType = UNSET
    error: Any = UNSET


class InboxOverflowEvent(RuntimeEvent, tag=EventType.INBOX_OVERFLOW.value):
    """An instance's inbox was full: a message was dropped."""

    kind: str | UnsetType = UNSET
    code: str | UnsetType = UNSET


class RequestCancelledEvent(RuntimeEvent, tag=EventType.REQUEST_CANCELLED.value):
    """An operator cancelled a running request (its trace)."""

    reason: str | UnsetType = UNSET


# -- model permits ----------------------------------------------------------------------------


class ModelPermitEvent(RuntimeEvent):
    """A model call's permit from its rate pool."""

    pool: str | UnsetType = UNSET
    reason: str | UnsetType | None = UNSET
    position: int | UnsetType = UNSET
    in_use: int | UnsetType = UNSET
    waited_ms: int | UnsetType = UNSET
    retry_after_ms: int | UnsetType | None = UNSET


class ModelPermitWaitingEvent(ModelPermitEvent, tag=EventType.MODEL_PERMIT_WAITING.value):
    """A call waits in its pool's queue."""


class ModelPermitGrantedEvent(ModelPermitEvent, tag=EventType.MODEL_PERMIT_GRANTED.value):
    """A call that waited got its permit."""


class ModelPermitTimeoutEvent(ModelPermitEvent, tag=EventType.MODEL_PERMIT_TIMEOUT.value):
    """A call waited past its timeout: it is not made."""


class ModelRateLimitedEvent(ModelPermitEvent, tag=EventType.MODEL_RATE_LIMITED.value):
    """The provider answered 429: the pool pauses."""
