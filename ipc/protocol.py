"""The protocol between the Orchestrator and its AgentProcesses: every kind, every payload, typed.

Both sides build and read messages only through this module. A message is an
:class:`~ipc.messages.IpcMessage` envelope ``{type, from, to, payload, correlationId?}``; its
payload is a ``msgspec`` struct below, built into the envelope with ``to_wire`` and read back with
``from_wire``. The envelope decodes on its own and keeps the payload undecoded, so a payload of the
wrong shape is still answered by its correlation id: ``from_wire`` refuses it with
:class:`MalformedPayload` (``IPC_MALFORMED_PAYLOAD``) naming the field, as msgspec reports it
(``delegate.input: Expected `str`, got `int` - at `$.input```).

Every payload struct is ``rename="camel"`` (``instance_key`` is ``instanceKey`` on the wire),
``frozen`` (derive a changed one with ``msgspec.structs.replace``) and ``omit_defaults``: a field
at its default is left off the wire, and every reader since the first one reads an absent field as
that default. Unknown fields are ignored, not refused, so a peer of a newer version may add one.

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
``leader_changed``           :class:`LeaderChanged`: a cluster's new leader took this agent
                             over; what it asked of the previous one is lost.

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
import re
import secrets
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Self, TypeAlias, TypeVar

import msgspec
from msgspec.structs import force_setattr

from goondan.defaults import DEFAULT_INSTANCE_KEY as DEFAULT_INSTANCE_KEY  # part of the wire
from goondan.http_codes import HttpCode
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
    LEADER_CHANGED = "leader_changed"
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


# -- payload structs --------------------------------------------------------------------------

_T = TypeVar("_T", bound="_Payload")
_FIELD_AT = re.compile(r"at `\$\.(\w+)|missing required field `(\w+)`")


def _error_from_wire(kind: type, value: Any) -> Any:
    """msgspec's ``dec_hook``: an error crosses as ``{code, message, details?}``."""
    if kind is IpcError:
        return IpcError.from_dict(value)
    raise NotImplementedError(kind)


def _error_to_wire(value: Any) -> Any:
    """msgspec's ``enc_hook``: the wire form of an error."""
    if isinstance(value, IpcError):
        return value.to_dict()
    raise NotImplementedError(type(value))


def _malformed(what: str, exc: msgspec.ValidationError) -> MalformedPayload:
    """``exc`` as the protocol's error, naming the first field of msgspec's path."""
    found = _FIELD_AT.search(str(exc))
    if found is None:
        return MalformedPayload(f"{what}: {exc}")
    name = found.group(1) or found.group(2)
    return MalformedPayload(f"{what}.{name}: {exc}", details={"field": name})


class _Payload(msgspec.Struct, rename="camel", frozen=True, omit_defaults=True):
    """A payload (or the body of an event): a typed struct, camel-cased on the wire.

    Unknown fields are ignored (``forbid_unknown_fields`` stays off): a newer peer may add one
    and this side must still read the rest, as every reader of this protocol always did.
    """

    def to_wire(self) -> dict[str, Any]:
        """The payload object (for an event, its fields without ``kind``)."""
        # a hook (any keyword argument, even None) costs msgspec a microsecond: only when needed
        for name in _rules(type(self)).errors:
            if getattr(self, name) is not None:
                wire: dict[str, Any] = msgspec.to_builtins(self, enc_hook=_error_to_wire)
                return wire
        plain: dict[str, Any] = msgspec.to_builtins(self)
        return plain

    @classmethod
    def _convert(cls: type[_T], data: Any, what: str) -> _T:
        rules = _rules(cls)
        try:
            if type(data) is dict and not rules.error_keys.isdisjoint(data):  # see to_wire
                body = msgspec.convert(data, cls, dec_hook=_error_from_wire)
            else:
                body = msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise _malformed(what, exc) from None
        return body._normalised() if rules.if_empty or rules.not_negative else body

    def _normalised(self) -> Self:
        """The payload as the protocol always read it (see :func:`_rules`)."""
        if_empty, not_negative, _, _ = _rules(type(self))
        changes = {name: value for name, value in if_empty if getattr(self, name) == ""}
        changes.update({name: 0 for name in not_negative if getattr(self, name) < 0})
        return msgspec.structs.replace(self, **changes) if changes else self


class _Rules(NamedTuple):
    """What :func:`_rules` found for one payload struct."""

    if_empty: tuple[tuple[str, Any], ...]
    """Fields whose empty text reads as another value, and that value."""
    not_negative: tuple[str, ...]
    """Counts that read a negative number as 0."""
    errors: tuple[str, ...]
    """The fields that hold an :class:`IpcError`."""
    error_keys: frozenset[str]
    """Their names on the wire."""


_RULES: dict[type[_Payload], _Rules] = {}


def _rules(cls: type[_Payload]) -> _Rules:
    """How the protocol always read the fields of ``cls``, found once from their types: an empty
    text reads as the field's default (an empty instance key is the default one), an empty
    optional text as ``None``, a negative count as 0. And the fields that hold an
    :class:`IpcError` (only one that holds one needs msgspec's hooks, which double its time)."""
    rules = _RULES.get(cls)
    if rules is None:
        fields = msgspec.structs.fields(cls)
        errors = [f for f in fields if f.type in (IpcError, IpcError | None)]
        rules = _RULES[cls] = _Rules(
            tuple((f.name, f.default) for f in fields if isinstance(f.default, str) and f.default)
            + tuple((f.name, None) for f in fields if f.type == str | None),
            tuple(f.name for f in fields if f.type is int),
            tuple(f.name for f in errors),
            frozenset(f.encode_name for f in errors),
        )
    return rules


class Handoff(_Payload, frozen=True, kw_only=True):
    """Input for another agent's Turn: the payload of a ``delegate`` and the body of a ``send``.
    Derive a changed one with ``msgspec.structs.replace``."""

    target: str = ""
    """The agent that runs the Turn."""
    input: str = ""
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
    metadata: dict[str, Any] = {}
    event_id: str = ""
    """The caller's id of this request or send (a send is tracked under it until done)."""
    timeout_ms: int | None = None
    """A ``delegate``'s timeout; ``None`` (or not positive) means the swarm's default."""
    background: bool = msgspec.field(default=False, name="async")
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

    def _normalised(self) -> Handoff:
        # every request passes here: one quick look before the general rule
        quick = self.instance_key and self.caller_instance_key and self.event_type
        return self if quick and self.parent_span_id != "" else super()._normalised()

    @classmethod
    def from_wire(cls, data: Any, what: str = "delegate") -> Handoff:
        """Read a payload; raises :class:`MalformedPayload`."""
        try:  # :meth:`_convert` inlined: this runs for every request
            return msgspec.convert(data, cls)._normalised()
        except msgspec.ValidationError as exc:
            raise _malformed(what, exc) from None


class DelegateAnswer(_Payload, frozen=True):
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
        return cls._convert(data, "delegate_result")


ShutdownReason: TypeAlias = str
"""``restart``, ``config_change``, ``orchestrator_shutdown`` (from the Orchestrator), or the
agent's own ``sigterm`` and ``broken_fds``."""


class ShutdownRequest(_Payload, frozen=True):
    """The payload of a ``shutdown``: drain within ``grace_ms``, acknowledge, exit."""

    grace_ms: int = msgspec.field(name="gracePeriodMs")
    reason: ShutdownReason = ""

    @property
    def grace_seconds(self) -> float:
        """The grace period in seconds."""
        return self.grace_ms / 1000

    @classmethod
    def from_wire(cls, data: Any, default_grace_ms: int) -> ShutdownRequest:
        """Read a payload (no grace period: ``default_grace_ms``); raises
        :class:`MalformedPayload`."""
        if isinstance(data, dict) and data.get("gracePeriodMs") is None:
            data = {**data, "gracePeriodMs": default_grace_ms}
        return cls._convert(data, "shutdown")


# -- event bodies ----------------------------------------------------------------------------------


class _Outcome(NamedTuple):
    """How an answer that is a result or an ``error`` says which on the wire."""

    field: str
    ok: bool | str
    """Its value for a result."""
    failed: bool | str
    """Its value for an error."""
    absent: bool | str
    """What the first readers of this protocol took its absence for."""
    fallback: str
    """The error message of a refusal that carries no error."""


class EventBody(_Payload, frozen=True):
    """The payload of one event kind (``payload = {"kind": KIND, **to_wire()}``)."""

    KIND: ClassVar[EventKind]
    _OUTCOME: ClassVar[_Outcome | None] = None
    """Set for an answer that holds a result or an ``error``."""

    def to_wire(self) -> dict[str, Any]:
        """The payload's fields, without ``kind``."""
        wire = super().to_wire()
        if self._OUTCOME is None:
            return wire
        said = self._OUTCOME.ok if getattr(self, "error", None) is None else self._OUTCOME.failed
        return {self._OUTCOME.field: said, **wire}

    @classmethod
    def from_wire(cls, data: Any, what: str) -> EventBody:
        """The body from a payload (``kind`` checked already); raises :class:`MalformedPayload`."""
        body = cls._convert(data, what)
        if cls._OUTCOME is None:
            return body
        field, ok, failed, absent, fallback = cls._OUTCOME
        said = data.get(field, absent)
        if type(said) is not type(ok):
            got = type(said).__name__
            raise MalformedPayload(
                f"{what}.{field}: Expected `{type(ok).__name__}`, got `{got}` - at `$.{field}`",
                details={"field": field},
            )
        error = getattr(body, "error", None)
        if said != failed:  # a result: an error beside it was never read
            return body if error is None else msgspec.structs.replace(body, error=None)
        return (
            body if error is not None else msgspec.structs.replace(body, error=IpcError(fallback))
        )


_BODIES: dict[EventKind, type[EventBody]] = {}
_BODIES_BY_NAME: dict[str, type[EventBody]] = {}
_BodyT = TypeVar("_BodyT", bound=type[EventBody])


def _body(cls: _BodyT) -> _BodyT:
    _BODIES[cls.KIND] = cls
    _BODIES_BY_NAME[cls.KIND.value] = cls
    return cls


_NotNegative = Annotated[float, msgspec.Meta(ge=0)]


@_body
class Ready(EventBody, frozen=True):
    """The agent booted and serves; ``scope`` is its process scope token (``ipc.scope``)."""

    KIND: ClassVar[EventKind] = EventKind.READY
    pid: int = 0
    scope: str | None = None


@_body
class BootFailed(EventBody, frozen=True):
    """The agent cannot boot, and why."""

    KIND: ClassVar[EventKind] = EventKind.BOOT_FAILED
    error: str = "boot failed"


@_body
class StatusChanged(EventBody, frozen=True):
    """The agent became busy (a Turn runs) or idle."""

    KIND: ClassVar[EventKind] = EventKind.STATUS
    status: Literal["idle", "processing"] = "idle"


@_body
class TurnCompleted(EventBody, frozen=True):
    """A Turn of ``instance_key`` ended with ``status``."""

    KIND: ClassVar[EventKind] = EventKind.TURN_COMPLETED
    instance_key: str = DEFAULT_INSTANCE_KEY
    status: str = ""

    @property
    def ok(self) -> bool:
        """The Turn succeeded."""
        return self.status == "ok"


@_body
class ShutdownAck(EventBody, frozen=True):
    """The drain is over; the process exits next."""

    KIND: ClassVar[EventKind] = EventKind.SHUTDOWN_ACK


@_body
class RuntimeEventReport(EventBody, frozen=True):
    """One runtime event (``turn.started``, ``tool.completed``, ...) for the event log."""

    KIND: ClassVar[EventKind] = EventKind.RUNTIME_EVENT
    event: dict[str, Any] = {}


@_body
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


@_body
class RestartRequest(EventBody, frozen=True):
    """A tool of the agent asked for the agent's restart."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_REQUEST
    reason: str = "tool:self-restart"


@_body
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


@_body
class SendStarted(EventBody, frozen=True):
    """The Turn of send ``event_id`` started: a crash from now on loses its effect midway."""

    KIND: ClassVar[EventKind] = EventKind.SEND_STARTED
    event_id: str = ""


@_body
class SendDone(EventBody, frozen=True):
    """The Turn of send ``event_id`` ended. For a send from a Connection it carries the
    Turn's ``answer`` text, or ``turn_error`` (``"<code>: <message>"``) when the Turn failed,
    so the connector can answer back where the event came from."""

    KIND: ClassVar[EventKind] = EventKind.SEND_DONE
    event_id: str = ""
    answer: str | None = None
    turn_error: str | None = None


@_body
class SendRefused(EventBody, frozen=True):
    """The target could not take send ``event_id`` (draining, queue full, ...)."""

    KIND: ClassVar[EventKind] = EventKind.SEND_REFUSED
    event_id: str = ""
    error: IpcError = msgspec.field(default_factory=lambda: IpcError("send refused"))


@_body
class SendFailed(EventBody, frozen=True):
    """A send of the agent's instance ``instance_key`` was lost, and why."""

    KIND: ClassVar[EventKind] = EventKind.SEND_FAILED
    event_id: str = ""
    target: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    error: IpcError = msgspec.field(default_factory=lambda: IpcError("send lost"))


@_body
class SpawnRequest(EventBody, frozen=True):
    """``agents__spawn``: prepare an instance of ``target`` (a generated key when ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_REQUEST
    target: str = ""
    instance_key: str | None = None
    cwd: str | None = None
    owner_instance_key: str = DEFAULT_INSTANCE_KEY


@_body
class SpawnResult(EventBody, frozen=True):
    """The answer to a :class:`SpawnRequest`: the instance, or why not."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_RESULT
    _OUTCOME: ClassVar[_Outcome | None] = _Outcome("status", "ok", "error", "ok", "spawn failed")
    target: str = ""
    instance_key: str = ""
    spawned: bool = False
    """Whether this request created the instance (``False`` for one that existed)."""
    cwd: str | None = None
    error: IpcError | None = None


@_body
class ListRequest(EventBody, frozen=True):
    """``agents__list``: the instances spawned by the caller's instance (or by anyone)."""

    KIND: ClassVar[EventKind] = EventKind.LIST_REQUEST
    owner_instance_key: str = DEFAULT_INSTANCE_KEY
    include_all: bool = False


@_body
class ListResult(EventBody, frozen=True):
    """The answer to a :class:`ListRequest`: one row per spawned instance."""

    KIND: ClassVar[EventKind] = EventKind.LIST_RESULT
    agents: list[dict[str, Any]] = []

    def to_wire(self) -> dict[str, Any]:
        return {"status": "ok", **super().to_wire()}


@_body
class ConfigCheck(EventBody, frozen=True):
    """``self-restart``: would the configuration on disk load? (It is not adopted yet.)"""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK


@_body
class ConfigCheckResult(EventBody, frozen=True):
    """The answer to a :class:`ConfigCheck`: every error found (none: it loads)."""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK_RESULT
    errors: tuple[str, ...] = ()


@_body
class PrepareInstance(EventBody, frozen=True):
    """Create instance ``instance_key`` (in ``cwd`` if given) unless it exists, for a spawn by
    ``owner``'s instance ``owner_instance_key``."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY
    cwd: str | None = None
    owner: str = ""
    owner_instance_key: str = DEFAULT_INSTANCE_KEY


@_body
class PrepareInstanceResult(EventBody, frozen=True):
    """The answer to :class:`PrepareInstance`: the instance and whether it was created now."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE_RESULT
    _OUTCOME: ClassVar[_Outcome | None] = _Outcome(
        "ok", True, False, False, "instance not prepared"
    )
    instance_key: str = ""
    created: bool = False
    cwd: str | None = None
    error: IpcError | None = None


@_body
class DeleteInstance(EventBody, frozen=True):
    """Delete instance ``instance_key`` unless a Turn of it is queued or running."""

    KIND: ClassVar[EventKind] = EventKind.DELETE_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY


@_body
class DeleteInstanceResult(EventBody, frozen=True):
    """The answer to :class:`DeleteInstance`: whether files were deleted, or why not."""

    KIND: ClassVar[EventKind] = EventKind.DELETE_INSTANCE_RESULT
    ok: bool = False
    deleted: bool = False
    error: str | None = None

    def __post_init__(self) -> None:
        if not self.ok and self.error is None:
            force_setattr(self, "error", "not deleted")

    def to_wire(self) -> dict[str, Any]:
        # Also the HTTP API's answer to a delete: every field of its outcome, defaults included.
        if not self.ok:
            return {"ok": False, "error": self.error}
        return {"ok": True, "deleted": self.deleted}


@_body
class RestartInstance(EventBody, frozen=True):
    """Restart instance ``instance_key``: its running Turn ends now (its caller is answered
    ``CANCELLED``), what the agent holds of it is dropped and read again from disk, and its
    queued Turns then run on the conversation as stored."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY


@_body
class RestartInstanceResult(EventBody, frozen=True):
    """The answer to :class:`RestartInstance`: whether the instance was loaded (else there was
    nothing to restart) and how many running Turns were stopped, or why it failed."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_INSTANCE_RESULT
    ok: bool = False
    loaded: bool = False
    stopped_turns: int = 0
    error: str | None = None

    def __post_init__(self) -> None:
        if not self.ok and self.error is None:
            force_setattr(self, "error", "not restarted")

    def to_wire(self) -> dict[str, Any]:
        # Also the HTTP API's answer to a restart: every field of its outcome, defaults included.
        if not self.ok:
            return {"ok": False, "error": self.error}
        return {"ok": True, "loaded": self.loaded, "stoppedTurns": self.stopped_turns}


@_body
class Cancel(EventBody, frozen=True):
    """Stop every Turn of trace ``trace_id``, running or queued, at its next safe point: before
    a model call (one in flight is abandoned) and before each tool call (one running finishes)."""

    KIND: ClassVar[EventKind] = EventKind.CANCEL
    trace_id: str = ""
    reason: str = "cancelled by an operator"


@_body
class LeaderChanged(EventBody, frozen=True):
    """A cluster's new leader took this agent process over. Every answer the agent still waits
    for (a delegate's, a permit's, any question's) was owed by the previous leader, which is
    gone and whose routes died with it: the agent answers each ``LEADER_LOST`` now instead of
    letting it wait out its timeout."""

    KIND: ClassVar[EventKind] = EventKind.LEADER_CHANGED
    leader: str = ""
    """Who leads now (its host and pid), for the agent's log."""


@_body
class ConnectorEventReport(EventBody, frozen=True):
    """An event a connector emitted, normalised: its text is the Turn's input."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_EVENT
    event_id: str = ""
    name: str = ""
    text: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    properties: dict[str, str] = {}


@_body
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


@_body
class ConnectorHealth(EventBody, frozen=True):
    """A connector's source failed (``error``: a short message, no secret in it) or works
    again (``error`` is ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.CONNECTOR_HEALTH
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The source works."""
        return self.error is None


APPROVAL_NOT_FOUND = HttpCode.APPROVAL_NOT_FOUND
"""An :class:`ApprovalDecision` names no approval of the agent (HTTP 404)."""
APPROVAL_ALREADY_DECIDED = HttpCode.APPROVAL_ALREADY_DECIDED
"""The approval was decided already, or expired (HTTP 409)."""
APPROVAL_INVALID_ARGUMENTS = HttpCode.APPROVAL_INVALID_ARGUMENTS
"""The edited arguments of an approval fail the tool's JSON Schema (HTTP 400)."""


@_body
class ApprovalDecision(EventBody, frozen=True):
    """An operator's decision on approval ``approval_id``: ``approve`` (with ``arguments`` in
    place of the model's, if given) or ``reject`` (with ``reason`` for the model), made by
    ``decided_by`` (who the daemon found at the other end of the API: recorded with it)."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_DECISION
    approval_id: str
    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    reason: str = ""
    decided_by: dict[str, Any] | None = None


@_body
class ApprovalDecisionResult(EventBody, frozen=True):
    """The answer to :class:`ApprovalDecision`: the approval as it now stands, or why the
    decision was refused (``error.code`` is one of the ``APPROVAL_*`` codes above)."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_DECISION_RESULT
    _OUTCOME: ClassVar[_Outcome | None] = _Outcome("ok", True, False, False, "decision refused")
    approval: dict[str, Any] | None = None
    error: IpcError | None = None


@_body
class ModelPermitRequest(EventBody, frozen=True):
    """Ask for a permit to start one model call (sent with a correlation id, which is the
    permit's id from then on)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_PERMIT
    pool: str = ""
    """The Model's rate-limit pool; empty when only a trace budget needs checking."""
    trace_id: str = ""
    instance_key: str = DEFAULT_INSTANCE_KEY
    estimated_tokens: int = 0
    """The call's input tokens as estimated before it (``tokensPerMinute`` admits on it)."""
    wait_ms: int = 0
    """How long the caller waits at most (the model call's timeout); 0: no wait at all."""
    max_output_tokens: int = 0
    """The most output the call may take (its ``maxTokens``, or the default reserve)."""
    reserved_cost: _NotNegative = 0.0
    """The price of ``estimated_tokens`` in and ``max_output_tokens`` out. The three are what
    the call reserves against its trace's budget until its ``model_usage`` settles it."""


@_body
class ModelPermitResult(EventBody, frozen=True):
    """The answer to :class:`ModelPermitRequest`: granted after ``waited_ms``, or refused with
    ``error`` (``E_BUDGET_EXCEEDED``, ``E_MODEL_PERMIT_TIMEOUT``)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_PERMIT_RESULT
    _OUTCOME: ClassVar[_Outcome | None] = _Outcome("granted", True, False, False, "permit refused")
    waited_ms: int = 0
    error: IpcError | None = None

    @property
    def granted(self) -> bool:
        """The call may start."""
        return self.error is None


@_body
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
    cost: _NotNegative = 0.0
    retry_after_ms: int | None = None
    """Set when the provider answered 429: pause the pool this long."""


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
        EventKind.LEADER_CHANGED,
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


EVENT_BODIES: Mapping[EventKind, type[EventBody]] = _BODIES
"""The body class of every event kind."""
