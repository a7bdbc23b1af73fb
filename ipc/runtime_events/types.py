"""The names of the runtime events: one :class:`EventType` member per type, as the event log
and the event stream spell it.
"""

from __future__ import annotations

import enum

from goondan import handoff_events
from goondan.state_files.eventlog import HEADER_TYPE


class EventType(enum.StrEnum):
    """Every runtime event type, as the event log and the event stream spell it."""

    EVENTLOG_OPENED = HEADER_TYPE
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLING = "turn.cancelling"
    TURN_RESUMED = "turn.resumed"
    STEP_STARTED = "step.started"
    STEP_COMPLETED = "step.completed"
    STEP_FAILED = "step.failed"
    TOOL_CALLED = "tool.called"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_RESUMED = "approval.resumed"
    APPROVAL_DECIDED = "approval.decided"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_CANCELLED = "approval.cancelled"
    APPROVAL_REFUSED = "approval.refused"
    PROCESS_SPAWNED = "process.spawned"
    PROCESS_ADOPTED = "process.adopted"
    PROCESS_READY = "process.ready"
    PROCESS_EXITED = "process.exited"
    PROCESS_BACKOFF = "process.backoff"
    PROCESS_RESTARTING = "process.restarting"
    PROCESS_RESTART_REQUESTED = "process.restart_requested"
    PROCESS_CONFIG_REJECTED = "process.config_rejected"
    PROCESS_CONFIG_APPLIED = "process.config_applied"
    PROCESS_RESUME_PENDING = "process.resume_pending"
    PROCESS_BROKEN_FDS = "process.broken_fds"
    BUDGET_EXCEEDED = "budget.exceeded"
    DELIVERY_LOST = "delivery.lost"
    INBOX_OVERFLOW = "inbox.overflow"
    REQUEST_CANCELLED = "request.cancelled"
    MODEL_PERMIT_WAITING = "model.permit.waiting"
    MODEL_PERMIT_GRANTED = "model.permit.granted"
    MODEL_PERMIT_TIMEOUT = "model.permit.timeout"
    MODEL_RATE_LIMITED = "model.rate_limited"
    CONNECTOR_EVENT = "connector.event"
    CONNECTION_RECOVERED = "connection.recovered"
    CONNECTION_FAILED = "connection.failed"
    CONNECTION_FINISHED = "connection.finished"
    NETWORK_CONNECTION = "network.connection"
    """An outbound connection a sandboxed program asked the network proxy for."""
    TEXT_DELTA = "text.delta"
    """A piece of streamed model text: on the live event stream only, never in the log."""
    STREAM_END = "stream.end"
    """The live event stream ends (the daemon stops)."""
    AGENT_REQUEST = handoff_events.AGENT_REQUEST
    """The event type of a handoff one agent asks another to answer (not a logged event)."""
    AGENT_SEND = handoff_events.AGENT_SEND
    """The event type of a handoff one agent sends without waiting (not a logged event)."""
    APPROVAL_RESUME = "approval.resume"
    """The event type of the Turn that takes up calls parked for approval (not logged)."""


LIVE_ONLY = frozenset({EventType.TEXT_DELTA, EventType.STREAM_END})
"""Types the live event stream carries and the event log never holds."""
