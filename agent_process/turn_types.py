"""What starts a Turn (:class:`TurnInput`) and what it ends with (:class:`TurnResult`).

Plain values, shared by the Turn loop, the instance queues and the process that answers
callers with them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from agent_process.models.base import TokenUsage
from agent_process.scope import TurnScope
from goondan.errors import DeliveryCode
from ipc.protocol import new_trace_id
from tools_base import JsonObject

FinishReason = Literal["text_response", "max_steps", "cancelled", "error"]

EMPTY_OUTPUT_NOTICE = "The model did not produce a response."
MAX_STEPS_NOTICE = "Turn stopped: reached maxStepsPerTurn ({}) without a final answer."
"""The answer of a Turn that used up its Steps without any text (upstream's notice)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnInput:
    """What starts a Turn."""

    text: str
    """Becomes the Turn's user message."""
    trace_id: str = field(default_factory=new_trace_id)
    """Kept from the caller across handoffs; a new one for fresh input."""
    event_type: str = "user.input"
    source_kind: Literal["user", "agent", "connector"] = "user"
    source_name: str = "user"
    metadata: JsonObject = field(default_factory=dict)
    call_chain: tuple[str, ...] = ()
    """Agents already waiting on this Turn, outermost first (cycle detection)."""
    parent_span_id: str | None = None
    """The caller's tool span, for a delegated Turn; ``None`` for fresh input."""
    stream_id: str = ""
    """The caller's stream (:attr:`ipc.delegation.Handoff.stream_id`); empty when it does not
    stream."""
    relay: bool = False
    """With ``stream_id``: this Turn's requests to other agents stream into it too."""
    resume: bool = False
    """No new input: take up the calls a Turn cut short left parked for approval (after a
    restart), then go on to an answer. ``text`` is not appended."""
    message_metadata: JsonObject = field(default_factory=dict)
    """More metadata of the Turn's user message: an inbox message's own, for a Turn it wakes."""
    request_id: str = ""
    """The caller's id of the Turn (:attr:`ipc.delegation.Handoff.request_id`, else its
    correlation or event id), recorded on the Turn's user message."""
    attempt: int = 1
    """Which delivery of the request this is (2+ after the agent died under the Turn)."""
    may_resume: bool = False
    """The request may have run here before (a caller's own request id, or a later attempt):
    a Turn of the conversation that holds ``request_id`` is taken up instead of starting
    another (see :mod:`agent_process.turn_resume`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnError:
    """Why a Turn failed."""

    code: str
    message: str

    def to_json(self) -> JsonObject:
        """``{code, message}``."""
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnResult:
    """The outcome of one Turn; build it with :meth:`answered`, :meth:`failed`,
    :meth:`no_answer` or :meth:`out_of_steps`."""

    turn_id: str
    trace_id: str
    status: Literal["ok", "error"]
    text: str
    """The answer (the last text the model produced)."""
    finish_reason: FinishReason
    step_count: int
    duration_ms: float
    error: TurnError | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    restart_reason: str | None = None
    """Set when a tool asked for a restart of this agent (``restartRequested: true``)."""

    @classmethod
    def answered(
        cls,
        scope: TurnScope,
        text: str,
        *,
        steps: int,
        usage: TokenUsage,
        restart_reason: str | None,
    ) -> TurnResult:
        """The model answered ``text`` in Step ``steps``."""
        return cls._ended(
            scope, "ok", text, "text_response", steps=steps, usage=usage, reason=restart_reason
        )

    @classmethod
    def failed(
        cls,
        origin: TurnScope | TurnInput,
        code: str,
        message: str,
        *,
        steps: int = 0,
        usage: TokenUsage | None = None,
    ) -> TurnResult:
        """The Turn failed with ``code``.

        ``origin`` is the Turn's scope, or only its input when the Turn failed before it got
        one: the result then has no Turn id and no duration.
        """
        if isinstance(origin, TurnScope):
            turn_id, duration_ms = origin.turn_id, origin.elapsed_ms()
        else:
            turn_id, duration_ms = "", 0.0
        return cls(
            turn_id=turn_id,
            trace_id=origin.trace_id,
            status="error",
            text="",
            finish_reason="error",
            step_count=steps,
            duration_ms=duration_ms,
            error=TurnError(code=code, message=message),
            usage=usage or TokenUsage(),
        )

    @classmethod
    def no_answer(
        cls, scope: TurnScope, *, steps: int, usage: TokenUsage, restart_reason: str | None
    ) -> TurnResult:
        """The model answered nothing, even when asked again (``E_MODEL_EMPTY_OUTPUT``); the
        text is the notice the conversation got in place of an answer."""
        error = TurnError(code=DeliveryCode.E_MODEL_EMPTY_OUTPUT, message=EMPTY_OUTPUT_NOTICE)
        return cls._ended(
            scope,
            "error",
            EMPTY_OUTPUT_NOTICE,
            "error",
            steps=steps,
            usage=usage,
            reason=restart_reason,
            error=error,
        )

    @classmethod
    def out_of_steps(
        cls,
        scope: TurnScope,
        *,
        max_steps: int,
        text: str,
        usage: TokenUsage,
        restart_reason: str | None,
        as_error: bool = True,
    ) -> TurnResult:
        """``max_steps`` Steps ran without an answer; ``text`` is the last text the model
        produced, if any, else the notice is the answer. ``as_error``: the Turn fails with
        ``E_MAX_STEPS`` (``onMaxSteps: error``) instead of answering."""
        notice = MAX_STEPS_NOTICE.format(max_steps)
        return cls._ended(
            scope,
            "error" if as_error else "ok",
            text or notice,
            "max_steps",
            steps=max_steps,
            usage=usage,
            reason=restart_reason,
            error=TurnError(code=DeliveryCode.E_MAX_STEPS, message=notice) if as_error else None,
        )

    @classmethod
    def _ended(
        cls,
        scope: TurnScope,
        status: Literal["ok", "error"],
        text: str,
        finish_reason: FinishReason,
        *,
        steps: int,
        usage: TokenUsage,
        reason: str | None,
        error: TurnError | None = None,
    ) -> TurnResult:
        """A Turn that ran in ``scope`` and ended now; ``reason``: the restart a tool asked."""
        return cls(
            turn_id=scope.turn_id,
            trace_id=scope.trace_id,
            status=status,
            text=text,
            finish_reason=finish_reason,
            step_count=steps,
            duration_ms=scope.elapsed_ms(),
            error=error,
            usage=usage,
            restart_reason=reason,
        )

    @classmethod
    def cancelled(
        cls, origin: TurnScope | TurnInput, reason: str, *, steps: int, usage: TokenUsage
    ) -> TurnResult:
        """The Turn's request was cancelled (``CANCELLED``); it stopped at a safe point after
        ``steps`` Steps (``origin`` is only the input when it was cancelled before it began)."""
        failed = cls.failed(
            origin, DeliveryCode.CANCELLED, f"cancelled: {reason}", steps=steps, usage=usage
        )
        return dataclasses.replace(failed, finish_reason="cancelled")

    def to_json(self) -> JsonObject:
        """The wire form (a ``delegate_result`` payload carries it)."""
        out: JsonObject = {
            "turnId": self.turn_id,
            "traceId": self.trace_id,
            "status": self.status,
            "output": self.text,
            "finishReason": self.finish_reason,
            "stepCount": self.step_count,
            "durationMs": round(self.duration_ms, 3),
            "tokenUsage": self.usage.to_json(),
        }
        if self.error is not None:
            out["error"] = self.error.to_json()
        return out
