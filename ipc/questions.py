"""The questions of the protocol (:mod:`ipc.protocol`) and their answers: each an event body, asked
with a correlation id and answered by the body of its answer kind under the same id
(:data:`~ipc.protocol.QUESTION_ANSWERS` names the ones the Orchestrator asks).

An answer that holds a result or an ``error`` says which on the wire (:class:`~ipc.payload.Outcome`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from msgspec.structs import force_setattr

from ipc.messages import IpcError
from ipc.payload import EventBody, NotNegative, Outcome
from ipc.protocol import DEFAULT_INSTANCE_KEY, EventKind


class SpawnRequest(EventBody, frozen=True):
    """``agents__spawn``: prepare an instance of ``target`` (a generated key when ``None``)."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_REQUEST
    target: str = ""
    instance_key: str | None = None
    cwd: str | None = None
    owner_instance_key: str = DEFAULT_INSTANCE_KEY


class SpawnResult(EventBody, frozen=True):
    """The answer to a :class:`SpawnRequest`: the instance, or why not."""

    KIND: ClassVar[EventKind] = EventKind.SPAWN_RESULT
    _OUTCOME: ClassVar[Outcome | None] = Outcome("status", "ok", "error", "ok", "spawn failed")
    target: str = ""
    instance_key: str = ""
    spawned: bool = False
    """Whether this request created the instance (``False`` for one that existed)."""
    cwd: str | None = None
    error: IpcError | None = None


class ListRequest(EventBody, frozen=True):
    """``agents__list``: the instances spawned by the caller's instance (or by anyone)."""

    KIND: ClassVar[EventKind] = EventKind.LIST_REQUEST
    owner_instance_key: str = DEFAULT_INSTANCE_KEY
    include_all: bool = False


class ListResult(EventBody, frozen=True):
    """The answer to a :class:`ListRequest`: one row per spawned instance."""

    KIND: ClassVar[EventKind] = EventKind.LIST_RESULT
    agents: list[dict[str, Any]] = []  # noqa: RUF012  # a msgspec struct: each instance gets its own copy

    def to_wire(self) -> dict[str, Any]:
        return {"status": "ok", **super().to_wire()}


class ConfigCheck(EventBody, frozen=True):
    """``self-restart``: would the configuration on disk load? (It is not adopted yet.)"""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK


class ConfigCheckResult(EventBody, frozen=True):
    """The answer to a :class:`ConfigCheck`: every error found (none: it loads)."""

    KIND: ClassVar[EventKind] = EventKind.CONFIG_CHECK_RESULT
    errors: tuple[str, ...] = ()


class PrepareInstance(EventBody, frozen=True):
    """Create instance ``instance_key`` (in ``cwd`` if given) unless it exists, for a spawn by
    ``owner``'s instance ``owner_instance_key``."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY
    cwd: str | None = None
    owner: str = ""
    owner_instance_key: str = DEFAULT_INSTANCE_KEY


class PrepareInstanceResult(EventBody, frozen=True):
    """The answer to :class:`PrepareInstance`: the instance and whether it was created now."""

    KIND: ClassVar[EventKind] = EventKind.PREPARE_INSTANCE_RESULT
    _OUTCOME: ClassVar[Outcome | None] = Outcome("ok", True, False, False, "instance not prepared")
    instance_key: str = ""
    created: bool = False
    cwd: str | None = None
    error: IpcError | None = None


class DeleteInstance(EventBody, frozen=True):
    """Delete instance ``instance_key`` unless a Turn of it is queued or running."""

    KIND: ClassVar[EventKind] = EventKind.DELETE_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY


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


class RestartInstance(EventBody, frozen=True):
    """Restart instance ``instance_key``: its running Turn ends now (its caller is answered
    ``CANCELLED``), what the agent holds of it is dropped and read again from disk, and its
    queued Turns then run on the conversation as stored."""

    KIND: ClassVar[EventKind] = EventKind.RESTART_INSTANCE
    instance_key: str = DEFAULT_INSTANCE_KEY


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


class ApprovalDecisionResult(EventBody, frozen=True):
    """The answer to :class:`ApprovalDecision`: the approval as it now stands, or why the
    decision was refused (``error.code`` is one of the ``APPROVAL_*`` codes of :mod:`ipc.protocol`)."""

    KIND: ClassVar[EventKind] = EventKind.APPROVAL_DECISION_RESULT
    _OUTCOME: ClassVar[Outcome | None] = Outcome("ok", True, False, False, "decision refused")
    approval: dict[str, Any] | None = None
    error: IpcError | None = None


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
    reserved_cost: NotNegative = 0.0
    """The price of ``estimated_tokens`` in and ``max_output_tokens`` out. The three are what
    the call reserves against its trace's budget until its ``model_usage`` settles it."""


class ModelPermitResult(EventBody, frozen=True):
    """The answer to :class:`ModelPermitRequest`: granted after ``waited_ms``, or refused with
    ``error`` (``E_BUDGET_EXCEEDED``, ``E_MODEL_PERMIT_TIMEOUT``)."""

    KIND: ClassVar[EventKind] = EventKind.MODEL_PERMIT_RESULT
    _OUTCOME: ClassVar[Outcome | None] = Outcome("granted", True, False, False, "permit refused")
    waited_ms: int = 0
    error: IpcError | None = None

    @property
    def granted(self) -> bool:
        """The call may start."""
        return self.error is None


QUESTION_BODIES: tuple[type[EventBody], ...] = (
    SpawnRequest,
    SpawnResult,
    ListRequest,
    ListResult,
    ConfigCheck,
    ConfigCheckResult,
    PrepareInstance,
    PrepareInstanceResult,
    DeleteInstance,
    DeleteInstanceResult,
    RestartInstance,
    RestartInstanceResult,
    ApprovalDecision,
    ApprovalDecisionResult,
    ModelPermitRequest,
    ModelPermitResult,
)
"""The body class of every question and answer kind."""
