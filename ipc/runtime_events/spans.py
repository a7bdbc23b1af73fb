"""Which event opens and which ends each kind of span, and how an ended span failed: the span
rules the studio's waterfall and the OpenTelemetry exporter both read, said once beside the events.

A span is a Turn, a Step, a tool call, or a tool call's wait for an operator's approval.
"""

from __future__ import annotations

from typing import Any, Literal

from goondan.errors import DeliveryCode, ToolCode
from ipc.runtime_events.base import RuntimeEvent, given
from ipc.runtime_events.reading import AnyEvent
from ipc.runtime_events.types import EventType
from ipc.runtime_events.work import (
    StepEvent,
    ToolCompletedEvent,
    ToolEvent,
    TurnCancellingEvent,
    TurnEvent,
    TurnResumedEvent,
)

SpanKind = Literal["turn", "step", "tool", "approval"]
"""What a span is of."""

SPAN_STARTS: dict[str, SpanKind] = {
    EventType.TURN_STARTED: "turn",
    EventType.STEP_STARTED: "step",
    EventType.TOOL_CALLED: "tool",
    EventType.APPROVAL_REQUESTED: "approval",
    EventType.APPROVAL_RESUMED: "approval",
}
"""The events that open a span, and its kind."""
SPAN_ENDS: dict[str, SpanKind] = {
    EventType.TURN_COMPLETED: "turn",
    EventType.TURN_FAILED: "turn",
    EventType.STEP_COMPLETED: "step",
    EventType.STEP_FAILED: "step",
    EventType.TOOL_COMPLETED: "tool",
    EventType.TOOL_FAILED: "tool",
    EventType.APPROVAL_DECIDED: "approval",
    EventType.APPROVAL_EXPIRED: "approval",
    EventType.APPROVAL_CANCELLED: "approval",
}
"""The events that end a span, and its kind."""
FAILED_ENDS = frozenset({EventType.TURN_FAILED, EventType.STEP_FAILED, EventType.TOOL_FAILED})
"""Ends that say the span failed, whatever else they carry."""
INCOMPLETE_END: dict[SpanKind, EventType] = {
    "turn": EventType.TURN_FAILED,
    "step": EventType.STEP_FAILED,
    "tool": EventType.TOOL_FAILED,
    "approval": EventType.APPROVAL_CANCELLED,
}
"""The end event's type given to a span whose own end never came."""
FAILED_APPROVALS = {
    EventType.APPROVAL_EXPIRED: (
        ToolCode.E_TOOL_APPROVAL_TIMEOUT,
        "nobody decided before the approval expired",
    ),
    EventType.APPROVAL_CANCELLED: (
        ToolCode.E_TOOL_CANCELLED,
        "the request was cancelled while the call waited",
    ),
}
"""How an approval's wait ends without a decision: ``(code, message)``."""
CANCELLED = DeliveryCode.CANCELLED
"""The error code of a Step cut short by a cancellation."""


def span_kind(event: AnyEvent) -> SpanKind | None:
    """The kind of span ``event`` opens, ends or speaks of; ``None`` for no span's event."""
    kind = SPAN_STARTS.get(event.type) or SPAN_ENDS.get(event.type)
    if kind is None and isinstance(event, TurnCancellingEvent | TurnResumedEvent):
        return "turn"
    return kind


def error_object(end: RuntimeEvent) -> dict[str, Any]:
    """The error object a tool call's end carries, ``{}`` when it carries none."""
    error = end.error if isinstance(end, ToolEvent) else None
    return error if isinstance(error, dict) else {}


def failure(end: RuntimeEvent) -> tuple[str, str] | None:
    """``(code, message)`` of a span that ``end`` says failed; ``None`` when it did not (an
    approval an operator decided, either way, is no failure of the wait)."""
    if end.type in FAILED_ENDS:
        code = given(end.error_code) if isinstance(end, TurnEvent | StepEvent) else None
        message = (
            given(end.error_message) if isinstance(end, TurnEvent | StepEvent | ToolEvent) else None
        )
        return str(code or "exception"), str(message or code or "failed")
    if isinstance(end, ToolCompletedEvent) and end.status == "error":
        error = error_object(end)
        code = error.get("code")
        return str(code or "tool_error"), str(error.get("message") or code or "the tool failed")
    return FAILED_APPROVALS.get(EventType(end.type))
