"""The protocol between the Orchestrator and its AgentProcesses: every kind, every payload, typed.

Both sides build and read messages only through this module. A message is an
:class:`~ipc.messages.IpcMessage` envelope ``{type, from, to, payload, correlationId?}``; its
payload is built with a ``to_wire`` below and read with the matching ``from_wire``, which refuses
a payload of the wrong shape with :class:`MalformedPayload` (``IPC_MALFORMED_PAYLOAD``) naming the
field. Decoding is hand-written: it runs for every frame, and a validation library would cost
about as much again as the msgpack codec.

Message types:

``delegate``         agent or Orchestrator → agent: run a Turn and answer. Payload :class:`Handoff`.
``delegate_result``  the one answer to a ``delegate``, same ``correlationId``. Payload
                     :class:`DelegateAnswer`.
``shutdown``         Orchestrator → agent: finish the running Turns and exit. Payload
                     :class:`ShutdownRequest`.
``event``            everything else; ``payload.kind`` is one of the kinds below.

Event kinds (agent → Orchestrator):

``ready``                    :class:`Ready`: booted, serving.
``boot_failed``              :class:`BootFailed`: cannot boot; the process exits with
                             :data:`EXIT_BOOT_FAILURE`.
``status``                   :class:`StatusChanged`: ``idle`` or ``processing``.
``turn_completed``           :class:`TurnCompleted`: a Turn ended (a successful one resets the
                             crash count).
``shutdown_ack``             :class:`ShutdownAck`: the drain is over.
``runtime_event``            :class:`RuntimeEventReport`: one line for the runtime event log.
``text_delta``               :class:`TextDelta`: a piece of model text of a Turn whose caller
                             streams (:attr:`Handoff.stream_id`), sent as the model produces it.
``restart_request``          :class:`RestartRequest`: a tool asked for this agent's restart.
``send``                     :class:`Send`: fire-and-forget input for another agent.
``send_started``             :class:`SendStarted`: the Turn of a delivered send started.
``send_done``                :class:`SendDone`: the Turn of a delivered send ended.
``send_refused``             :class:`SendRefused`: the target could not take a send.
``spawn_request``            :class:`SpawnRequest` (``agents__spawn``), answered ``spawn_result``.
``list_request``             :class:`ListRequest` (``agents__list``), answered ``list_result``.
``config_check``             :class:`ConfigCheck` (``self-restart``): would the configuration on
                             disk load? Answered ``config_check_result``.
``prepare_instance_result``  :class:`PrepareInstanceResult`, the answer to ``prepare_instance``.
``delete_instance_result``   :class:`DeleteInstanceResult`, the answer to ``delete_instance``.
``restart_instance_result``  :class:`RestartInstanceResult`, the answer to ``restart_instance``.
``approval_decision_result`` :class:`ApprovalDecisionResult`, the answer to ``approval_decision``.
``model_permit``             :class:`ModelPermitRequest`: may a model call start now (shared rate
                             limits, trace budget)? Answered ``model_permit_result``.
``model_usage``              :class:`ModelUsage`: a model call ended; what it used, and its permit
                             back.

Event kinds (Orchestrator → agent):

``send``                     :class:`Send`: the delivery of a send, ``source`` filled in.
``send_failed``              :class:`SendFailed`: a send of this agent was lost.
``spawn_result``             :class:`SpawnResult`.
``list_result``              :class:`ListResult`.
``config_check_result``      :class:`ConfigCheckResult`: the errors of the configuration on disk.
``prepare_instance``         :class:`PrepareInstance`: create an instance unless it exists.
``delete_instance``          :class:`DeleteInstance`: delete an idle instance.
``restart_instance``         :class:`RestartInstance`: reload an instance from disk, its running
                             Turn stopped.
``approval_decision``        :class:`ApprovalDecision`: an operator approves or rejects a tool
                             call parked for approval.
``cancel``                   :class:`Cancel`: stop the Turns of a trace at their next safe point.
``model_permit_result``      :class:`ModelPermitResult`: the permit, or why there is none.

A Connection's process (its connector) speaks a subset.

Event kinds (connector → Orchestrator):

``ready``                    :class:`Ready`: the connector runs.
``boot_failed``              :class:`BootFailed`: it cannot start (a missing secret, a module
                             without ``run``); the process exits with :data:`EXIT_BOOT_FAILURE`.
``connector_event``          :class:`ConnectorEventReport`: an event for the ingress rules.
``connector_health``         :class:`ConnectorHealth`: its source failed (a poll answered 500,
                             the network down, a crash on the way out) or works again.

Event kinds (Orchestrator → connector):

``connector_event_settled``  :class:`ConnectorEventSettled`: the Turn of an event ended, or the
                             event could not be delivered (frees its place in flight).

``from``/``to`` are agent (or Connection) names, or :data:`ORCHESTRATOR`. A payload may be any JSON value on the
wire; every kind here carries an object. Errors cross as ``{code, message, details?}``
(:class:`~ipc.messages.IpcError`).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar

from goondan.defaults import DEFAULT_INSTANCE_KEY as DEFAULT_INSTANCE_KEY  # part of the wire
from ipc.messages import (
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    IpcError,
    ShutdownMessage,
)

ORCHESTRATOR = "orchestrator"
"""The ``from``/``to`` name of the Orchestrator itself."""
CONNECTION_SENDER_PREFIX = "connection:"
"""``from`` of the sends a Connection's events become (``connection:<name>``), never an agent's
name (agent names have no colon)."""
EXTERNAL_CALLER = "user"
"""The caller name of requests from outside the swarm (CLI, HTTP API)."""

EXIT_BOOT_FAILURE = 78
"""An AgentProcess that cannot boot exits with this code (``EX_CONFIG``); the supervisor backs off
at once, since restarting cannot fix a broken configuration."""
EXIT_BROKEN_FDS = 71
"""An AgentProcess whose stdin, stdout or stderr a tool closed or replaced exits with this code
(``EX_OSERR``) to be restarted clean."""
EXIT_MEMORY_LIMIT = 72
"""An AgentProcess that ran out of its ``limits.memoryMiB`` outside a tool exits with this code."""
EXIT_NODE_LOST = 69
"""Not an AgentProcess's own code: the exit the cluster leader records for an agent whose node
stopped answering (``EX_UNAVAILABLE``). Callers it owed get ``AGENT_CRASHED`` as for any crash."""
EXIT_REASONS = {
    EXIT_BOOT_FAILURE: "cannot boot",
    EXIT_NODE_LOST: "its cluster node was lost",
    EXIT_BROKEN_FDS: "a tool broke stdin, stdout or stderr",
    EXIT_MEMORY_LIMIT: "memory limit reached",
}
"""What the exit codes AgentProcesses reserve mean (shown in ``status`` as the last exit)."""

MALFORMED_PAYLOAD = "IPC_MALFORMED_PAYLOAD"


class MalformedPayload(IpcError):
    """A payload that is not the object its message or event kind needs."""

    code = MALFORMED_PAYLOAD


class EventKind(enum.StrEnum):
    """Every ``payload.kind`` of an ``event`` (see the module docstring for direction and body)."""

    READY = "ready"
    BOOT_FAILED = "boot_failed"
    STATUS = "status"
    TURN_COMPLETED = "turn_completed"
    SHUTDOWN_ACK = "shutdown_ack"
    RUNTIME_EVENT = "runtime_event"
    TEXT_DELTA = "text_delta"
    RESTART_REQUEST = "restart_request"
    SEND = "send"
    SEND_STARTED = "send_started"
    SEND_DONE = "send_done"
    SEND_REFUSED = "send_refused"
    SEND_FAILED = "send_failed"
    SPAWN_REQUEST = "spawn_request"
    SPAWN_RESULT = "spawn_result"
    LIST_REQUEST = "list_request"
    LIST_RESULT = "list_result"
    CONFIG_CHECK = "config_check"
    CONFIG_CHECK_RESULT = "config_check_result"
    PREPARE_INSTANCE = "prepare_instance"
    PREPARE_INSTANCE_RESULT = "prepare_instance_result"
    DELETE_INSTANCE = "delete_instance"
    DELETE_INSTANCE_RESULT = "delete_instance_result"
    RESTART_INSTANCE = "restart_instance"
    RESTART_INSTANCE_RESULT = "restart_instance_result"
    APPROVAL_DECISION = "approval_decision"
    APPROVAL_DECISION_RESULT = "approval_decision_result"
    CANCEL = "cancel"
    MODEL_PERMIT = "model_permit"
    MODEL_PERMIT_RESULT = "model_permit_result"
    MODEL_USAGE = "model_usage"
    CONNECTOR_EVENT = "connector_event"
    CONNECTOR_EVENT_SETTLED = "connector_event_settled"
    CONNECTOR_HEALTH = "connector_health"


# -- ids and call chains ---------------------------------------------------------------------


def new_correlation_id() -> str:
    """The id pairing a ``delegate`` (or a question) with its one answer."""
    return f"corr_{secrets.token_hex(12)}"


def new_event_id() -> str:
    """The id of one request or send, as the caller's tool result reports it."""
    return f"agent_event_{secrets.token_hex(8)}"


def new_trace_id() -> str:
    """A 32-hex trace id (W3C trace-context size), for input that starts a causal chain."""
    return secrets.token_hex(16)


def call_node(agent: str, instance_key: str) -> str:
    """One node of a call chain: the conversation ``agent@instanceKey``."""
    return f"{agent}@{instance_key}"


# -- reading payloads --------------------------------------------------------------------------


class _Fields:
    """Typed reads of one payload object; a wrong type raises :class:`MalformedPayload`."""

    __slots__ = ("data", "what")

    def __init__(self, data: Any, what: str) -> None:
        if not isinstance(data, dict):
            raise MalformedPayload(
                f"the payload of {what} must be an object, got {type(data).__name__}"
            )
        self.data: dict[str, Any] = data
        self.what = what

    def _wrong(self, name: str, expected: str, value: Any) -> MalformedPayload:
        return MalformedPayload(
            f"{self.what}.{name} must be {expected}, got {type(value).__name__}",
            details={"field": name},
        )

    def text(self, name: str, default: str = "") -> str:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def instance_key(self, name: str) -> str:
        return self.text(name) or DEFAULT_INSTANCE_KEY

    def flag(self, name: str) -> bool:
        value = self.data.get(name, False)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def integer(self, name: str) -> int | None:
        value = self.data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(name, "a number", value)
        return int(value)

    def amount(self, name: str) -> float:
        """A number not below 0 (a cost); absent: 0."""
        value = self.data.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self._wrong(name, "a number not below 0", value)
        return float(value)

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(name, "a list of strings", value)
        return tuple(value)

    def mapping(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._wrong(name, "an object", value)
        return value

    def rows(self, name: str) -> list[dict[str, Any]]:
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self._wrong(name, "a list of objects", value)
        return value

    def error(self, name: str = "error") -> IpcError | None:
        value = self.data.get(name)
        return None if value is None else IpcError.from_dict(value)


def _without_none(wire: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in wire.items() if value is not None}


# -- message payloads ---------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Handoff:
    """Input for another agent's Turn: the payload of a ``delegate`` and the body of a ``send``.

    Treat it as immutable (derive a changed one with ``dataclasses.replace``); it is not frozen
    only because a frozen dataclass costs a microsecond more to build, on every request.
    """

    target: str
    """The agent that runs the Turn."""
    input: str
    """The text of the Turn's user message."""
    instance_key: str = DEFAULT_INSTANCE_KEY
    """The target's conversation instance."""
    caller_instance_key: str = DEFAULT_INSTANCE_KEY
    """The caller's own instance (where an async answer or a send failure is reported)."""
    trace_id: str = ""
    """Kept from the caller across every handoff; empty for input that starts a chain."""
    parent_span_id: str | None = None
    """The caller's tool span."""
    call_chain: tuple[str, ...] = ()
    """Conversations (:func:`call_node`) already waiting on this Turn, outermost first."""
    event_type: str = "agent.request"
    metadata: dict[str, Any] = field(default_factory=dict)
    event_id: str = ""
    """The caller's id of this request or send (a send is tracked under it until done)."""
    timeout_ms: int | None = None
    """A ``delegate``'s timeout; ``None`` (or not positive) means the swarm's default."""
    background: bool = False
    """A ``delegate`` whose caller does not block on it (``agents__request`` with ``async``)."""
    source: str = ""
    """Who sent a ``send`` (the Orchestrator fills it in on delivery)."""
    stream_id: str = ""
    """Set when the caller streams: the Turn sends its model text as :class:`TextDelta` events
    tagged with this id as it is produced. Empty (the default) costs nothing."""
    relay: bool = False
    """With ``stream_id``: the Turn's own requests to other agents carry the same stream, so
    their text reaches the original caller too (marked with the agent that produced it)."""

    @property
    def node(self) -> str:
        """The conversation that runs the Turn, as a call-chain node."""
        return call_node(self.target, self.instance_key)

    def to_wire(self) -> dict[str, Any]:
        """The payload object."""
        return _without_none(
            {
                "target": self.target,
                "input": self.input,
                "instanceKey": self.instance_key,
                "callerInstanceKey": self.caller_instance_key,
                "traceId": self.trace_id or None,
                "parentSpanId": self.parent_span_id,
                "callChain": list(self.call_chain),
                "eventType": self.event_type,
                "metadata": self.metadata,
                "eventId": self.event_id or None,
                "timeoutMs": self.timeout_ms,
                "async": self.background or None,
                "source": self.source or None,
                "streamId": self.stream_id or None,
                "relay": self.relay or None,
            }
        )

    @classmethod
    def from_wire(cls, data: Any, what: str = "delegate") -> Handoff:
        """Read a payload; raises :class:`MalformedPayload`."""
        # The hot path of every request: plain reads and one combined type check; only a
        # payload that fails it goes through the field-by-field reader for a precise error.
        if isinstance(data, dict):
            get = data.get
            target, text, chain = get("target"), get("input"), get("callChain")
            instance_key, caller_key = get("instanceKey"), get("callerInstanceKey")
            trace_id, parent_span, event_id = get("traceId"), get("parentSpanId"), get("eventId")
            event_type, metadata, source = get("eventType"), get("metadata"), get("source")
            timeout, background = get("timeoutMs"), get("async", False)
            stream_id, relay = get("streamId"), get("relay", False)
            if (
                (target is None or type(target) is str)
                and (text is None or type(text) is str)
                and (instance_key is None or type(instance_key) is str)
                and (caller_key is None or type(caller_key) is str)
                and (trace_id is None or type(trace_id) is str)
                and (parent_span is None or type(parent_span) is str)
                and (chain is None or (type(chain) is list and all(type(n) is str for n in chain)))
                and (event_type is None or type(event_type) is str)
                and (metadata is None or type(metadata) is dict)
                and (event_id is None or type(event_id) is str)
                and (timeout is None or type(timeout) is int)
                and type(background) is bool
                and (source is None or type(source) is str)
                and (stream_id is None or type(stream_id) is str)
                and type(relay) is bool
            ):
                return cls(
                    target=target or "",
                    input=text or "",
                    instance_key=instance_key or DEFAULT_INSTANCE_KEY,
                    caller_instance_key=caller_key or DEFAULT_INSTANCE_KEY,
                    trace_id=trace_id or "",
                    parent_span_id=parent_span or None,
                    call_chain=tuple(chain) if chain else (),
                    event_type=event_type or "agent.request",
                    metadata=metadata if metadata is not None else {},
                    event_id=event_id or "",
                    timeout_ms=timeout,
                    background=background,
                    source=source or "",
                    stream_id=stream_id or "",
                    relay=relay,
                )
        return cls._read(_Fields(data, what))

    @classmethod
    def _read(cls, read: _Fields) -> Handoff:
        return cls(
            target=read.text("target"),
            input=read.text("input"),
            instance_key=read.instance_key("instanceKey"),
            caller_instance_key=read.instance_key("callerInstanceKey"),
            trace_id=read.text("traceId"),
            parent_span_id=read.optional_text("parentSpanId"),
            call_chain=read.texts("callChain"),
            event_type=read.text("eventType") or "agent.request",
            metadata=read.mapping("metadata"),
            event_id=read.text("eventId"),
            timeout_ms=read.integer("timeoutMs"),
            background=read.flag("async"),
            source=read.text("source"),
            stream_id=read.text("streamId"),
            relay=read.flag("relay"),
        )


@dataclass(frozen=True, slots=True)
class DelegateAnswer:
    """The payload of a ``delegate_result``: the Turn's answer, or why there is none."""

    status: Literal["ok", "error"]
    output: Any = None
    """The answer text (for a failed Turn, the last text it produced, if any)."""
    turn: dict[str, Any] | None = None
    """The Turn's summary (ids, steps, duration, token usage), when a Turn ran."""
    error: IpcError | None = None

    @property
    def ok(self) -> bool:
        """The Turn answered."""
        return self.status == "ok"

    @classmethod
    def failure(cls, error: IpcError) -> DelegateAnswer:
        """An answer that is only an error."""
        return cls("error", error=error)

    def to_wire(self) -> dict[str, Any]:
        """The payload object."""
        wire: dict[str, Any] = {"status": self.status}
        if self.output is not None:
            wire["output"] = self.output
        if self.turn is not None:
            wire["turn"] = self.turn
        if self.error is not None:
            wire["error"] = self.error.to_dict()
        return wire

    @classmethod
    def of(cls, message: DelegateResultMessage) -> DelegateAnswer:
        """The answer ``message`` carries; a malformed one is the error it is (never raises)."""
        try:
            return cls.from_wire(message.payload)
        except IpcError as exc:
            return cls.failure(exc)

    @classmethod
    def from_wire(cls, data: Any) -> DelegateAnswer:
        """Read a payload; raises :class:`MalformedPayload`."""
        read = _Fields(data, "delegate_result")
        status = read.data.get("status")
        if status not in ("ok", "error"):
            raise MalformedPayload(f"delegate_result.status must be ok or error, got {status!r}")
        turn = read.data.get("turn")
        return cls(
            status,
            output=read.data.get("output"),
            turn=turn if isinstance(turn, dict) else None,
            error=read.error() if status == "error" else None,
        )


ShutdownReason: TypeAlias = str
"""``restart``, ``config_change``, ``orchestrator_shutdown`` (from the Orchestrator), or the
agent's own ``sigterm`` and ``broken_fds``."""


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """The payload of a ``shutdown``: drain within ``grace_ms``, acknowledge, exit."""

    grace_ms: int
    reason: ShutdownReason

    @property
    def grace_seconds(self) -> float:
        """The grace period in seconds."""
        return self.grace_ms / 1000

    def to_wire(self) -> dict[str, Any]:
        """The payload object."""
        return {"gracePeriodMs": self.grace_ms, "reason": self.reason}

    @classmethod
    def from_wire(cls, data: Any, default_grace_ms: int) -> ShutdownRequest:
        """Read a payload; raises :class:`MalformedPayload`."""
        read = _Fields(data, "shutdown")
        grace = read.integer("gracePeriodMs")
        return cls(default_grace_ms if grace is None else max(grace, 0), read.text("reason"))


# -- event bodies ----------------------------------------------------------------------------------


class EventBody:
    """The payload of one event kind (``payload = {"kind": KIND, **to_wire()}``)."""

    __slots__ = ()
    KIND: ClassVar[EventKind]

    def to_wire(self) -> dict[str, Any]:
        """The payload's fields, without ``kind``."""
        raise NotImplementedError

    @classmethod
    def read(cls, fields: _Fields) -> EventBody:
        """The body from a payload (``kind`` checked already)."""
        raise NotImplementedError


_BODIES: dict[EventKind, type[EventBody]] = {}
_BodyT = TypeVar("_BodyT", bound=type[EventBody])


_BODIES_BY_NAME: dict[str, type[EventBody]] = {}


def _body(cls: _BodyT) -> _BodyT:
    _BODIES[cls.KIND] = cls
    _BODIES_BY_NAME[cls.KIND.value] = cls
    return cls


@_body
@dataclass(frozen=True, slots=True)
class Ready(EventBody):
    """The agent booted and serves; ``scope`` is its process scope token (``ipc.scope``)."""

    KIND: ClassVar[EventKind] = EventKind.READY
    pid: int
    scope: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"pid": self.pid, "scope": self.scope}

    @classmethod
    def read(cls, fields: _Fields) -> Ready:
        return cls(fields.integer("pid") or 0, fields.optional_text("scope"))


@_body
@dataclass(frozen=True, slots=True)
class BootFailed(EventBody):
    """The agent cannot boot, and why."""

    KIND: ClassVar[EventKind] = EventKind.BOOT_FAILED
    error: str

    def to_wire(self) -> dict[str, Any]:
        return {"error": self.error}

    @classmethod
    def read(cls, fields: _Fields) -> BootFailed:
        return cls(fields.text("error") or "boot failed")


@_body
@dataclass(frozen=True, slots=True)
class StatusChanged(EventBody):
    """The agent became busy (a Turn runs) or idle."""

    KIND: ClassVar[EventKind] = EventKind.STATUS
    status: Literal["idle", "processing"]

    def to_wire(self) -> dict[str, Any]:
        return {"status": self.status}

    @classmethod
    def read(cls, fields: _Fields) -> StatusChanged:
        status = fields.text("status", "idle")
        if status not in ("idle", "processing"):
            raise MalformedPayload(f"status.status must be idle or processing, got {status!r}")
        return cls(status)  # type: ignore[arg-type]  # narrowed by the check above


@_body
@dataclass(frozen=True, slots=True)
class TurnCompleted(EventBody):
    """A Turn of ``instance_key`` ended with ``status``."""

    KIND: ClassVar[EventKind] = EventKind.TURN_COMPLETED
    instance_key: str
    status: str

    @property
    def ok(self) -> bool:
        """The Turn succeeded."""
        return self.status == "ok"

    def to_wire(self) -> dict[str, Any]:
        return {"instanceKey": self.instance_key, "status": self.status}

    @classmethod
    def read(cls, fields: _Fields) -> TurnCompleted:
        return cls(fields.instance_key("instanceKey"), fields.text("status"))


@_body
@dataclass(frozen=True, slots=True)
class ShutdownAck(EventBody):
    """The drain is over; the process exits next."""

    KIND: ClassVar[EventKind] = EventKind.SHUTDOWN_ACK

    def to_wire(self) -> dict[str, Any]:
        return {}

    @classmethod
    def read(cls, fields: _Fields) -> ShutdownAck:
        return cls()


@_body
@dataclass(frozen=True, slots=True)
class RuntimeEventReport(EventBody):
    """One runtime event (``turn.started``, ``tool.completed``, ...) for the event log."""

    KIND: ClassVar[EventKind] = EventKind.RUNTIME_EVENT
    event: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"event": self.event}

    @classmethod
    def read(cls, fields: _Fields) -> RuntimeEventReport:
        return cls(fields.mapping("event"))


@_body
@dataclass(frozen=True, slots=True)
class TextDelta(EventBody):
    """A piece of the model text of a streamed Turn, in the order the model produced it.

    The agent that produced it is the message's sender; :attr:`stream_id` names the stream of
    the request that asked for it (a delegated Turn carries its caller's stream when relayed).
    """

    KIND: ClassVar[EventKind] = EventKind.TEXT_DELTA
    stream_id: str
    """:attr:`Handoff.stream_id` of the Turn."""
    text: str
    """The new text (never empty)."""
    trace_id: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    turn_id: str = ""
    step_id: str = ""
    """The Step whose model call produced it: text of two Steps is two answers in a row."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "streamId": self.stream_id,
            "text": self.text,
            "traceId": self.trace_id,
            "instanceKey": self.instance_key,
            "turnId": self.turn_id,
            "stepId": self.step_id,
        }

    @classmethod
    def read(cls, fields: _Fields) -> TextDelta:
        return cls(
            fields.text("streamId"),
            fields.text("text"),
            fields.text("traceId"),
            fields.instance_key("instanceKey"),
            fields.text("turnId"),
            fields.text("stepId"),
        )


@_body
@dataclass(frozen=True, slots=True)
class RestartRequest(EventBody):
    """A tool of the agent asked for the agent's restart."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_REQUEST
    reason: str

    def to_wire(self) -> dict[str, Any]:
        return {"reason": self.reason}

    @classmethod
    def read(cls, fields: _Fields) -> RestartRequest:
        return cls(fields.text("reason") or "tool:self-restart")


@_body
@dataclass(frozen=True, slots=True)
class Send(EventBody):
    """Fire-and-forget input: the sender does not wait for the Turn it starts."""

    KIND: ClassVar[EventKind] = EventKind.SEND
    handoff: Handoff

    def to_wire(self) -> dict[str, Any]:
        return self.handoff.to_wire()

    @classmethod
    def read(cls, fields: _Fields) -> Send:
        return cls(Handoff.from_wire(fields.data, "send"))


@_body
@dataclass(frozen=True, slots=True)
class SendStarted(EventBody):
    """The Turn of send ``event_id`` started: a crash from now on loses its effect midway."""

    KIND: ClassVar[EventKind] = EventKind.SEND_STARTED
    event_id: str

    def to_wire(self) -> dict[str, Any]:
        return {"eventId": self.event_id}

    @classmethod
    def read(cls, fields: _Fields) -> SendStarted:
        return cls(fields.text("eventId"))


@_body
@dataclass(frozen=True, slots=True)
class SendDone(EventBody):
    """The Turn of send ``event_id`` ended. For a send from a Connection it carries the
    Turn's ``answer`` text, or ``turn_error`` (``"<code>: <message>"``) when the Turn failed,
    so the connector can answer back where the event came from."""

    KIND: ClassVar[EventKind] = EventKind.SEND_DONE
    event_id: str
    answer: str | None = None
    turn_error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return _without_none(
            {"eventId": self.event_id, "answer": self.answer, "turnError": self.turn_error}
        )

    @classmethod
    def read(cls, fields: _Fields) -> SendDone:
        return cls(
            fields.text("eventId"),
            fields.optional_text("answer"),
            fields.optional_text("turnError"),
        )


@_body
@dataclass(frozen=True, slots=True)
class SendRefused(EventBody):
    """The target could not take send ``event_id`` (draining, queue full, ...)."""

    KIND: ClassVar[EventKind] = EventKind.SEND_REFUSED
    event_id: str
    error: IpcError

    def to_wire(self) -> dict[str, Any]:
        return {"eventId": self.event_id, "error": self.error.to_dict()}

    @classmethod
    def read(cls, fields: _Fields) -> SendRefused:
        return cls(fields.text("eventId"), fields.error() or IpcError("send refused"))


@_body
@dataclass(frozen=True, slots=True)
class SendFailed(EventBody):
    """A send of the agent's instance ``instance_key`` was lost, and why."""

    KIND: ClassVar[EventKind] = EventKind.SEND_FAILED
    event_id: str
    target: str
    instance_key: str
    error: IpcError

    def to_wire(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "target": self.target,
            "instanceKey": self.instance_key,
            "error": self.error.to_dict(),
        }

    @classmethod
    def read(cls, fields: _Fields) -> SendFailed:
        return cls(
            fields.text("eventId"),
            fields.text("target"),
            fields.instance_key("instanceKey"),
            fields.error() or IpcError("send lost"),
        )


@_body
@dataclass(frozen=True, slots=True)
class SpawnRequest(EventBody):
    """``agents__spawn``: prepare an instance of ``target`` (a generated key when ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_REQUEST
    target: str
    instance_key: str | None
    cwd: str | None
    owner_instance_key: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "instanceKey": self.instance_key,
            "cwd": self.cwd,
            "ownerInstanceKey": self.owner_instance_key,
        }

    @classmethod
    def read(cls, fields: _Fields) -> SpawnRequest:
        return cls(
            fields.text("target"),
            fields.optional_text("instanceKey"),
            fields.optional_text("cwd"),
            fields.instance_key("ownerInstanceKey"),
        )


@_body
@dataclass(frozen=True, slots=True)
class SpawnResult(EventBody):
    """The answer to a :class:`SpawnRequest`: the instance, or why not."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_RESULT
    target: str = ""
    instance_key: str = ""
    spawned: bool = False
    """Whether this request created the instance (``False`` for one that existed)."""
    cwd: str | None = None
    error: IpcError | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"status": "error", "error": self.error.to_dict()}
        return {
            "status": "ok",
            "target": self.target,
            "instanceKey": self.instance_key,
            "spawned": self.spawned,
            "cwd": self.cwd,
        }

    @classmethod
    def read(cls, fields: _Fields) -> SpawnResult:
        if fields.data.get("status") == "error":
            return cls(error=fields.error() or IpcError("spawn failed"))
        return cls(
            fields.text("target"),
            fields.text("instanceKey"),
            fields.flag("spawned"),
            fields.optional_text("cwd"),
        )


@_body
@dataclass(frozen=True, slots=True)
class ListRequest(EventBody):
    """``agents__list``: the instances spawned by the caller's instance (or by anyone)."""

    KIND: ClassVar[EventKind] = EventKind.LIST_REQUEST
    owner_instance_key: str
    include_all: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"ownerInstanceKey": self.owner_instance_key, "includeAll": self.include_all}

    @classmethod
    def read(cls, fields: _Fields) -> ListRequest:
        return cls(fields.instance_key("ownerInstanceKey"), fields.flag("includeAll"))


@_body
@dataclass(frozen=True, slots=True)
class ListResult(EventBody):
    """The answer to a :class:`ListRequest`: one row per spawned instance."""

    KIND: ClassVar[EventKind] = EventKind.LIST_RESULT
    agents: list[dict[str, Any]]

    def to_wire(self) -> dict[str, Any]:
        return {"status": "ok", "agents": self.agents}

    @classmethod
    def read(cls, fields: _Fields) -> ListResult:
        return cls(fields.rows("agents"))


@_body
@dataclass(frozen=True, slots=True)
class ConfigCheck(EventBody):
    """``self-restart``: would the configuration on disk load? (It is not adopted yet.)"""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK

    def to_wire(self) -> dict[str, Any]:
        return {}

    @classmethod
    def read(cls, fields: _Fields) -> ConfigCheck:
        return cls()


@_body
@dataclass(frozen=True, slots=True)
class ConfigCheckResult(EventBody):
    """The answer to a :class:`ConfigCheck`: every error found (none: it loads)."""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK_RESULT
    errors: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"errors": list(self.errors)}

    @classmethod
    def read(cls, fields: _Fields) -> ConfigCheckResult:
        return cls(fields.texts("errors"))


@_body
@dataclass(frozen=True, slots=True)
class PrepareInstance(EventBody):
    """Create instance ``instance_key`` (in ``cwd`` if given) unless it exists, for a spawn by
    ``owner``'s instance ``owner_instance_key``."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE
    instance_key: str
    cwd: str | None
    owner: str
    owner_instance_key: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "instanceKey": self.instance_key,
            "cwd": self.cwd,
            "owner": self.owner,
            "ownerInstanceKey": self.owner_instance_key,
        }

    @classmethod
    def read(cls, fields: _Fields) -> PrepareInstance:
        return cls(
            fields.instance_key("instanceKey"),
            fields.optional_text("cwd"),
            fields.text("owner"),
            fields.instance_key("ownerInstanceKey"),
        )


@_body
@dataclass(frozen=True, slots=True)
class PrepareInstanceResult(EventBody):
    """The answer to :class:`PrepareInstance`: the instance and whether it was created now."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE_RESULT
    instance_key: str = ""
    created: bool = False
    cwd: str | None = None
    error: IpcError | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"ok": False, "error": self.error.to_dict()}
        return {
            "ok": True,
            "created": self.created,
            "instanceKey": self.instance_key,
            "cwd": self.cwd,
        }

    @classmethod
    def read(cls, fields: _Fields) -> PrepareInstanceResult:
        if not fields.flag("ok"):
            return cls(error=fields.error() or IpcError("instance not prepared"))
        return cls(fields.text("instanceKey"), fields.flag("created"), fields.optional_text("cwd"))


@_body
@dataclass(frozen=True, slots=True)
class DeleteInstance(EventBody):
    """Delete instance ``instance_key`` unless a Turn of it is queued or running."""

    KIND: ClassVar[EventKind] = EventKind.DELETE_INSTANCE
    instance_key: str

    def to_wire(self) -> dict[str, Any]:
        return {"instanceKey": self.instance_key}

    @classmethod
    def read(cls, fields: _Fields) -> DeleteInstance:
        return cls(fields.instance_key("instanceKey"))


@_body
@dataclass(frozen=True, slots=True)
class Cancel(EventBody):
    """Stop every Turn of trace ``trace_id``, running or queued, at its next safe point: before
    a model call (one in flight is abandoned) and before each tool call (one running finishes)."""

    KIND: ClassVar[EventKind] = EventKind.CANCEL
    trace_id: str
    reason: str = "cancelled by an operator"

    def to_wire(self) -> dict[str, Any]:
        return {"traceId": self.trace_id, "reason": self.reason}

    @classmethod
    def read(cls, fields: _Fields) -> Cancel:
        return cls(fields.text("traceId"), fields.text("reason") or "cancelled by an operator")


@_body
@dataclass(frozen=True, slots=True)
class ConnectorEventReport(EventBody):
    """An event a connector emitted, normalised: its text is the Turn's input."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_EVENT
    event_id: str
    name: str
    text: str
    instance_key: str
    properties: dict[str, str] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "name": self.name,
            "text": self.text,
            "instanceKey": self.instance_key,
            "properties": self.properties,
        }

    @classmethod
    def read(cls, fields: _Fields) -> ConnectorEventReport:
        properties = fields.mapping("properties")
        if not all(isinstance(v, str) for v in properties.values()):
            raise fields._wrong("properties", "an object of strings", properties)
        return cls(
            fields.text("eventId"),
            fields.text("name"),
            fields.text("text"),
            fields.instance_key("instanceKey"),
            dict(properties),
        )


@_body
@dataclass(frozen=True, slots=True)
class ConnectorEventSettled(EventBody):
    """The event ``event_id`` is done with: its Turn ended (``error`` is ``None`` when it
    answered) or it was not delivered."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_EVENT_SETTLED
    event_id: str
    error: str | None = None
    answer: str | None = None
    """The answer of the Turn the event started, when it ended with one."""
    turn_error: str | None = None
    """Why that Turn failed (``"<code>: <message>"``), when it did."""

    def to_wire(self) -> dict[str, Any]:
        return _without_none(
            {
                "eventId": self.event_id,
                "error": self.error,
                "answer": self.answer,
                "turnError": self.turn_error,
            }
        )

    @classmethod
    def read(cls, fields: _Fields) -> ConnectorEventSettled:
        return cls(
            fields.text("eventId"),
            fields.optional_text("error"),
            fields.optional_text("answer"),
            fields.optional_text("turnError"),
        )


@_body
@dataclass(frozen=True, slots=True)
class ConnectorHealth(EventBody):
    """A connector's source failed (``error``: a short message, no secret in it) or works
    again (``error`` is ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_HEALTH
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The source works."""
        return self.error is None

    def to_wire(self) -> dict[str, Any]:
        return _without_none({"error": self.error})

    @classmethod
    def read(cls, fields: _Fields) -> ConnectorHealth:
        return cls(fields.optional_text("error"))


@_body
@dataclass(frozen=True, slots=True)
class DeleteInstanceResult(EventBody):
    """The answer to :class:`DeleteInstance`: whether files were deleted, or why not."""

    KIND: ClassVar[EventKind] = EventKind.DELETE_INSTANCE_RESULT
    ok: bool
    deleted: bool = False
    error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "error": self.error or "not deleted"}
        return {"ok": True, "deleted": self.deleted}

    @classmethod
    def read(cls, fields: _Fields) -> DeleteInstanceResult:
        return cls(fields.flag("ok"), fields.flag("deleted"), fields.optional_text("error"))


@_body
@dataclass(frozen=True, slots=True)
class RestartInstance(EventBody):
    """Restart instance ``instance_key``: its running Turn ends now (its caller is answered
    ``CANCELLED``), what the agent holds of it is dropped and read again from disk, and its
    queued Turns then run on the conversation as stored."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_INSTANCE
    instance_key: str

    def to_wire(self) -> dict[str, Any]:
        return {"instanceKey": self.instance_key}

    @classmethod
    def read(cls, fields: _Fields) -> RestartInstance:
        return cls(fields.instance_key("instanceKey"))


@_body
@dataclass(frozen=True, slots=True)
class RestartInstanceResult(EventBody):
    """The answer to :class:`RestartInstance`: whether the instance was loaded (else there was
    nothing to restart) and how many running Turns were stopped, or why it failed."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_INSTANCE_RESULT
    ok: bool
    loaded: bool = False
    stopped_turns: int = 0
    error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "error": self.error or "not restarted"}
        return {"ok": True, "loaded": self.loaded, "stoppedTurns": self.stopped_turns}

    @classmethod
    def read(cls, fields: _Fields) -> RestartInstanceResult:
        return cls(
            fields.flag("ok"),
            fields.flag("loaded"),
            max(fields.integer("stoppedTurns") or 0, 0),
            fields.optional_text("error"),
        )


APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
"""An :class:`ApprovalDecision` names no approval of the agent (HTTP 404)."""
APPROVAL_ALREADY_DECIDED = "APPROVAL_ALREADY_DECIDED"
"""The approval was decided already, or expired (HTTP 409)."""
APPROVAL_INVALID_ARGUMENTS = "APPROVAL_INVALID_ARGUMENTS"
"""The edited arguments of an approval fail the tool's JSON Schema (HTTP 400)."""


@_body
@dataclass(frozen=True, slots=True)
class ApprovalDecision(EventBody):
    """An operator's decision on approval ``approval_id``: ``approve`` (with ``arguments`` in
    place of the model's, if given) or ``reject`` (with ``reason`` for the model), made by
    ``decided_by`` (who the daemon found at the other end of the API: recorded with it)."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_DECISION
    approval_id: str
    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    reason: str = ""
    decided_by: dict[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        return _without_none(
            {
                "approvalId": self.approval_id,
                "decision": self.decision,
                "arguments": self.arguments,
                "reason": self.reason or None,
                "decidedBy": self.decided_by,
            }
        )

    @classmethod
    def read(cls, fields: _Fields) -> ApprovalDecision:
        decision = fields.text("decision")
        if decision not in ("approve", "reject"):
            raise MalformedPayload(
                f"approval_decision.decision must be approve or reject, got {decision!r}"
            )
        arguments = fields.data.get("arguments")
        decided_by = fields.data.get("decidedBy")
        return cls(
            fields.text("approvalId"),
            decision,  # type: ignore[arg-type]  # narrowed by the check above
            fields.mapping("arguments") if arguments is not None else None,
            fields.text("reason"),
            fields.mapping("decidedBy") if decided_by is not None else None,
        )


@_body
@dataclass(frozen=True, slots=True)
class ApprovalDecisionResult(EventBody):
    """The answer to :class:`ApprovalDecision`: the approval as it now stands, or why the
    decision was refused (``error.code`` is one of the ``APPROVAL_*`` codes above)."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_DECISION_RESULT
    approval: dict[str, Any] | None = None
    error: IpcError | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"ok": False, "error": self.error.to_dict()}
        return {"ok": True, "approval": self.approval or {}}

    @classmethod
    def read(cls, fields: _Fields) -> ApprovalDecisionResult:
        if not fields.flag("ok"):
            return cls(error=fields.error() or IpcError("decision refused"))
        return cls(fields.mapping("approval"))


@_body
@dataclass(frozen=True, slots=True)
class ModelPermitRequest(EventBody):
    """Ask for a permit to start one model call (sent with a correlation id, which is the
    permit's id from then on)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_PERMIT
    pool: str
    """The Model's rate-limit pool; empty when only a trace budget needs checking."""
    trace_id: str
    instance_key: str = DEFAULT_INSTANCE_KEY
    estimated_tokens: int = 0
    """The call's input tokens as estimated before it (``tokensPerMinute`` admits on it)."""
    wait_ms: int = 0
    """How long the caller waits at most (the model call's timeout); 0: no wait at all."""
    max_output_tokens: int = 0
    """The most output the call may take (its ``maxTokens``, or the default reserve)."""
    reserved_cost: float = 0.0
    """The price of ``estimated_tokens`` in and ``max_output_tokens`` out. The three are what
    the call reserves against its trace's budget until its ``model_usage`` settles it."""

    def to_wire(self) -> dict[str, Any]:
        return _without_none(
            {
                "pool": self.pool,
                "traceId": self.trace_id,
                "instanceKey": self.instance_key,
                "estimatedTokens": self.estimated_tokens,
                "waitMs": self.wait_ms,
                "maxOutputTokens": self.max_output_tokens or None,
                "reservedCost": self.reserved_cost or None,
            }
        )

    @classmethod
    def read(cls, fields: _Fields) -> ModelPermitRequest:
        return cls(
            fields.text("pool"),
            fields.text("traceId"),
            fields.instance_key("instanceKey"),
            max(fields.integer("estimatedTokens") or 0, 0),
            max(fields.integer("waitMs") or 0, 0),
            max(fields.integer("maxOutputTokens") or 0, 0),
            fields.amount("reservedCost"),
        )


@_body
@dataclass(frozen=True, slots=True)
class ModelPermitResult(EventBody):
    """The answer to :class:`ModelPermitRequest`: granted after ``waited_ms``, or refused with
    ``error`` (``E_BUDGET_EXCEEDED``, ``E_MODEL_PERMIT_TIMEOUT``)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_PERMIT_RESULT
    waited_ms: int = 0
    error: IpcError | None = None

    @property
    def granted(self) -> bool:
        """The call may start."""
        return self.error is None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"granted": False, "waitedMs": self.waited_ms, "error": self.error.to_dict()}
        return {"granted": True, "waitedMs": self.waited_ms}

    @classmethod
    def read(cls, fields: _Fields) -> ModelPermitResult:
        waited = max(fields.integer("waitedMs") or 0, 0)
        if fields.flag("granted"):
            return cls(waited)
        return cls(waited, fields.error() or IpcError("permit refused"))


@_body
@dataclass(frozen=True, slots=True)
class ModelUsage(EventBody):
    """One model call ended (or was given up): what it used, and its permit, if it had one,
    back to the pool. Sent after every model call of an agent that asks permits, so the
    Orchestrator holds traces to their budgets as calls end (the calls of other agents are
    counted from their ``step.completed`` events)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_USAGE
    trace_id: str
    instance_key: str = DEFAULT_INSTANCE_KEY
    permit_id: str = ""
    """The correlation id of the permit's request; empty for a call that needed none."""
    pool: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    retry_after_ms: int | None = None
    """Set when the provider answered 429: pause the pool this long."""

    def to_wire(self) -> dict[str, Any]:
        return _without_none(
            {
                "traceId": self.trace_id,
                "instanceKey": self.instance_key,
                "permitId": self.permit_id or None,
                "pool": self.pool or None,
                "inputTokens": self.input_tokens,
                "outputTokens": self.output_tokens,
                "cost": self.cost or None,
                "retryAfterMs": self.retry_after_ms,
            }
        )

    @classmethod
    def read(cls, fields: _Fields) -> ModelUsage:
        return cls(
            fields.text("traceId"),
            fields.instance_key("instanceKey"),
            fields.text("permitId"),
            fields.text("pool"),
            max(fields.integer("inputTokens") or 0, 0),
            max(fields.integer("outputTokens") or 0, 0),
            fields.amount("cost"),
            fields.integer("retryAfterMs"),
        )


QUESTION_ANSWERS: Mapping[EventKind, EventKind] = {
    EventKind.PREPARE_INSTANCE: EventKind.PREPARE_INSTANCE_RESULT,
    EventKind.DELETE_INSTANCE: EventKind.DELETE_INSTANCE_RESULT,
    EventKind.RESTART_INSTANCE: EventKind.RESTART_INSTANCE_RESULT,
    EventKind.APPROVAL_DECISION: EventKind.APPROVAL_DECISION_RESULT,
}
"""The questions the Orchestrator asks an agent, and the kind of each answer."""

AGENT_TO_ORCHESTRATOR = frozenset(
    {
        EventKind.READY,
        EventKind.BOOT_FAILED,
        EventKind.STATUS,
        EventKind.TURN_COMPLETED,
        EventKind.SHUTDOWN_ACK,
        EventKind.RUNTIME_EVENT,
        EventKind.TEXT_DELTA,
        EventKind.RESTART_REQUEST,
        EventKind.SEND,
        EventKind.SEND_STARTED,
        EventKind.SEND_DONE,
        EventKind.SEND_REFUSED,
        EventKind.SPAWN_REQUEST,
        EventKind.LIST_REQUEST,
        EventKind.CONFIG_CHECK,
        EventKind.PREPARE_INSTANCE_RESULT,
        EventKind.DELETE_INSTANCE_RESULT,
        EventKind.RESTART_INSTANCE_RESULT,
        EventKind.APPROVAL_DECISION_RESULT,
        EventKind.MODEL_PERMIT,
        EventKind.MODEL_USAGE,
    }
)
"""The kinds an Orchestrator must handle."""
ORCHESTRATOR_TO_AGENT = frozenset(
    {
        EventKind.SEND,
        EventKind.SEND_FAILED,
        EventKind.SPAWN_RESULT,
        EventKind.LIST_RESULT,
        EventKind.CONFIG_CHECK_RESULT,
        EventKind.PREPARE_INSTANCE,
        EventKind.DELETE_INSTANCE,
        EventKind.RESTART_INSTANCE,
        EventKind.APPROVAL_DECISION,
        EventKind.CANCEL,
        EventKind.MODEL_PERMIT_RESULT,
    }
)
"""The kinds an AgentProcess must handle."""
CONNECTOR_TO_ORCHESTRATOR = frozenset(
    {
        EventKind.READY,
        EventKind.BOOT_FAILED,
        EventKind.CONNECTOR_EVENT,
        EventKind.CONNECTOR_HEALTH,
    }
)
"""The kinds a connector's process sends."""
ORCHESTRATOR_TO_CONNECTOR = frozenset({EventKind.CONNECTOR_EVENT_SETTLED})
"""The kinds a connector's process must handle."""


# -- building and reading messages ---------------------------------------------------------------


def delegate(sender: str, to: str, correlation_id: str, handoff: Handoff) -> DelegateMessage:
    """A ``delegate`` carrying ``handoff``."""
    return DelegateMessage(
        sender=sender, to=to, correlation_id=correlation_id, payload=handoff.to_wire()
    )


def delegate_result(
    sender: str, to: str, correlation_id: str, answer: DelegateAnswer
) -> DelegateResultMessage:
    """The ``delegate_result`` answering ``correlation_id``."""
    return DelegateResultMessage(
        sender=sender, to=to, correlation_id=correlation_id, payload=answer.to_wire()
    )


def shutdown(to: str, request: ShutdownRequest) -> ShutdownMessage:
    """A ``shutdown`` from the Orchestrator."""
    return ShutdownMessage(sender=ORCHESTRATOR, to=to, payload=request.to_wire())


def event(sender: str, to: str, body: EventBody, correlation_id: str | None = None) -> EventMessage:
    """An ``event`` carrying ``body``."""
    return EventMessage(
        sender=sender,
        to=to,
        payload={"kind": body.KIND.value, **body.to_wire()},
        correlation_id=correlation_id,
    )


class UnknownEvent(IpcError):
    """An ``event`` whose kind this protocol does not have."""

    code = "IPC_UNKNOWN_EVENT"


def read_event(message: EventMessage) -> EventBody:
    """The typed body of ``message``; raises :class:`UnknownEvent` or :class:`MalformedPayload`."""
    fields = _Fields(message.payload, "event")
    kind = fields.data.get("kind")
    body = _BODIES_BY_NAME.get(kind) if isinstance(kind, str) else None
    if body is None:
        raise UnknownEvent(f"unknown event kind {kind!r}", details={"kind": kind})
    fields.what = str(kind)
    return body.read(fields)


EVENT_BODIES: Mapping[EventKind, type[EventBody]] = _BODIES
"""The body class of every event kind."""
