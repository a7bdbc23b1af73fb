"""One Turn: the user's (or a caller agent's) input, then Steps until the model answers in text.

A Turn ends when a Step makes no tool call (its text is the answer), when the model fails
(``ModelCallError``: the Turn fails with its code, the agent stays up), or when
``maxStepsPerTurn`` Steps ran without an answer: never a hang; by ``policy.onMaxSteps`` its
answer is the last text (``finishReason: max_steps``), or it fails with ``E_MAX_STEPS``.
The conversation is folded to disk when the Turn ends, whatever the outcome.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agent_process import turn_messages
from agent_process.approvals import ApprovalSuspended
from agent_process.conversation import (
    ConversationStorageError,
    ConversationStore,
    MessageEvent,
)
from agent_process.events import EventSink, capped
from agent_process.models.base import ModelCallError, TokenUsage
from agent_process.scope import Cancellation, StepScope, TextSink, TurnCancelled, TurnScope
from agent_process.step import (
    StepResult,
    StepSettings,
    resume_calls,
    run_step,
)

# The Turn's values, importable from here as from their own module.
from agent_process.turn_context import TurnMiddlewareContext as TurnMiddlewareContext
from agent_process.turn_resume import (
    RecordedTurn,
    find_turn,
    gave_up,
    mark_attempt,
    move_to_end,
    recorded_result,
    resumed_event,
)
from agent_process.turn_types import EMPTY_OUTPUT_NOTICE, MAX_STEPS_NOTICE
from agent_process.turn_types import FinishReason as FinishReason
from agent_process.turn_types import TurnError as TurnError
from agent_process.turn_types import TurnInput as TurnInput
from agent_process.turn_types import TurnResult as TurnResult
from goondan.defaults import MAX_STEPS_PER_TURN, MAX_TURN_ATTEMPTS, ON_MAX_STEPS
from goondan.errors import DeliveryCode
from goondan.usage import Usage
from ipc.runtime_events import (
    UNSET,
    StepCompletedEvent,
    StepFailedEvent,
    StepStartedEvent,
    TurnCancellingEvent,
    TurnCompletedEvent,
    TurnEvent,
    TurnFailedEvent,
    TurnStartedEvent,
)
from tools_base import (
    AgentToolRuntime,
    JsonValue,
    Message,
)
from tools_base._pinned import PinnedDir

DEFAULT_MAX_STEPS_PER_TURN = MAX_STEPS_PER_TURN

CANCELLED_TRACES_KEPT = 1024
"""Cancelled trace ids an agent remembers, so their queued Turns end when they come up."""
MAX_EMPTY_OUTPUT_RETRIES = 2
"""Empty model answers (no text, no tool call) asked again before the Turn gives up."""


RuntimeFactory = Callable[[str, TurnInput], AgentToolRuntime | None]
"""``(instance_key, turn_input) -> ctx.runtime`` for the tools of that Turn."""

TextSinkFactory = Callable[[str, str, TurnInput], TextSink | None]
"""``(instance_key, turn_id, turn_input) -> where the Turn's model text streams``, or ``None``
when its caller does not stream."""

InboxDrain = Callable[[str], list[Message]]
"""``instance_key -> messages`` that arrived for the instance since the last Step (async
inter-agent answers, completions of pending tool calls); appended before the next Step."""


@dataclass(slots=True)
class _Progress:
    """What the Steps of one Turn have added up to so far."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    last_text: str = ""
    """The last non-empty text of a Step: the answer if the Turn ends without one."""
    restart: str | None = None
    empty_retries: int = 0
    after_tools: bool = False
    """The previous Step ran tools, so this one answers their results."""

    def add(self, step: StepResult) -> None:
        if step.usage is not None:
            self.usage = self.usage + step.usage
        if step.text:
            self.last_text = step.text
        self.restart = self.restart or _restart_reason(step)


class TurnRunner:
    """Runs Turns of one agent; one runner serves every instance of the agent."""

    def __init__(
        self,
        settings: StepSettings,
        *,
        max_steps: int = DEFAULT_MAX_STEPS_PER_TURN,
        on_max_steps: str = ON_MAX_STEPS,
        runtime_factory: RuntimeFactory | None = None,
        inbox: InboxDrain | None = None,
        events: EventSink | None = None,
        logger: Any = None,
        text_sinks: TextSinkFactory | None = None,
        max_turn_attempts: int = MAX_TURN_ATTEMPTS,
    ) -> None:
        self.settings = settings
        self.max_turn_attempts = max_turn_attempts
        """Attempts that may run one Turn (``policy.crash.maxTurnAttempts``)."""
        self._text_sinks = text_sinks
        self.max_steps = max_steps
        self.steps_exhausted_fail = on_max_steps == "error"
        self._runtime_factory = runtime_factory
        self._inbox = inbox
        self._events = events
        self._log = logger if logger is not None else structlog.get_logger("goondan.turn")
        self._running: dict[str, list[TurnScope]] = {}
        """The Turns under way, by trace id."""
        self._cancelled: OrderedDict[str, str] = OrderedDict()
        """Recently cancelled traces and why: a Turn of one that starts later (it was queued)
        ends at once."""

    def cancel(self, trace_id: str, reason: str) -> int:
        """Stop the Turns of ``trace_id`` at their next safe point, the running ones and those
        still queued. Returns how many were running."""
        self._cancelled[trace_id] = reason
        self._cancelled.move_to_end(trace_id)
        while len(self._cancelled) > CANCELLED_TRACES_KEPT:
            self._cancelled.popitem(last=False)
        running = self._running.get(trace_id, [])
        for scope in running:
            scope.logger.info("turn cancelled", reason=reason)
            scope.cancellation.request(reason)
            # Said at once, so operators (and tests) know the agent heard it before the
            # Turn reaches its safe point.
            scope.recorder.emit(
                TurnCancellingEvent(turn_id=scope.turn_id, reason=reason),
                scope.span_id,
                scope.parent_span_id,
            )
        return len(running)

    def interrupting(self, cancellation: Cancellation) -> bool:
        """Say (a ``turn.cancelling`` event) that the running Turn holding ``cancellation`` was
        interrupted and will stop at its next Step boundary; ``False`` when none runs."""
        for scopes in self._running.values():
            for scope in scopes:
                if scope.cancellation is cancellation and cancellation.boundary is not None:
                    scope.logger.info("turn interrupted", reason=cancellation.boundary)
                    scope.recorder.emit(
                        TurnCancellingEvent(turn_id=scope.turn_id, reason=cancellation.boundary),
                        scope.span_id,
                        scope.parent_span_id,
                    )
                    return True
        return False

    async def run(
        self,
        instance_key: str,
        store: ConversationStore,
        workdir: Path,
        turn_input: TurnInput,
        *,
        usage: Usage | None = None,
        workdir_pin: PinnedDir | None = None,
        cancellation: Cancellation | None = None,
    ) -> TurnResult:
        """Run one Turn of ``instance_key``; never raises for model or tool failures.

        ``usage`` is the instance's lasting tally: the Turn's model calls add to it.
        ``workdir_pin`` is ``workdir`` opened once, which the tools work through.
        ``cancellation`` is the Turn's own, when its instance may stop it (see
        :mod:`agent_process.instance_policy`).
        """
        reason = self._cancelled.get(turn_input.trace_id)
        if reason is not None:  # cancelled while it waited in the queue: nothing was done
            return TurnResult.cancelled(turn_input, reason, steps=0, usage=TokenUsage())
        scope = self._scope(
            instance_key, workdir, turn_input, usage or Usage(), workdir_pin, cancellation
        )
        running = self._running.setdefault(scope.trace_id, [])
        running.append(scope)
        try:
            return await self._run(scope, store, turn_input)
        finally:
            running.remove(scope)
            if not running:
                del self._running[scope.trace_id]

    async def _run(
        self, scope: TurnScope, store: ConversationStore, turn_input: TurnInput
    ) -> TurnResult:
        scope.recorder.emit(
            TurnStartedEvent(turn_id=scope.turn_id), scope.span_id, scope.parent_span_id
        )
        recorded = (
            find_turn(store.messages, turn_input.request_id) if turn_input.may_resume else None
        )
        if recorded is not None:
            ended = self._ended_already(scope, turn_input, recorded)
            if ended is not None:
                return ended
        turn_input = self._begin(scope, store, turn_input, recorded)
        ctx = TurnMiddlewareContext(
            self.settings.pipeline.chain("turn"),
            self._core,
            scope=scope,
            turn_input=turn_input,
            store=store,
        )
        try:
            result = await ctx.next()
        except ApprovalSuspended as exc:  # the agent stops; the call stays parked on disk
            scope.logger.info("turn suspended while waiting for approval", error=str(exc))
            result = TurnResult.failed(scope, DeliveryCode.SHUTTING_DOWN, str(exc))
        except TurnCancelled as cancelled:  # raised by a middleware's own safe point
            result = TurnResult.cancelled(scope, str(cancelled), steps=0, usage=TokenUsage())
        except ConversationStorageError as exc:  # the disk is full or read-only
            scope.logger.error("turn failed: conversation not written", error=str(exc))
            result = TurnResult.failed(scope, exc.code, str(exc))
        except Exception as exc:  # a turn/step middleware bug must not take the agent down
            scope.logger.exception("turn failed")
            result = TurnResult.failed(scope, DeliveryCode.E_TURN, f"{type(exc).__name__}: {exc}")
        finally:
            _fold(store, scope.logger)
        gate = self.settings.approvals
        parked = gate is not None and gate.turn_done(scope.turn_id)
        _report(scope, result, with_output=parked or turn_input.resume)
        return result

    def _ended_already(
        self, scope: TurnScope, turn_input: TurnInput, recorded: RecordedTurn
    ) -> TurnResult | None:
        """The answer of a request whose Turn is not to run (again): it had ended (its
        recorded answer, given again without a model call), or killed its agent too often
        (``AGENT_CRASHED``)."""
        limit = self.max_turn_attempts
        if recorded.answer is not None:
            event = resumed_event(scope, turn_input, recorded, replayed=True)
            scope.recorder.emit(event, scope.span_id, scope.parent_span_id)
            steps_error = self.steps_exhausted_fail
            result = recorded_result(
                scope, recorded.answer, max_steps=self.max_steps, as_error=steps_error
            )
        elif recorded.runs >= limit:
            reason = gave_up(scope.agent_name, recorded.runs, limit)
            result = TurnResult.failed(scope, DeliveryCode.AGENT_CRASHED, reason)
        else:
            return None
        _report(scope, result, with_output=recorded.answer is not None)
        return result

    def _begin(
        self,
        scope: TurnScope,
        store: ConversationStore,
        turn_input: TurnInput,
        recorded: RecordedTurn | None,
    ) -> TurnInput:
        """Ready the conversation for the Turn: the system prompt, the calls a dead process
        left open, then the Turn's user message, or the recorded Turn taken up (returned:
        the input the Turn runs with)."""
        self._ensure_system_prompt(store)
        gate = self.settings.approvals
        awaiting = gate.open_call_ids(scope.instance_key) if gate else set()
        if recorded is not None and not recorded.last:  # other Turns ran while it was down
            # Their dead calls are closed where they are first: after the move, a result
            # appended at the end would follow this Turn's messages, not their call.
            own = {call.id for message in recorded.messages for call in message.tool_calls}
            turn_messages.close_interrupted_calls(store, awaiting | own)
            recorded = move_to_end(store, recorded)
        if recorded is not None:
            awaiting |= self._take_up(scope, store, turn_input, recorded, awaiting)
            turn_input = dataclasses.replace(turn_input, resume=True)
        turn_messages.close_interrupted_calls(store, awaiting)
        if not turn_input.resume:
            store.append(turn_messages.user_message(turn_input, scope.turn_id, scope.span_id))
        return turn_input

    def _take_up(
        self,
        scope: TurnScope,
        store: ConversationStore,
        turn_input: TurnInput,
        recorded: RecordedTurn,
        parked: set[str],
    ) -> set[str]:
        """Go on with the Turn ``recorded`` (interrupted by a crash): answer the calls that
        must not run again ``E_TOOL_INTERRUPTED`` and say so (``turn.resumed``). Returns the
        ids of the calls left for the resumed Turn to run."""
        closed = recorded.interrupted_calls(
            rerun=self.settings.idempotent_tools,
            parked=parked,
            sequential=not self.settings.parallel_tool_calls,
        )
        for call in closed:
            store.append(turn_messages.interrupted_message(call))
        event = resumed_event(scope, turn_input, recorded, replayed=False)
        scope.recorder.emit(event, scope.span_id, scope.parent_span_id)
        attempt = recorded.attempt(turn_input.attempt)
        scope.logger.info("turn resumed", attempt=attempt, interrupted_calls=len(closed))
        mark_attempt(store, recorded, scope.turn_id, scope.span_id, attempt)
        own = {call.id for message in recorded.messages for call in message.tool_calls}
        return {call.id for call in store.unanswered_calls() if call.id in own}

    def _scope(
        self,
        instance_key: str,
        workdir: Path,
        turn_input: TurnInput,
        usage: Usage,
        workdir_pin: PinnedDir | None = None,
        cancellation: Cancellation | None = None,
    ) -> TurnScope:
        turn_id = f"turn-{secrets.token_hex(6)}"
        agent_name = self.settings.agent_name
        factory = self._runtime_factory
        return TurnScope(
            agent_name=agent_name,
            instance_key=instance_key,
            turn_id=turn_id,
            trace_id=turn_input.trace_id,
            workdir=workdir,
            workdir_pin=workdir_pin,
            logger=self._log.bind(
                agent=agent_name,
                instance_key=instance_key,
                trace_id=turn_input.trace_id,
                turn_id=turn_id,
            ),
            runtime=factory(instance_key, turn_input) if factory is not None else None,
            events=self._events,
            parent_span_id=turn_input.parent_span_id,
            text_sink=(
                self._text_sinks(instance_key, turn_id, turn_input)
                if self._text_sinks is not None and turn_input.stream_id
                else None
            ),
            inbound=turn_messages.inbound_properties(turn_input),
            instance_usage=usage,
            cancellation=cancellation or Cancellation(),
        )

    async def _core(self, ctx: TurnMiddlewareContext) -> TurnResult:
        return await self._steps(ctx.scope, ctx.store, ctx.metadata, resume=ctx.input.resume)

    async def _steps(
        self,
        scope: TurnScope,
        store: ConversationStore,
        turn_metadata: dict[str, JsonValue],
        *,
        resume: bool = False,
    ) -> TurnResult:
        progress = _Progress()
        first = 0
        if resume:
            # The calls left open (run again, or parked, and those after them) finish as
            # Step 0, then the model answers their results.
            await self._resumed_calls(StepScope(turn=scope, index=0), store)
            progress.after_tools = True
            first = 1
        for step_index in range(first, self.max_steps):
            if self._inbox is not None:
                for message in self._inbox(scope.instance_key):
                    store.append(message)
            step_scope = StepScope(turn=scope, index=step_index)
            try:
                scope.cancellation.check()  # the safe point between Steps
                step = await self._step(step_scope, store, turn_metadata)
            except ModelCallError as exc:
                return TurnResult.failed(
                    scope, exc.code, str(exc), steps=step_index + 1, usage=progress.usage
                )
            except TurnCancelled as cancelled:
                return TurnResult.cancelled(
                    scope, str(cancelled), steps=step_index, usage=progress.usage
                )
            progress.add(step)
            # An empty answer right after tool results just ends the Turn.
            empty = not step.text and not step.tool_calls and not step.should_continue
            empty_unprompted = empty and not progress.after_tools
            if empty_unprompted and progress.empty_retries < MAX_EMPTY_OUTPUT_RETRIES:
                # Providers answer nothing now and then; say so and ask again.
                progress.empty_retries += 1
                scope.logger.warning(
                    "empty model answer; asking again", retry=progress.empty_retries
                )
                store.append(turn_messages.corrective_message())
                continue
            progress.after_tools = bool(step.tool_calls)
            if not step.should_continue:
                return _final(step_scope, store, progress, empty=empty_unprompted)
        if not progress.last_text:  # the conversation shows why the Turn has no answer
            notice = MAX_STEPS_NOTICE.format(self.max_steps)
            store.append(
                turn_messages.notice_message(notice, f"{scope.turn_id}-step-limit", "max_steps")
            )
        return TurnResult.out_of_steps(
            scope,
            max_steps=self.max_steps,
            text=progress.last_text,
            usage=progress.usage,
            restart_reason=progress.restart,
            as_error=self.steps_exhausted_fail,
        )

    async def _step(
        self, scope: StepScope, store: ConversationStore, turn_metadata: dict[str, JsonValue]
    ) -> StepResult:
        """One Step inside its span: ``step.started``, then ``step.completed`` or, when the
        model fails (:class:`ModelCallError`, re-raised), ``step.failed``."""
        recorder, parent = scope.turn.recorder, scope.turn.span_id
        step_id, index, turn_id = scope.id, scope.index, scope.turn.turn_id
        recorder.emit(
            StepStartedEvent(step_id=step_id, step_index=index, turn_id=turn_id),
            scope.span_id,
            parent,
        )
        started = time.perf_counter()
        try:
            step = await run_step(self.settings, store, scope, turn_metadata)
        except (ModelCallError, TurnCancelled) as exc:
            failed = StepFailedEvent(
                step_id=step_id,
                step_index=index,
                turn_id=turn_id,
                duration=round((time.perf_counter() - started) * 1000, 3),
                error_code=exc.code if isinstance(exc, ModelCallError) else DeliveryCode.CANCELLED,
                error_message=str(exc),
            )
            recorder.emit(failed, scope.span_id, parent)
            raise
        completed = StepCompletedEvent(
            step_id=step_id,
            step_index=index,
            turn_id=turn_id,
            tool_call_count=len(step.tool_calls),
            duration=round(step.duration_ms, 3),
            token_usage=step.usage.counts() if step.usage else None,
        )
        recorder.emit(completed, scope.span_id, parent)
        return step

    async def _resumed_calls(self, scope: StepScope, store: ConversationStore) -> None:
        """A resumed Turn's Step 0: the calls it left open run in a span of their own (no
        model call), so their spans have the parent they name."""
        if not store.has_unanswered_calls:
            return
        recorder, parent = scope.turn.recorder, scope.turn.span_id
        step_id, turn_id = scope.id, scope.turn.turn_id
        started_event = StepStartedEvent(step_id=step_id, step_index=scope.index, turn_id=turn_id)
        recorder.emit(started_event, scope.span_id, parent)
        started = time.perf_counter()
        await resume_calls(self.settings, store, scope)
        duration = round((time.perf_counter() - started) * 1000, 3)
        completed = StepCompletedEvent(
            step_id=step_id, step_index=scope.index, turn_id=turn_id, duration=duration
        )
        recorder.emit(completed, scope.span_id, parent)

    def _ensure_system_prompt(self, store: ConversationStore) -> None:
        """Keep the agent's system prompt as the first message, persisted like any other."""
        prompt = self.settings.system_prompt
        if not prompt:
            return
        messages = store.messages
        first = messages[0] if messages else None
        if first is not None and first.role == "system" and first.source.type == "system":
            if first.content != prompt:
                store.emit(MessageEvent.replace(first.id, turn_messages.system_message(prompt)))
            return
        system = turn_messages.system_message(prompt)
        if messages:
            # Rebuild so the prompt stays first: the store has no insert event.
            store.emit(MessageEvent.truncate())
            for message in [system, *messages]:
                store.append(message)
        else:
            store.append(system)


def _final(
    scope: StepScope, store: ConversationStore, progress: _Progress, *, empty: bool
) -> TurnResult:
    """The result of a Turn whose last Step asked for nothing more.

    ``empty``: that Step answered nothing, unprompted, after its retries; the Turn fails
    unless an earlier Step produced text. Without any text the conversation gets a notice in
    place of an answer.
    """
    failed = empty and not progress.last_text
    text = progress.last_text
    if not text:
        text = EMPTY_OUTPUT_NOTICE
        store.append(turn_messages.notice_message(text, scope.id))
    steps = scope.index + 1
    if failed:
        return TurnResult.no_answer(
            scope.turn, steps=steps, usage=progress.usage, restart_reason=progress.restart
        )
    return TurnResult.answered(
        scope.turn, text, steps=steps, usage=progress.usage, restart_reason=progress.restart
    )


def _report(scope: TurnScope, result: TurnResult, *, with_output: bool = False) -> None:
    """``turn.completed`` or ``turn.failed``, and the log line that ends every Turn.

    ``with_output``: the event carries the answer too (capped), for a Turn that waited for an
    approval, whose caller may have given up, or that has no caller at all (resumed).
    """
    duration = round(result.duration_ms, 3)
    output = capped(result.text) if with_output else UNSET
    ended: TurnEvent
    if result.status == "ok":
        ended = TurnCompletedEvent(
            turn_id=scope.turn_id,
            step_count=result.step_count,
            duration=duration,
            output=output,
            token_usage=result.usage.counts(),
        )
    else:
        ended = TurnFailedEvent(
            turn_id=scope.turn_id,
            step_count=result.step_count,
            duration=duration,
            output=output,
            error_code=result.error.code if result.error else None,
            error_message=result.error.message if result.error else None,
        )
    scope.recorder.emit(ended, scope.span_id, scope.parent_span_id)
    scope.logger.info(
        "turn finished",
        status=result.status,
        finish_reason=result.finish_reason,
        steps=result.step_count,
        duration_ms=round(result.duration_ms, 2),
    )


def _fold(store: ConversationStore, log: Any) -> None:
    try:
        store.fold()
    except ConversationStorageError as exc:
        # Every event of the Turn is in events.jsonl already: the answer stands, and the next
        # Turn's end folds again.
        log.warning("conversation not folded; kept as events", error=str(exc))


RESTART_FLAG = "restartRequested"
"""A tool output with this key ``true`` (the ``self-restart`` tool's) restarts the agent after the
Turn; ``restartReason`` says why."""


def _restart_reason(step: StepResult) -> str | None:
    """The reason of the first ok tool output that asks for a restart."""
    for result in step.tool_results:
        output = result.output
        if result.status == "ok" and isinstance(output, dict) and output.get(RESTART_FLAG) is True:
            return str(output.get("restartReason") or "tool:restart-signal")
    return None
