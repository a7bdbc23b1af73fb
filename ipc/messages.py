"""The envelope of every frame, and the errors that cross the pipe.

A frame carries one ``IpcMessage`` ``{type, from, to, payload, correlationId?}`` with ``type`` one
of ``delegate``, ``delegate_result``, ``event`` or ``shutdown``. What each payload holds, and the
kinds of ``event``, are the protocol's (:mod:`ipc.protocol`); this module only checks the
envelope. Errors cross the pipe as ``{code, message, details}`` (:class:`IpcError`).

The envelopes are ``msgspec`` structs: a frame's body is decoded and its envelope checked in one
C call (:data:`MESSAGE_DECODER`), and encoded in one (:data:`MESSAGE_ENCODER`). Every message of
every request crosses the Orchestrator twice, so this is the runtime's hottest path; a pydantic
envelope cost several times more.
"""

from __future__ import annotations

from typing import Annotated, Any, Self, TypeAlias

import msgspec

from goondan.errors import DeliveryCode, DeliveryError

Name = Annotated[str, msgspec.Meta(min_length=1)]
"""An agent name or ``orchestrator``."""


class _Message(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    sender: Name = msgspec.field(name="from")
    """Agent name or ``orchestrator``."""
    to: Name
    """Agent name or ``orchestrator``."""
    payload: Any = msgspec.field(default_factory=dict)
    """Any JSON value; every message of this runtime's protocol carries an object (an empty
    one is left off the wire and read back as ``{}``)."""
    correlation_id: Name | None = msgspec.field(default=None, name="correlationId")

    @property
    def type(self) -> str:
        """``delegate``, ``delegate_result``, ``event`` or ``shutdown``."""
        return self.__struct_config__.tag  # type: ignore[return-value]

    def to_wire(self) -> dict[str, Any]:
        """The message as the dict its frame carries (spec field names, ``None`` left out)."""
        wire: dict[str, Any] = {
            "type": self.type,
            "from": self.sender,
            "to": self.to,
            "payload": self.payload,
        }
        if self.correlation_id is not None:
            wire["correlationId"] = self.correlation_id
        return wire

    def readdressed(self, to: str) -> Self:
        """The same message, addressed to ``to`` (the router forwards with this)."""
        return msgspec.structs.replace(self, to=to)


class DelegateMessage(_Message, tag="delegate", frozen=True):
    """Run a Turn on the target and answer with a ``delegate_result``."""

    correlation_id: Name = msgspec.field(name="correlationId")


class DelegateResultMessage(_Message, tag="delegate_result", frozen=True):
    """The answer to one ``delegate``."""

    correlation_id: Name = msgspec.field(name="correlationId")


class EventMessage(_Message, tag="event", frozen=True):
    """Anything that is not a delegate or a shutdown; see ``payload.kind``."""

    @property
    def kind(self) -> str:
        """``payload.kind`` (``""`` when absent)."""
        kind = self.payload.get("kind") if isinstance(self.payload, dict) else None
        return kind if isinstance(kind, str) else ""


class ShutdownMessage(_Message, tag="shutdown", frozen=True):
    """Finish what is running, acknowledge, and exit."""


IpcMessage: TypeAlias = DelegateMessage | DelegateResultMessage | EventMessage | ShutdownMessage
MESSAGE_DECODER: msgspec.msgpack.Decoder[IpcMessage] = msgspec.msgpack.Decoder(IpcMessage)
"""Decodes a frame's body and checks its envelope; raises ``msgspec.ValidationError`` on a
wrong shape and ``msgspec.DecodeError`` on bytes that are not msgpack."""
MESSAGE_ENCODER = msgspec.msgpack.Encoder()
"""Encodes a message to a frame's body."""


def parse_message(data: Any) -> IpcMessage:
    """Check the envelope of an already decoded frame (a dict); raises
    ``msgspec.ValidationError`` on a wrong shape."""
    message: IpcMessage = msgspec.convert(data, IpcMessage, strict=True)
    return message


# -- errors across the pipe ----------------------------------------------------------------


class IpcError(DeliveryError):
    """An error that crosses the pipe as ``{code, message, details}``."""

    code: str = DeliveryCode.IPC_ERROR

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The wire form."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_dict(cls, data: Any) -> IpcError:
        """The registered class for ``data["code"]``; an unknown code keeps it on the base."""
        if not isinstance(data, dict):
            return IpcError(f"malformed error: {data!r}")
        code = str(data.get("code") or DeliveryCode.IPC_ERROR)
        message = str(data.get("message") or code)
        details = data.get("details") if isinstance(data.get("details"), dict) else None
        known = _ERRORS.get(code)
        if known is not None:
            return known(message, details=details)
        return IpcError(message, details=details, code=code)


class AgentNotFound(IpcError):
    """The target is not an agent of the Swarm."""

    code = DeliveryCode.AGENT_NOT_FOUND


class AgentCrashed(IpcError):
    """The target process died before it answered."""

    code = DeliveryCode.AGENT_CRASHED


class AgentUnavailable(IpcError):
    """The target cannot run now (crash-loop backoff, or it fails to boot)."""

    code = DeliveryCode.AGENT_UNAVAILABLE


class NodeAbsent(AgentUnavailable):
    """The target runs only on cluster nodes none of which is in the cluster now: one lost a
    moment ago may be back soon (a request waits a little for it before it is refused)."""


class RequestTimeout(IpcError):
    """No answer within the request's timeout."""

    code = DeliveryCode.AGENT_REQUEST_TIMEOUT


class CircularCall(IpcError):
    """The request would close a cycle (A → B → A) and deadlock."""

    code = DeliveryCode.CIRCULAR_CALL_DETECTED


class ShuttingDown(IpcError):
    """The swarm is shutting down; no new work is accepted."""

    code = DeliveryCode.SHUTTING_DOWN


class Cancelled(IpcError):
    """An operator cancelled the request (``cancel``); its Turns stop at their next safe point."""

    code = DeliveryCode.CANCELLED


class TooManyPending(IpcError):
    """The caller already waits on the maximum number of requests."""

    code = DeliveryCode.TOO_MANY_PENDING_REQUESTS


class EmptyInput(IpcError):
    """The request's text is empty or only white space: no model accepts that as a message."""

    code = DeliveryCode.EMPTY_INPUT


class BudgetExceeded(IpcError):
    """A token or cost budget is used up (the Orchestrator refuses a trace's next model call)."""

    code = DeliveryCode.E_BUDGET_EXCEEDED


class PermitTimeout(IpcError):
    """The shared rate limits of a Model's pool gave no permit within the call's timeout."""

    code = DeliveryCode.E_MODEL_PERMIT_TIMEOUT


class TurnFailed(IpcError):
    """The target ran the Turn, and the Turn failed (model error, max steps, ...)."""

    code = DeliveryCode.AGENT_TURN_FAILED


_ERRORS: dict[str, type[IpcError]] = {
    cls.code: cls
    for cls in (
        AgentNotFound,
        AgentCrashed,
        AgentUnavailable,
        RequestTimeout,
        CircularCall,
        ShuttingDown,
        Cancelled,
        TooManyPending,
        EmptyInput,
        BudgetExceeded,
        PermitTimeout,
        TurnFailed,
    )
}
