"""The events of the protocol (:mod:`ipc.protocol`) that ask nothing: what a process reports (it
booted, a Turn ended, a send was delivered, a model call's usage) or is told (a send failed, stop a
trace, a new leader); and the reading of any ``event`` into its typed body (:func:`read_event`).

Questions and their answers are in :mod:`ipc.questions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import msgspec

from ipc.delegation import Handoff
from ipc.messages import EventMessage, IpcError
from ipc.payload import EventBody, NotNegative, Payload
from ipc.protocol import DEFAULT_INSTANCE_KEY, EventKind, MalformedPayload, UnknownEvent
from ipc.questions import QUESTION_BODIES
from ipc.runtime_events import AnyEvent, RawEvent
from ipc.runtime_events import read_event as read_runtime_event


class Ready(EventBody, frozen=True):
    """The agent booted and serves; ``scope`` is its process scope token (``ipc.scope``)."""

    KIND: ClassVar[EventKind] = EventKind.READY
    pid: int = 0
    scope: str | None = None


class BootFailed(EventBody, frozen=True):
    """The agent cannot boot, and why."""

    KIND: ClassVar[EventKind] = EventKind.BOOT_FAILED
    error: str = "boot failed"


class StatusChanged(EventBody, frozen=True):
    """The agent became busy (a Turn runs) or idle."""

    KIND: ClassVar[EventKind] = EventKind.STATUS
    status: Literal["idle", "processing"] = "idle"


class TurnCompleted(EventBody, frozen=True):
    """A Turn of ``instance_key`` ended with ``status``."""

    KIND: ClassVar[EventKind] = EventKind.TURN_COMPLETED
    instance_key: str = DEFAULT_INSTANCE_KEY
    status: str = ""

    @property
    def ok(self) -> bool:
        """The Turn succeeded."""
        return self.status == "ok"


class ShutdownAck(EventBody, frozen=True):
    """The drain is over; the process exits next."""

    KIND: ClassVar[EventKind] = EventKind.SHUTDOWN_ACK


class RuntimeEventReport(EventBody, frozen=True):
    """One runtime event (``turn.started``, ``tool.completed``, ...) for the event log.

    It crosses the pipe as the event's JSON object (``{"event": {...}}``) and is read back typed;
    an event of a type or field this runtime does not know (a newer agent's) is kept whole as a
    :class:`~ipc.runtime_events.RawEvent`.
    """

    KIND: ClassVar[EventKind] = EventKind.RUNTIME_EVENT
    event: AnyEvent = msgspec.field(default_factory=lambda: RawEvent({}))

    def to_wire(self) -> dict[str, Any]:
        """``{"event": <the event's JSON object>}`` (nothing for an empty one)."""
        built = self.event.to_builtins()
        return {"event": built} if built else {}

    @classmethod
    def from_wire(cls, data: Any, what: str) -> RuntimeEventReport:
        """The report of a payload, its event typed; raises :class:`MalformedPayload` when
        ``event`` is not an object."""
        event = data.get("event", {}) if type(data) is dict else None
        if type(event) is not dict:  # the checking struct says what is wrong with it
            event = _EventObject._convert(data, what).event
        return cls(read_runtime_event(event))


class _EventObject(Payload, frozen=True):
    """What :class:`RuntimeEventReport` checks a payload against before typing its event."""

    event: dict[str, Any] = {}  # noqa: RUF012  # a msgspec struct: each instance gets its own copy


class TextDelta(EventBody, frozen=True):
    """A piece of the model text of a streamed Turn, in the order the model produced it.

    The agent that produced it is the message's sender; :attr:`stream_id` names the stream of
    the request that asked for it (a delegated Turn carries its caller's stream when relayed).
    """

    KIND: ClassVar[EventKind] = EventKind.TEXT_DELTA
    stream_id: str = ""
    """:attr:`Handoff.stream_id` of the Turn."""
    text: str = ""
    """The new text (never empty)."""
    trace_id: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    turn_id: str = ""
    step_id: str = ""
    """The Step whose model call produced it: text of two Steps is two answers in a row."""


class RestartRequest(EventBody, frozen=True):
    """A tool of the agent asked for the agent's restart."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_REQUEST
    reason: str = "tool:self-restart"


class Send(EventBody, frozen=True):
    """Fire-and-forget input: the sender does not wait for the Turn it starts. On the wire the
    handoff's fields sit in the payload beside ``kind``."""

    KIND: ClassVar[EventKind] = EventKind.SEND
    handoff: Handoff

    def to_wire(self) -> dict[str, Any]:
        return self.handoff.to_wire()

    @classmethod
    def from_wire(cls, data: Any, what: str) -> Send:
        return cls(Handoff.from_wire(data, what))


class SendStarted(EventBody, frozen=True):
    """The Turn of send ``event_id`` started: a crash from now on loses its effect midway."""

    KIND: ClassVar[EventKind] = EventKind.SEND_STARTED
    event_id: str = ""


class SendDone(EventBody, frozen=True):
    """The Turn of send ``event_id`` ended. For a send from a Connection it carries the
    Turn's ``answer`` text, or ``turn_error`` (``"<code>: <message>"``) when the Turn failed,
    so the connector can answer back where the event came from."""

    KIND: ClassVar[EventKind] = EventKind.SEND_DONE
    event_id: str = ""
    answer: str | None = None
    turn_error: str | None = None


class SendRefused(EventBody, frozen=True):
    """The target could not take send ``event_id`` (draining, queue full, ...)."""

    KIND: ClassVar[EventKind] = EventKind.SEND_REFUSED
    event_id: str = ""
    error: IpcError = msgspec.field(default_factory=lambda: IpcError("send refused"))


class SendFailed(EventBody, frozen=True):
    """A send of the agent's instance ``instance_key`` was lost, and why."""

    KIND: ClassVar[EventKind] = EventKind.SEND_FAILED
    event_id: str = ""
    target: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    error: IpcError = msgspec.field(default_factory=lambda: IpcError("send lost"))


class Cancel(EventBody, frozen=True):
    """Stop every Turn of trace ``trace_id``, running or queued, at its next safe point: before
    a model call (one in flight is abandoned) and before each tool call (one running finishes)."""

    KIND: ClassVar[EventKind] = EventKind.CANCEL
    trace_id: str = ""
    reason: str = "cancelled by an operator"


class LeaderChanged(EventBody, frozen=True):
    """A cluster's new leader took this agent process over. Every answer the agent still waits
    for (a delegate's, a permit's, any question's) was owed by the previous leader, which is
    gone and whose routes died with it: the agent answers each ``LEADER_LOST`` now instead of
    letting it wait out its timeout."""

    KIND: ClassVar[EventKind] = EventKind.LEADER_CHANGED
    leader: str = ""
    """Who leads now (its host and pid), for the agent's log."""


class ModelUsage(EventBody, frozen=True):
    """One model call ended (or was given up): what it used, and its permit, if it had one,
    back to the pool. Sent after every model call of an agent that asks permits, so the
    Orchestrator holds traces to their budgets as calls end (the calls of other agents are
    counted from their ``step.completed`` events)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_USAGE
    trace_id: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    permit_id: str = ""
    """The correlation id of the permit's request; empty for a call that needed none."""
    pool: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: NotNegative = 0.0
    retry_after_ms: int | None = None
    """Set when the provider answered 429: pause the pool this long."""


class ConnectorEventReport(EventBody, frozen=True):
    """An event a connector emitted, normalised: its text is the Turn's input."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_EVENT
    event_id: str = ""
    name: str = ""
    text: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    properties: dict[str, str] = {}  # noqa: RUF012  # a msgspec struct: each instance gets its own copy


class ConnectorEventSettled(EventBody, frozen=True):
    """The event ``event_id`` is done with: its Turn ended (``error`` is ``None`` when it
    answered) or it was not delivered."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_EVENT_SETTLED
    event_id: str = ""
    error: str | None = None
    answer: str | None = None
    """The answer of the Turn the event started, when it ended with one."""
    turn_error: str | None = None
    """Why that Turn failed (``"<code>: <message>"``), when it did."""


class ConnectorHealth(EventBody, frozen=True):
    """A connector's source failed (``error``: a short message, no secret in it) or works
    again (``error`` is ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_HEALTH
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The source works."""
        return self.error is None


_NOTICE_BODIES: tuple[type[EventBody], ...] = (
    Ready,
    BootFailed,
    StatusChanged,
    TurnCompleted,
    ShutdownAck,
    RuntimeEventReport,
    TextDelta,
    RestartRequest,
    Send,
    SendStarted,
    SendDone,
    SendRefused,
    SendFailed,
    Cancel,
    LeaderChanged,
    ModelUsage,
    ConnectorEventReport,
    ConnectorEventSettled,
    ConnectorHealth,
)
EVENT_BODIES: Mapping[EventKind, type[EventBody]] = {
    body.KIND: body for body in (*_NOTICE_BODIES, *QUESTION_BODIES)
}
"""The body class of every event kind."""
_BODIES_BY_NAME = {kind.value: body for kind, body in EVENT_BODIES.items()}


def read_event(message: EventMessage) -> EventBody:
    """The typed body of ``message``; raises :class:`~ipc.protocol.UnknownEvent` or
    :class:`~ipc.protocol.MalformedPayload`."""
    payload = message.payload
    if not isinstance(payload, dict):
        raise MalformedPayload(
            f"the payload of an event must be an object, got {type(payload).__name__}"
        )
    kind = payload.get("kind")
    body = _BODIES_BY_NAME.get(kind) if isinstance(kind, str) else None
    if body is None:
        raise UnknownEvent(f"unknown event kind {kind!r}", details={"kind": kind})
    return body.from_wire(payload, kind)  # type: ignore[arg-type]  # a str: checked above
