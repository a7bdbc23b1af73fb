"""The envelope of every frame, and the errors that cross the pipe.

A frame carries one ``IpcMessage`` ``{type, from, to, payload, correlationId?}`` with ``type`` one
of ``delegate``, ``delegate_result``, ``event`` or ``shutdown``. What each payload holds, and the
kinds of ``event``, are the protocol's (:mod:`ipc.protocol`); this module only checks the
envelope. Errors cross the pipe as ``{code, message, details}`` (:class:`IpcError`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from goondan.errors import DeliveryError

MessageType = Literal["delegate", "delegate_result", "event", "shutdown"]


class _Message(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    sender: str = Field(alias="from", min_length=1, description="Agent name or `orchestrator`.")
    to: str = Field(min_length=1, description="Agent name or `orchestrator`.")
    payload: Any = Field(default_factory=dict)
    """Any JSON value; every message of this runtime's protocol carries an object."""
    correlation_id: str | None = Field(default=None, alias="correlationId")

    def to_wire(self) -> dict[str, Any]:
        """The dict that is msgpack-encoded: aliases, ``None`` fields left out."""
        # Built by hand: model_dump costs several times more on this per-message path.
        wire: dict[str, Any] = {
            "type": self.type,  # type: ignore[attr-defined]
            "from": self.sender,
            "to": self.to,
            "payload": self.payload,
        }
        if self.correlation_id is not None:
            wire["correlationId"] = self.correlation_id
        return wire


class DelegateMessage(_Message):
    """Run a Turn on the target and answer with a ``delegate_result``."""

    type: Literal["delegate"] = "delegate"
    correlation_id: str = Field(alias="correlationId", min_length=1)


class DelegateResultMessage(_Message):
    """The answer to one ``delegate``."""

    type: Literal["delegate_result"] = "delegate_result"
    correlation_id: str = Field(alias="correlationId", min_length=1)


class EventMessage(_Message):
    """Anything that is not a delegate or a shutdown; see ``payload.kind``."""

    type: Literal["event"] = "event"

    @property
    def kind(self) -> str:
        """``payload.kind`` (``""`` when absent)."""
        kind = self.payload.get("kind") if isinstance(self.payload, dict) else None
        return kind if isinstance(kind, str) else ""


class ShutdownMessage(_Message):
    """Finish what is running, acknowledge, and exit."""

    type: Literal["shutdown"] = "shutdown"


IpcMessage: TypeAlias = Annotated[
    DelegateMessage | DelegateResultMessage | EventMessage | ShutdownMessage,
    Field(discriminator="type"),
]
MESSAGE_ADAPTER: TypeAdapter[IpcMessage] = TypeAdapter(IpcMessage)


def parse_message(data: Any) -> IpcMessage:
    """Validate a decoded frame; raises ``pydantic.ValidationError`` on a wrong shape."""
    return MESSAGE_ADAPTER.validate_python(data)


# -- errors across the pipe ----------------------------------------------------------------


class IpcError(DeliveryError):
    """An error that crosses the pipe as ``{code, message, details}``."""

    code = "IPC_ERROR"

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
        code = str(data.get("code") or "IPC_ERROR")
        message = str(data.get("message") or code)
        details = data.get("details") if isinstance(data.get("details"), dict) else None
        known = _ERRORS.get(code)
        if known is not None:
            return known(message, details=details)
        return IpcError(message, details=details, code=code)


class AgentNotFound(IpcError):
    """The target is not an agent of the Swarm."""

    code = "AGENT_NOT_FOUND"


class AgentCrashed(IpcError):
    """The target process died before it answered."""

    code = "AGENT_CRASHED"


class AgentUnavailable(IpcError):
    """The target cannot run now (crash-loop backoff, or it fails to boot)."""

    code = "AGENT_UNAVAILABLE"


class RequestTimeout(IpcError):
    """No answer within the request's timeout."""

    code = "AGENT_REQUEST_TIMEOUT"


class CircularCall(IpcError):
    """The request would close a cycle (A → B → A) and deadlock."""

    code = "CIRCULAR_CALL_DETECTED"


class ShuttingDown(IpcError):
    """The swarm is shutting down; no new work is accepted."""

    code = "SHUTTING_DOWN"


class Cancelled(IpcError):
    """An operator cancelled the request (``cancel``); its Turns stop at their next safe point."""

    code = "CANCELLED"


class TooManyPending(IpcError):
    """The caller already waits on the maximum number of requests."""

    code = "TOO_MANY_PENDING_REQUESTS"


class EmptyInput(IpcError):
    """The request's text is empty or only white space: no model accepts that as a message."""

    code = "EMPTY_INPUT"


class TurnFailed(IpcError):
    """The target ran the Turn, and the Turn failed (model error, max steps, ...)."""

    code = "AGENT_TURN_FAILED"


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
        TurnFailed,
    )
}
