"""Runtime events, typed: one :class:`EventType` names every event; each family (turn, step,
tool, approval, process, budget, delivery, model permit, connection, request) is one msgspec
struct whose subclasses are its types, tagged by ``type``. An event encodes as the JSON line the event log holds and the
event stream sends (``{"type": "turn.started", "timestamp": ..., "agentName": ..., ...}``):
fields left :data:`~msgspec.UNSET` are absent from it, a field set to ``None`` is ``null``, so a
producer's line keeps exactly the keys it always had.

:func:`read_event` and :func:`decode_line` read one back. A line they cannot type (a type this
runtime does not know, written by a newer one, or a field it does not expect) is kept whole as a
:class:`RawEvent`, written back unchanged: an older runtime reading a newer log loses nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import msgspec
from msgspec import UNSET as UNSET
from msgspec import UnsetType

from goondan import handoff_events
from goondan.state_files.eventlog import HEADER_TYPE
from goondan.usage import Reached

T = TypeVar("T")


class EventType(enum.StrEnum):
    """Every runtime event type, as the event log and the event stream spell it."""

    EVENTLOG_OPENED = HEADER_TYPE
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLING = "turn.cancelling"
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

Number = int | float
"""A figure as its producer wrote it (``3`` stays ``3``, ``3.0`` stays ``3.0``)."""


def given(value: T | UnsetType | None) -> T | None:
    """``value``, or ``None`` when the event did not carry it."""
    return None if isinstance(value, UnsetType) else value


class TokenCounts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Tokens of one model call (a Step) or of a Turn's calls, in the event log's words.

    The runtime counts input and output tokens; an event spells them ``promptTokens`` and
    ``completionTokens`` as it always has.
    """

    input_tokens: int = msgspec.field(default=0, name="promptTokens")
    output_tokens: int = msgspec.field(default=0, name="completionTokens")
    total_tokens: int = msgspec.field(default=0, name="totalTokens")
    cost: Number | UnsetType = UNSET
    """What the tokens cost (absent without a price)."""

    @classmethod
    def read(cls, data: object) -> TokenCounts:
        """The counts of a ``tokenUsage`` object (a Turn's answer carries one too); none for
        anything that is not one."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError:
            return cls()


class RuntimeEvent(
    msgspec.Struct,
    tag_field="type",
    rename="camel",
    omit_defaults=True,
    forbid_unknown_fields=True,
):
    """What every runtime event carries: when, which agent, and its place in a trace.

    The producer's recorder stamps these; ``parentSpanId`` is absent for a span that starts its
    trace. Subclasses are the families; their subclasses the types (``type`` is the tag).
    """

    type: ClassVar[EventType]
    timestamp: str = ""
    agent_name: str = ""
    instance_key: str | UnsetType | None = UNSET
    trace_id: str | UnsetType | None = UNSET
    span_id: str | UnsetType = UNSET
    parent_span_id: str | UnsetType = UNSET

    @property
    def trace(self) -> str | None:
        """The trace id, ``None`` when the event has none."""
        return self.trace_id or None

    @property
    def instance(self) -> str | None:
        """The conversation instance, ``None`` when the event names none."""
        return self.instance_key or None

    @property
    def span(self) -> str | None:
        """The span the event opens or closes, if any."""
        return self.span_id or None

    @property
    def parent_span(self) -> str | None:
        """The span it hangs under, ``None`` for a trace's first span."""
        return self.parent_span_id or None

    def to_builtins(self) -> dict[str, Any]:
        """The event as the JSON object of its line."""
        built: dict[str, Any] = msgspec.to_builtins(self, enc_hook=str)
        return built


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


class TurnStartedEvent(TurnEvent, tag=EventType.TURN_STARTED.value):
    """A Turn began (without ``parentSpanId``: the request entered the swarm with it)."""


class TurnCompletedEvent(TurnEvent, tag=EventType.TURN_COMPLETED.value):
    """A Turn answered."""


class TurnFailedEvent(TurnEvent, tag=EventType.TURN_FAILED.value):
    """A Turn ended without an answer."""


class TurnCancellingEvent(TurnEvent, tag=EventType.TURN_CANCELLING.value):
    """The agent heard a cancellation; the Turn stops at its next safe point."""


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


# -- processes --------------------------------------------------------------------------------


class ProcessEvent(RuntimeEvent):
    """The lifecycle of an agent's or a connection's process, or of the configuration."""

    pid: int | UnsetType | None = UNSET
    node: str | UnsetType = UNSET
    """The cluster node it runs on."""
    expected: bool | UnsetType = UNSET
    """Whether the exit was asked for (``process.exited``)."""
    consecutive_crashes: int | UnsetType = UNSET
    exit_code: int | UnsetType | None = UNSET
    signal: str | UnsetType | None = UNSET
    reason: str | UnsetType | None = UNSET
    delay_seconds: Number | UnsetType = UNSET
    restarts: int | UnsetType = UNSET
    errors: list[Any] | UnsetType = UNSET
    restarted: list[str] | UnsetType = UNSET
    resumed_instance: str | UnsetType = msgspec.field(default=UNSET, name="instance")
    """The conversation instance resumed (``process.resume_pending``)."""
    fds: list[int] | UnsetType = UNSET


class ProcessSpawnedEvent(ProcessEvent, tag=EventType.PROCESS_SPAWNED.value):
    """A process was started."""


class ProcessAdoptedEvent(ProcessEvent, tag=EventType.PROCESS_ADOPTED.value):
    """A process started elsewhere (a cluster node) was taken over."""


class ProcessReadyEvent(ProcessEvent, tag=EventType.PROCESS_READY.value):
    """A process booted and serves."""


class ProcessExitedEvent(ProcessEvent, tag=EventType.PROCESS_EXITED.value):
    """A process exited."""


class ProcessBackoffEvent(ProcessEvent, tag=EventType.PROCESS_BACKOFF.value):
    """A crashing process waits ``delaySeconds`` before its next start."""


class ProcessRestartingEvent(ProcessEvent, tag=EventType.PROCESS_RESTARTING.value):
    """A crashed process is started again."""


class ProcessRestartRequestedEvent(ProcessEvent, tag=EventType.PROCESS_RESTART_REQUESTED.value):
    """An agent asked to be restarted after its Turn."""


class ProcessConfigRejectedEvent(ProcessEvent, tag=EventType.PROCESS_CONFIG_REJECTED.value):
    """A configuration change did not load; nothing changed."""


class ProcessConfigAppliedEvent(ProcessEvent, tag=EventType.PROCESS_CONFIG_APPLIED.value):
    """A configuration change was adopted."""


class ProcessResumePendingEvent(ProcessEvent, tag=EventType.PROCESS_RESUME_PENDING.value):
    """A conversation interrupted mid-Turn is resumed."""


class ProcessBrokenFdsEvent(ProcessEvent, tag=EventType.PROCESS_BROKEN_FDS.value):
    """A tool closed or replaced a standard descriptor: the agent exits to restart clean."""


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


# -- connections ------------------------------------------------------------------------------


class ConnectionEvent(RuntimeEvent):
    """A Connection's events and its process's health."""

    connection: str | UnsetType = UNSET
    event: str | UnsetType = UNSET
    rule: int | UnsetType | None = UNSET
    """The index of the ingress rule that matched (``null``: the Connection's default)."""
    error: str | UnsetType = UNSET
    consecutive_failures: int | UnsetType = UNSET


class ConnectorEventEvent(ConnectionEvent, tag=EventType.CONNECTOR_EVENT.value):
    """A connector's event was routed to an agent."""


class ConnectionRecoveredEvent(ConnectionEvent, tag=EventType.CONNECTION_RECOVERED.value):
    """A failing connection works again."""


class ConnectionFailedEvent(ConnectionEvent, tag=EventType.CONNECTION_FAILED.value):
    """A connection reported a failure."""


class ConnectionFinishedEvent(ConnectionEvent, tag=EventType.CONNECTION_FINISHED.value):
    """A connection's source is exhausted."""


# -- the log and the live stream --------------------------------------------------------------


class EventLogOpenedEvent(RuntimeEvent, tag=EventType.EVENTLOG_OPENED.value):
    """The first line of every event log file: the format it is written in."""

    format_version: int | UnsetType = UNSET


class TextDeltaEvent(RuntimeEvent, tag=EventType.TEXT_DELTA.value):
    """A piece of a streamed Turn's model text (live event stream only)."""

    turn_id: str | UnsetType = UNSET
    step_id: str | UnsetType = UNSET
    text: str | UnsetType = UNSET


class StreamEndEvent(RuntimeEvent, tag=EventType.STREAM_END.value):
    """The live event stream ends."""


TypedEvent = (
    TurnStartedEvent
    | TurnCompletedEvent
    | TurnFailedEvent
    | TurnCancellingEvent
    | StepStartedEvent
    | StepCompletedEvent
    | StepFailedEvent
    | ToolCalledEvent
    | ToolCompletedEvent
    | ToolFailedEvent
    | NetworkConnectionEvent
    | ApprovalRequestedEvent
    | ApprovalResumedEvent
    | ApprovalDecidedEvent
    | ApprovalExpiredEvent
    | ApprovalCancelledEvent
    | ApprovalRefusedEvent
    | ProcessSpawnedEvent
    | ProcessAdoptedEvent
    | ProcessReadyEvent
    | ProcessExitedEvent
    | ProcessBackoffEvent
    | ProcessRestartingEvent
    | ProcessRestartRequestedEvent
    | ProcessConfigRejectedEvent
    | ProcessConfigAppliedEvent
    | ProcessResumePendingEvent
    | ProcessBrokenFdsEvent
    | BudgetExceededEvent
    | DeliveryLostEvent
    | InboxOverflowEvent
    | RequestCancelledEvent
    | ModelPermitWaitingEvent
    | ModelPermitGrantedEvent
    | ModelPermitTimeoutEvent
    | ModelRateLimitedEvent
    | ConnectorEventEvent
    | ConnectionRecoveredEvent
    | ConnectionFailedEvent
    | ConnectionFinishedEvent
    | EventLogOpenedEvent
    | TextDeltaEvent
    | StreamEndEvent
)


def _stamp_types() -> dict[str, type[RuntimeEvent]]:
    """Give each tagged class its :class:`EventType` as ``type`` (msgspec keeps the tag a
    plain string); the classes by type."""
    classes: dict[str, type[RuntimeEvent]] = {}
    for cls in TypedEvent.__args__:
        cls.type = EventType(cls.__struct_config__.tag)
        classes[cls.type] = cls
    return classes


_CLASSES = _stamp_types()
"""Each type's class: converting to one class is ~70 times faster than to the union."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class RawEvent:
    """An event this runtime cannot type, kept as it was read so it is written back whole.

    It answers the questions every event answers (type, agent, trace, ...) from its object.
    """

    __slots__ = ("data", "type")

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        kind = data.get("type")
        self.type: str = kind if isinstance(kind, str) else ""

    @property
    def timestamp(self) -> str:
        """When it was recorded, ``""`` when it does not say."""
        return _text(self.data.get("timestamp")) or ""

    @property
    def agent_name(self) -> str:
        """The agent it is about, ``""`` when it does not say."""
        return _text(self.data.get("agentName")) or ""

    @property
    def trace(self) -> str | None:
        """Its trace id, if any."""
        return _text(self.data.get("traceId"))

    @property
    def instance(self) -> str | None:
        """Its conversation instance, if any."""
        return _text(self.data.get("instanceKey"))

    @property
    def span(self) -> str | None:
        """Its span, if any."""
        return _text(self.data.get("spanId"))

    @property
    def parent_span(self) -> str | None:
        """Its parent span, if any."""
        return _text(self.data.get("parentSpanId"))

    def field(self, name: str) -> Any:
        """The value of its JSON key ``name``, ``None`` when absent."""
        return self.data.get(name)

    def to_builtins(self) -> dict[str, Any]:
        """The event's JSON object, as read."""
        return self.data

    def __repr__(self) -> str:
        return f"RawEvent({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawEvent) and other.data == self.data

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dict it holds


AnyEvent = RuntimeEvent | RawEvent
"""An event as read: typed (one of :data:`TypedEvent`), or kept raw."""

_ENCODER = msgspec.json.Encoder(enc_hook=str)
_DECODER: msgspec.json.Decoder[TypedEvent] = msgspec.json.Decoder(TypedEvent)


def encode_event(event: AnyEvent) -> bytes:
    """The event's JSON line, without its newline (anything unencodable written as text)."""
    if isinstance(event, RawEvent):
        return _ENCODER.encode(event.data)
    return _ENCODER.encode(event)


def read_event(data: Mapping[str, Any]) -> AnyEvent:
    """The typed event of a JSON object (an agent's report, a line of an older log), or the
    object kept raw when it does not fit a known type."""
    kind = data.get("type")
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return RawEvent(dict(data))
    if type(kind) is not str:  # an EventType member: msgspec reads a tag from a plain str
        data = {**data, "type": str(kind)}
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return RawEvent(dict(data))


def as_event(event: AnyEvent | Mapping[str, Any]) -> AnyEvent:
    """``event`` typed: as it is when it is an event already, else read from its JSON object."""
    if isinstance(event, RuntimeEvent | RawEvent):
        return event
    return read_event(event)


PROCESS_FAMILY = "process"
"""The family of the lifecycle events (``process.<kind>``)."""


def event_family(event_type: str) -> str:
    """The family an event type belongs to: ``process`` for ``process.exited``."""
    return event_type.partition(".")[0]


_PROCESS_KINDS = {
    kind.value.partition(".")[2]: kind for kind in EventType if event_family(kind) == PROCESS_FAMILY
}


def process_event(kind: str, timestamp: str, agent: str, fields: Mapping[str, Any]) -> AnyEvent:
    """The ``process.<kind>`` event about ``agent`` from the supervisor's report of it
    (``fields`` in their JSON spelling); a kind this runtime does not know is kept raw."""
    event_type = _PROCESS_KINDS.get(kind, f"{PROCESS_FAMILY}.{kind}")
    return read_event({"type": event_type, "timestamp": timestamp, "agentName": agent, **fields})


def decode_line(line: bytes | str) -> AnyEvent | None:
    """The event of one JSON line; ``None`` when the line is not a JSON object."""
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        return None
    data = msgspec.json.decode(line)
    return RawEvent(data) if isinstance(data, dict) else None
