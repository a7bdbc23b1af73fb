"""One Turn: the user's (or a caller agent's) input, then Steps until the model answers in text.

A Turn ends when a Step makes no tool call (its text is the answer), when the model fails
(``ModelError``: the Turn fails with its code, the agent stays up), or when
``maxStepsPerTurn`` Steps ran without an answer (``E_MAX_STEPS``: a clear error, never a hang).
The conversation is folded to disk when the Turn ends, whatever the outcome.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from agent_process.conversation import ConversationStorageError, ConversationStore, MessageEvent
from agent_process.events import EventRecorder, EventSink, new_span_id
from agent_process.models.base import ModelError, TokenUsage
from agent_process.step import StepResult, StepSettings, new_message_id, run_step, utc_now
from agent_process.tools.executor import ToolCallScope
from agent_process.tools.middleware import MiddlewareContext
from tools_base import (
    AgentToolRuntime,
    JsonObject,
    JsonValue,
    Message,
    MessageSource,
    ToolCallResult,
    ToolErrorInfo,
)

DEFAULT_MAX_STEPS_PER_TURN = 32

FinishReason = Literal["text_response", "max_steps", "error"]

MAX_EMPTY_OUTPUT_RETRIES = 2
"""Empty model answers (no text, no tool call) asked again before the Turn gives up."""
EMPTY_OUTPUT_CORRECTION = (
    "Your last answer was empty. Reply with text for the user, or call one of the tools."
)
EMPTY_OUTPUT_NOTICE = "The model did not produce a response."


def new_trace_id() -> str:
    """A 32-hex trace id (W3C trace-context size)."""
    return secrets.token_hex(16)


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
    """The outcome of one Turn."""

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


class TurnMiddlewareContext(MiddlewareContext[TurnResult]):
    """Context of a ``turn`` middleware."""

    __slots__ = (
        "agent_name",
        "input",
        "instance_key",
        "metadata",
        "runtime",
        "store",
        "trace_id",
        "turn_id",
    )

    def __init__(
        self,
        chain: Any,
        core: Any,
        *,
        turn_input: TurnInput,
        store: ConversationStore,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        runtime: AgentToolRuntime | None = None,
    ) -> None:
        super().__init__(chain, core)
        self.input = turn_input
        """What started the Turn; its user message is already in ``messages``."""
        self.runtime = runtime
        """The ``agents`` runtime of this Turn (request, send, ...)."""
        self.store = store
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = turn_input.trace_id
        self.metadata: dict[str, JsonValue] = {}
        """Scratch space of the Turn, shared with every Step's ``turn_metadata``."""

    @property
    def messages(self) -> list[Message]:
        """The conversation as it stands."""
        return self.store.messages

    def emit_message_event(self, event: MessageEvent) -> None:
        """Change the conversation (append, replace, remove, truncate); persisted at once."""
        self.store.emit(event)


RuntimeFactory = Callable[[str, TurnInput], AgentToolRuntime | None]
"""``(instance_key, turn_input) -> ctx.runtime`` for the tools of that Turn."""

InboxDrain = Callable[[str], list[Message]]
"""``instance_key -> messages`` that arrived for the instance since the last Step (async
inter-agent answers, completions of pending tool calls); appended before the next Step."""


class TurnRunner:
    """Runs Turns of one agent; one runner serves every instance of the agent."""

    def __init__(
        self,
        settings: StepSettings,
        *,
        max_steps: int = DEFAULT_MAX_STEPS_PER_TURN,
        runtime_factory: RuntimeFactory | None = None,
        inbox: InboxDrain | None = None,
        events: EventSink | None = None,
        logger: Any = None,
    ) -> None:
        self.settings = settings
        self.max_steps = max_steps
        self._runtime_factory = runtime_factory
        self._inbox = inbox
        self._events = events
        self._log = logger if logger is not None else structlog.get_logger("goondan.turn")

    async def run(
        self, instance_key: str, store: ConversationStore, workdir: Path, turn_input: TurnInput
    ) -> TurnResult:
        """Run one Turn of ``instance_key``; never raises for model or tool failures."""
        turn_id = f"turn-{secrets.token_hex(6)}"
        log = self._log.bind(
            agent=self.settings.agent_name,
            instance_key=instance_key,
            trace_id=turn_input.trace_id,
            turn_id=turn_id,
        )
        started = time.perf_counter()
        recorder = EventRecorder(
            self._events,
            agent_name=self.settings.agent_name,
            instance_key=instance_key,
            trace_id=turn_input.trace_id,
        )
        turn_span = new_span_id()
        recorder.emit("turn.started", turn_span, turn_input.parent_span_id, turnId=turn_id)
        self._ensure_system_prompt(store)
        _close_interrupted_calls(store)
        store.append(
            Message(
                id=new_message_id("msg"),
                role="user",
                content=turn_input.text,
                created_at=utc_now(),
                source=MessageSource(type="user"),
                metadata={
                    "__goondanInbound": {
                        "sourceKind": turn_input.source_kind,
                        "sourceName": turn_input.source_name,
                        "eventType": turn_input.event_type,
                        "traceId": turn_input.trace_id,
                    }
                },
            )
        )
        runtime = self._runtime_factory(instance_key, turn_input) if self._runtime_factory else None

        async def core(ctx: TurnMiddlewareContext) -> TurnResult:
            return await self._steps(
                instance_key,
                store,
                workdir,
                turn_input,
                turn_id,
                runtime,
                log,
                started,
                recorder,
                turn_span,
                ctx.metadata,
            )

        ctx = TurnMiddlewareContext(
            self.settings.pipeline.chain("turn"),
            core,
            turn_input=turn_input,
            store=store,
            agent_name=self.settings.agent_name,
            instance_key=instance_key,
            turn_id=turn_id,
            runtime=runtime,
        )
        try:
            result = await ctx.next()
        except ConversationStorageError as exc:  # the disk is full or read-only
            log.error("turn failed: conversation not written", error=str(exc))
            result = self._failure(turn_id, turn_input, started, 0, exc.code, str(exc))
        except Exception as exc:  # a turn/step middleware bug must not take the agent down
            log.exception("turn failed")
            result = self._failure(
                turn_id, turn_input, started, 0, "E_TURN", f"{type(exc).__name__}: {exc}"
            )
        finally:
            _fold(store, log)
        duration = round(result.duration_ms, 3)
        if result.status == "ok":
            recorder.emit(
                "turn.completed",
                turn_span,
                turn_input.parent_span_id,
                turnId=turn_id,
                stepCount=result.step_count,
                duration=duration,
                tokenUsage=result.usage.to_json(),
            )
        else:
            recorder.emit(
                "turn.failed",
                turn_span,
                turn_input.parent_span_id,
                turnId=turn_id,
                stepCount=result.step_count,
                duration=duration,
                errorCode=result.error.code if result.error else None,
                errorMessage=result.error.message if result.error else None,
            )
        log.info(
            "turn finished",
            status=result.status,
            finish_reason=result.finish_reason,
            steps=result.step_count,
            duration_ms=round(result.duration_ms, 2),
        )
        return result

    async def _steps(
        self,
        instance_key: str,
        store: ConversationStore,
        workdir: Path,
        turn_input: TurnInput,
        turn_id: str,
        runtime: AgentToolRuntime | None,
        log: Any,
        started: float,
        recorder: EventRecorder,
        turn_span: str,
        turn_metadata: dict[str, JsonValue],
    ) -> TurnResult:
        usage = TokenUsage()
        last_text = ""
        restart: str | None = None
        empty_retries = 0
        after_tools = False  # the previous Step ran tools: this one answers their results
        for step_index in range(self.max_steps):
            if self._inbox is not None:
                for message in self._inbox(instance_key):
                    store.append(message)
            scope = ToolCallScope(
                agent_name=self.settings.agent_name,
                instance_key=instance_key,
                turn_id=turn_id,
                trace_id=turn_input.trace_id,
                step_index=step_index,
                workdir=workdir,
                logger=log,
                catalog=frozenset(),  # the Step fills in its own final catalog
                runtime=runtime,
            )
            step_span = new_span_id()
            step_id = f"{turn_id}-step-{step_index}"
            step_fields = {"stepId": step_id, "stepIndex": step_index, "turnId": turn_id}
            recorder.emit("step.started", step_span, turn_span, **step_fields)
            step_started = time.perf_counter()
            try:
                step: StepResult = await run_step(
                    self.settings, store, scope, recorder, step_span, turn_metadata
                )
            except ModelError as exc:
                recorder.emit(
                    "step.failed",
                    step_span,
                    turn_span,
                    **step_fields,
                    duration=round((time.perf_counter() - step_started) * 1000, 3),
                    errorCode=exc.code,
                    errorMessage=str(exc),
                )
                return self._failure(
                    turn_id, turn_input, started, step_index + 1, exc.code, str(exc), usage
                )
            recorder.emit(
                "step.completed",
                step_span,
                turn_span,
                **step_fields,
                toolCallCount=len(step.tool_calls),
                duration=round(step.duration_ms, 3),
                tokenUsage=step.usage.to_json() if step.usage else None,
            )
            if step.usage is not None:
                usage = TokenUsage(
                    prompt_tokens=usage.prompt_tokens + step.usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens + step.usage.completion_tokens,
                )
            if step.text:
                last_text = step.text
            restart = restart or _restart_reason(step)
            # An empty answer right after tool results just ends the Turn (upstream §5.8).
            empty = not step.text and not step.tool_calls and not step.should_continue
            empty_unprompted = empty and not after_tools
            if empty_unprompted and empty_retries < MAX_EMPTY_OUTPUT_RETRIES:
                # Providers answer nothing now and then; say so and ask again (upstream §5.8).
                empty_retries += 1
                log.warning("empty model answer; asking again", retry=empty_retries)
                store.append(_corrective_message())
                continue
            after_tools = bool(step.tool_calls)
            if not step.should_continue:
                failed = empty_unprompted and not last_text
                if not last_text:
                    last_text = EMPTY_OUTPUT_NOTICE
                    store.append(_notice_message(last_text, step_id))
                return TurnResult(
                    turn_id=turn_id,
                    trace_id=turn_input.trace_id,
                    status="error" if failed else "ok",
                    text=last_text,
                    finish_reason="error" if failed else "text_response",
                    step_count=step_index + 1,
                    duration_ms=(time.perf_counter() - started) * 1000,
                    error=TurnError(code="E_MODEL_EMPTY_OUTPUT", message=last_text)
                    if failed
                    else None,
                    usage=usage,
                    restart_reason=restart,
                )
        notice = f"Turn stopped: reached maxStepsPerTurn ({self.max_steps}) without a final answer."
        return TurnResult(
            turn_id=turn_id,
            trace_id=turn_input.trace_id,
            status="error",
            text=last_text or notice,
            finish_reason="max_steps",
            step_count=self.max_steps,
            duration_ms=(time.perf_counter() - started) * 1000,
            error=TurnError(code="E_MAX_STEPS", message=notice),
            usage=usage,
            restart_reason=restart,
        )

    def _failure(
        self,
        turn_id: str,
        turn_input: TurnInput,
        started: float,
        steps: int,
        code: str,
        message: str,
        usage: TokenUsage | None = None,
    ) -> TurnResult:
        return TurnResult(
            turn_id=turn_id,
            trace_id=turn_input.trace_id,
            status="error",
            text="",
            finish_reason="error",
            step_count=steps,
            duration_ms=(time.perf_counter() - started) * 1000,
            error=TurnError(code=code, message=message),
            usage=usage or TokenUsage(),
        )

    def _ensure_system_prompt(self, store: ConversationStore) -> None:
        """Keep the agent's system prompt as the first message, persisted like any other."""
        prompt = self.settings.system_prompt
        if not prompt:
            return
        messages = store.messages
        first = messages[0] if messages else None
        if first is not None and first.role == "system" and first.source.type == "system":
            if first.content != prompt:
                store.emit(MessageEvent.replace(first.id, _system_message(prompt)))
            return
        system = _system_message(prompt)
        if messages:
            # Rebuild so the prompt stays first: the store has no insert event.
            store.emit(MessageEvent.truncate())
            for message in [system, *messages]:
                store.append(message)
        else:
            store.append(system)


def _corrective_message() -> Message:
    return Message(
        id=new_message_id("msg"),
        role="user",
        content=EMPTY_OUTPUT_CORRECTION,
        created_at=utc_now(),
        source=MessageSource(type="system"),
        metadata={"__goondanCorrection": "empty_output"},
    )


def _notice_message(text: str, step_id: str) -> Message:
    return Message(
        id=new_message_id("msg"),
        role="assistant",
        content=text,
        created_at=utc_now(),
        source=MessageSource(type="assistant", step_id=step_id),
        metadata={"__goondanNotice": "empty_output"},
    )


def _fold(store: ConversationStore, log: Any) -> None:
    try:
        store.fold()
    except ConversationStorageError as exc:
        # Every event of the Turn is in events.jsonl already: the answer stands, and the next
        # Turn's end folds again.
        log.warning("conversation not folded; kept as events", error=str(exc))


def _close_interrupted_calls(store: ConversationStore) -> None:
    """Answer tool calls a killed process never finished, so the conversation stays valid.

    Providers refuse an assistant tool call without its result; after a crash between two tool
    calls, the unfinished ones get an error result saying so (``E_TOOL_INTERRUPTED``).
    """
    answered = {m.source.tool_call_id for m in store.messages if m.role == "tool"}
    for message in store.messages:
        for call in message.tool_calls:
            if call.id in answered:
                continue
            result = ToolCallResult(
                tool_call_id=call.id,
                tool_name=call.name,
                status="error",
                error=ToolErrorInfo(
                    message="The agent process stopped before this call finished; it may or may not have run.",
                    name="ToolInterruptedError",
                    code="E_TOOL_INTERRUPTED",
                    suggestion="Check whether its effect happened before calling it again.",
                ),
            )
            store.append(
                Message(
                    id=new_message_id("msg"),
                    role="tool",
                    tool_result=result.to_json(),
                    created_at=utc_now(),
                    source=MessageSource(type="tool", tool_call_id=call.id, tool_name=call.name),
                )
            )


def _restart_reason(step: StepResult) -> str | None:
    """The reason of the first ok tool output that asks for a restart (upstream §5.10)."""
    for result in step.tool_results:
        output = result.output
        if (
            result.status == "ok"
            and isinstance(output, dict)
            and any(
                output.get(flag) is True
                for flag in ("restartRequested", "runtimeRestart", "__goondanRestart")
            )
        ):
            return str(output.get("restartReason") or "tool:restart-signal")
    return None


def _system_message(prompt: str) -> Message:
    return Message(
        id=new_message_id("sys"),
        role="system",
        content=prompt,
        created_at=utc_now(),
        source=MessageSource(type="system"),
    )
