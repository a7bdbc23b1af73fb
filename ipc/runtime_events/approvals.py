"""The events of a tool call parked until an operator decides it."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from ipc.runtime_events.base import RuntimeEvent
from ipc.runtime_events.types import EventType

# -- approvals --------------------------------------------------------------------------------


class ApprovalEvent(RuntimeEvent):
    """A tool call parked until an operator decides it."""

    approval_id: str | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET
    tool_name: str | UnsetType | None = UNSET
    turn_id: str | UnsetType = UNSET
    status: str | UnsetType = UNSET
    expires_at: str | UnsetType = UNSET
    args: Any = UNSET
    reason: str | UnsetType | None = UNSET
    edited_args: Any = UNSET
    decided_by: Any = UNSET
    error_message: str | UnsetType = UNSET
    """Why the runtime ended the wait for it (its end never came)."""


class ApprovalRequestedEvent(ApprovalEvent, tag=EventType.APPROVAL_REQUESTED.value):
    """A call was parked for approval."""


class ApprovalResumedEvent(ApprovalEvent, tag=EventType.APPROVAL_RESUMED.value):
    """A parked call was taken up again (after a restart)."""


class ApprovalDecidedEvent(ApprovalEvent, tag=EventType.APPROVAL_DECIDED.value):
    """An operator approved or rejected a parked call."""


class ApprovalExpiredEvent(ApprovalEvent, tag=EventType.APPROVAL_EXPIRED.value):
    """Nobody decided before the approval expired."""


class ApprovalCancelledEvent(ApprovalEvent, tag=EventType.APPROVAL_CANCELLED.value):
    """The request was cancelled while the call waited."""


class ApprovalRefusedEvent(ApprovalEvent, tag=EventType.APPROVAL_REFUSED.value):
    """A decision was refused: the one deciding may not decide."""
