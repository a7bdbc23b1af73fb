"""The payloads of the protocol's own message types (:mod:`ipc.protocol`): :class:`Handoff` for a
``delegate`` (and the body of a ``send``), :class:`DelegateAnswer` for its ``delegate_result``,
:class:`ShutdownRequest` for a ``shutdown``."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from ipc.messages import DelegateResultMessage, IpcError
from ipc.payload import Payload, malformed
from ipc.protocol import DEFAULT_INSTANCE_KEY, call_node
from ipc.runtime_events import EventType


class Handoff(Payload, frozen=True, kw_only=True):
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
    event_type: str = EventType.AGENT_REQUEST.value
    metadata: dict[str, Any] = {}  # noqa: RUF012  # a msgspec struct: each instance gets its own copy
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
    request_id: str = msgspec.field(default="", name="requestId")
    """The caller's stable id of the Turn it asks for. A handoff whose request id this
    instance's conversation already holds resumes that Turn (or, when it already ended,
    answers again with its recorded answer) instead of starting another."""
    attempt: int = 1
    """Which attempt at the Turn this delivery is (2+ after the agent died mid-Turn)."""

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
            raise malformed(what, exc) from None


class DelegateAnswer(Payload, frozen=True):
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


class ShutdownRequest(Payload, frozen=True):
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
