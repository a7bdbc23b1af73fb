"""The events of an agent's work: its Turns, their Steps, the Steps' tool calls, and the network
connections a tool call's sandboxed program opened.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from ipc.runtime_events.base import Number, RuntimeEvent, TokenCounts
from ipc.runtime_events.types import EventType

# -- turns ------------------------------------------------------------------------------------


class TurnEvent(RuntimeEvent):
    """A Turn of an agent's conversation instance."""

    turn_id: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    """Why it is being cancelled (``turn.cancelling``)."""
    step_count: int | UnsetType = UNSET
    duration: Number | UnsetType = UNSET
    """Milliseconds the Turn took."""
    output: Any = UNSET
    """The answer (capped), when nobody waits for it."""
    token_usage: TokenCounts | UnsetType = UNSET
    error_code: str | UnsetType | None = UNSET
    error_message: str | UnsetType | None = UNSET
    request_id: str | UnsetType = UNSET
    """The request the Turn answers (``turn.resumed``)."""
    attempt: int | UnsetType = UNSET
    """Which attempt at the Turn this is (``turn.resumed``: 2 or more)."""
    resumed_turn_id: str | UnsetType = UNSET
    """The Turn id of the attempt this one takes up (``turn.resumed``)."""
    resumed_span_id: str | UnsetType = UNSET
    """The span of the attempt this one takes up (``turn.resumed``): the link between them."""
    replayed: bool | UnsetType = UNSET
    """``turn.resumed``: the Turn had ended already; its recorded answer is given again."""


class TurnStartedEvent(TurnEvent, tag=EventType.TURN_STARTED.value):
    """A Turn began (without ``parentSpanId``: the request entered the swarm with it)."""


class TurnCompletedEvent(TurnEvent, tag=EventType.TURN_COMPLETED.value):
    """A Turn answered."""


class TurnFailedEvent(TurnEvent, tag=EventType.TURN_FAILED.value):
    """A Turn ended without an answer."""


class TurnCancellingEvent(TurnEvent, tag=EventType.TURN_CANCELLING.value):
    """The agent heard a cancellation; the Turn stops at its next safe point."""


class TurnResumedEvent(TurnEvent, tag=EventType.TURN_RESUMED.value):
    """A Turn whose agent process died under it is taken up by a new attempt (its own span,
    linked to the interrupted one): recorded model answers stand, idempotent tool calls in
    flight run again, others are answered ``E_TOOL_INTERRUPTED``."""


# -- steps ------------------------------------------------------------------------------------


class StepEvent(RuntimeEvent):
    """One Step (a model call and the tool calls it asked for) of a Turn."""

    step_id: str | UnsetType = UNSET
    step_index: int | UnsetType = UNSET
    turn_id: str | UnsetType = UNSET
    tool_call_count: int | UnsetType = UNSET
    duration: Number | UnsetType = UNSET
    """Milliseconds the Step took."""
    token_usage: TokenCounts | UnsetType | None = UNSET
    """The model call's tokens (``null`` when the provider reported none)."""
    error_code: str | UnsetType | None = UNSET
    error_message: str | UnsetType | None = UNSET


class StepStartedEvent(StepEvent, tag=EventType.STEP_STARTED.value):
    """A Step began."""


class StepCompletedEvent(StepEvent, tag=EventType.STEP_COMPLETED.value):
    """A Step's model call answered (its tool calls are done too)."""


class StepFailedEvent(StepEvent, tag=EventType.STEP_FAILED.value):
    """A Step's model call failed or was cancelled."""


# -- tools ------------------------------------------------------------------------------------


class ToolEvent(RuntimeEvent):
    """One tool call of a Step."""

    tool_call_id: str | UnsetType = UNSET
    tool_name: str | UnsetType = UNSET
    step_id: str | UnsetType = UNSET
    turn_id: str | UnsetType = UNSET
    args: Any = UNSET
    """The call's arguments (capped)."""
    status: str | UnsetType = UNSET
    """``ok`` or ``error`` (``tool.completed``)."""
    duration: Number | UnsetType = UNSET
    output: Any = UNSET
    error: Any = UNSET
    """The tool's error object, ``null`` when it succeeded."""
    error_message: str | UnsetType = UNSET
    """What the tool raised (``tool.failed``)."""


class ToolCalledEvent(ToolEvent, tag=EventType.TOOL_CALLED.value):
    """A tool call began."""


class ToolCompletedEvent(ToolEvent, tag=EventType.TOOL_COMPLETED.value):
    """A tool call returned a result (which may be an error result)."""


class ToolFailedEvent(ToolEvent, tag=EventType.TOOL_FAILED.value):
    """A tool call raised."""


class NetworkConnectionEvent(RuntimeEvent, tag=EventType.NETWORK_CONNECTION.value):
    """A connection a tool call's sandboxed program asked the network proxy for, recorded on
    the call's span (``spanId`` is the tool span) when it ended or was refused."""

    tool_call_id: str | UnsetType = UNSET
    tool_name: str | UnsetType = UNSET
    step_id: str | UnsetType = UNSET
    turn_id: str | UnsetType = UNSET
    protocol: str | UnsetType = UNSET
    """``http``, ``connect`` (HTTP CONNECT) or ``socks5``."""
    host: str | UnsetType = UNSET
    port: int | UnsetType = UNSET
    address: str | UnsetType | None = UNSET
    """The address connected to, after the policy checked it."""
    allowed: bool | UnsetType = UNSET
    reason: str | UnsetType | None = UNSET
    """Why it was refused (or failed)."""
    bytes_up: int | UnsetType = UNSET
    bytes_down: int | UnsetType = UNSET
    duration: Number | UnsetType = UNSET
    """Milliseconds the connection was open."""
