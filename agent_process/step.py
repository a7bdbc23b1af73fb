"""One Step: build the catalog, let step middleware edit it, call the model, run its tool calls.

Tool calls of one response run in the model's order, each through the executor (and so the
``toolCall`` onion); every result is appended to the conversation as a ``tool`` message right
after it completes, so a crash mid-Step loses nothing already done. A call the approval policy
names waits for an operator's decision first (:mod:`agent_process.approvals`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_process.approvals import ApprovalGate, Decision
from agent_process.conversation import ConversationStore, new_message_id
from agent_process.events import capped, current_span, new_span_id
from agent_process.models.base import ChatModel, ModelRequest, TokenUsage
from agent_process.network_events import connection_recorder
from agent_process.scope import StepScope
from agent_process.tools import results
from agent_process.tools.catalog import ToolCatalogItem, build_catalog, catalog_names
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline, StepMiddlewareContext
from agent_process.tools.registry import ToolRegistry
from goondan.defaults import MAX_TOOL_CALLS_PER_STEP
from goondan.time import utc_timestamp
from ipc.runtime_events import ToolCalledEvent, ToolCompletedEvent, ToolFailedEvent
from tools_base import (
    JsonValue,
    Message,
    MessageEvent,
    MessageSource,
    ToolCall,
    ToolCallResult,
)
from tools_base.sandbox import ConnectionSink, connection_sink

if TYPE_CHECKING:
    from agent_process.governor import ModelGovernor


DEFAULT_MAX_TOOL_CALLS_PER_STEP = MAX_TOOL_CALLS_PER_STEP


def tool_message(
    call: ToolCall, result: ToolCallResult, metadata: dict[str, JsonValue] | None = None
) -> Message:
    """The conversation's ``tool`` message carrying ``result`` of ``call``."""
    return Message(
        id=new_message_id("msg"),
        role="tool",
        tool_result=result.to_json(),
        created_at=utc_timestamp(),
        source=MessageSource(type="tool", tool_call_id=call.id, tool_name=call.name),
        metadata=metadata or {},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """What one Step produced."""

    text: str
    """The model's text in this Step ("" when it only called tools)."""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolCallResult, ...] = ()
    should_continue: bool = False
    """True when tool results must go back to the model in another Step."""
    usage: TokenUsage | None = None
    duration_ms: float = 0.0
    metadata: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class StepSettings:
    """What stays the same for every Step of an agent."""

    agent_name: str
    model: ChatModel
    registry: ToolRegistry
    executor: ToolExecutor
    pipeline: MiddlewarePipeline
    config_tool_names: tuple[str, ...]
    """``Agent.spec.tools`` expanded to full tool names, in declaration order."""
    system_prompt: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_tool_calls_per_step: int = DEFAULT_MAX_TOOL_CALLS_PER_STEP
    """Calls of one model response that run; the rest are answered ``E_TOOL_CALL_LIMIT``."""
    approvals: ApprovalGate | None = None
    """Parks the calls ``toolPolicy.approval`` names until an operator decides."""
    parallel_tool_calls: bool = False
    """Run the calls of one model response concurrently; results still join the conversation
    in the model's order, each as soon as it and the ones before it are done."""
    governor: ModelGovernor | None = None
    """Budgets and shared rate limits around each model call; ``None``: the model is called
    as it is (no budgets, no limits, nothing reported)."""
    idempotent_tools: frozenset[str] = frozenset()
    """Full names of the tools (exports) declared ``idempotent``: a call of one the agent
    process died in runs again when its Turn resumes."""
    before_tool_call: Callable[[], None] | None = None
    """Called right before each tool call runs. The AgentProcess writes out what it has told
    the Orchestrator so far: a tool may block the loop or end the process, and what was said
    before it (the Turn started, the call began) must not be lost with it."""


class StepContext(StepMiddlewareContext[StepResult]):
    """Context of a ``step`` middleware.

    Before ``next()``: edit ``tool_catalog`` (what the model is offered, and the allowlist),
    or change the conversation with ``emit_message_event``. After: return the
    :class:`StepResult`, or a copy with ``should_continue`` changed
    (``dataclasses.replace(result, should_continue=True)`` runs another Step).
    """

    __slots__ = ("_store", "turn_metadata")

    def __init__(
        self,
        chain: Any,
        core: Any,
        *,
        store: ConversationStore,
        scope: StepScope,
        tool_catalog: list[ToolCatalogItem],
        turn_metadata: dict[str, JsonValue],
    ) -> None:
        super().__init__(chain, core, scope=scope, tool_catalog=tool_catalog)
        self._store = store
        self.turn_metadata = turn_metadata
        """The Turn's ``metadata``: scratch space shared by every Step of the Turn."""

    @property
    def messages(self) -> list[Message]:
        """The conversation as it stands (a copy)."""
        return self._store.messages

    def emit_message_event(self, event: MessageEvent) -> None:
        """Change the conversation (append, replace, remove, truncate); on disk at once."""
        self._store.emit(event)


async def run_step(
    settings: StepSettings,
    store: ConversationStore,
    scope: StepScope,
    turn_metadata: dict[str, JsonValue] | None = None,
) -> StepResult:
    """Run Step ``scope.index`` of the Turn ``scope.turn`` on ``store``.

    Tool events go to ``scope.turn.recorder``, under the Step's span ``scope.span_id``.
    """
    catalog = build_catalog(settings.registry, settings.config_tool_names)

    async def core(ctx: StepContext) -> StepResult:
        return await _model_and_tools(settings, store, ctx)

    ctx = StepContext(
        settings.pipeline.chain("step"),
        core,
        store=store,
        scope=scope,
        tool_catalog=catalog,
        turn_metadata=turn_metadata if turn_metadata is not None else {},
    )
    return await ctx.next()


async def _model_and_tools(
    settings: StepSettings, store: ConversationStore, ctx: StepContext
) -> StepResult:
    started = time.perf_counter()
    tools = list(ctx.tool_catalog)
    # A model call has no effects: a cancelled Turn abandons it (nothing is appended yet).
    sink, step_id = ctx.scope.turn.text_sink, ctx.scope.id
    request = ModelRequest(
        messages=store.messages,
        tools=tools,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        on_text=(lambda text: sink(step_id, text)) if sink is not None else None,
        conversation=ctx.scope.turn.instance_key,
    )
    governor, turn = settings.governor, ctx.scope.turn
    response = await turn.cancellation.abortable(
        settings.model.complete(request)
        if governor is None
        else governor.complete(settings.model, request, turn)
    )
    assistant = Message(
        id=new_message_id("msg"),
        role="assistant",
        content=response.text,
        tool_calls=response.tool_calls,
        created_at=utc_timestamp(),
        source=MessageSource(type="assistant", step_id=ctx.scope.id),
        metadata={"finishReason": response.finish_reason},
    )
    store.append(assistant)
    # The catalog the model was offered, after every step middleware, is the allowlist.
    scope = dataclasses.replace(ctx.scope, allowlist=catalog_names(tools))
    results = await _run_calls(settings, store, scope, assistant)
    return StepResult(
        text=response.text,
        tool_calls=response.tool_calls,
        tool_results=results,
        should_continue=bool(response.tool_calls),
        usage=response.usage,
        duration_ms=(time.perf_counter() - started) * 1000,
        metadata={**ctx.metadata, "model": response.metadata},
    )


async def resume_calls(settings: StepSettings, store: ConversationStore, scope: StepScope) -> None:
    """Finish the last assistant message's calls that have no result yet (a Turn resumed
    after a restart left a call parked for approval): the parked one is taken up where it
    stood, the ones after it run (or park) as they would have."""
    answered = {m.source.tool_call_id for m in store.messages if m.role == "tool"}
    assistant = next(
        (
            m
            for m in reversed(store.messages)
            if m.role == "assistant" and any(c.id not in answered for c in m.tool_calls)
        ),
        None,
    )
    if assistant is None:
        return
    catalog = catalog_names(build_catalog(settings.registry, settings.config_tool_names))
    # A parked call was in its Step's catalog, which step middleware may have widened.
    parked = {c.name for c in assistant.tool_calls if c.id not in answered}
    scope = dataclasses.replace(scope, allowlist=catalog | parked)
    await _run_calls(settings, store, scope, assistant, skip=answered)


async def _run_calls(
    settings: StepSettings,
    store: ConversationStore,
    scope: StepScope,
    assistant: Message,
    *,
    skip: set[str | None] | None = None,
) -> tuple[ToolCallResult, ...]:
    """Run the calls of ``assistant`` (but those in ``skip``, answered already), one after
    another or, with ``parallel_tool_calls``, all at once; each result joins the conversation
    in the model's order as soon as it and those before it are done."""
    calls = [
        (index, call)
        for index, call in enumerate(assistant.tool_calls)
        if not (skip and call.id in skip)
    ]
    results: list[ToolCallResult] = []
    if settings.parallel_tool_calls and len(calls) > 1:
        outcomes = [
            asyncio.ensure_future(_outcome(settings, store, scope, assistant, index, call))
            for index, call in calls
        ]
        try:
            for (_, call), outcome in zip(calls, outcomes, strict=True):
                result, decision = await outcome
                results.append(_record(settings, store, call, result, decision))
        finally:
            for outcome in outcomes:  # only when one raised: the rest are not waited for
                outcome.cancel()
        return tuple(results)
    for index, call in calls:
        result, decision = await _outcome(settings, store, scope, assistant, index, call)
        results.append(_record(settings, store, call, result, decision))
    return tuple(results)


async def _outcome(
    settings: StepSettings,
    store: ConversationStore,
    scope: StepScope,
    assistant: Message,
    index: int,
    call: ToolCall,
) -> tuple[ToolCallResult, Decision | None]:
    """The result of one call (run, refused, cancelled or decided by an operator)."""
    limit = settings.max_tool_calls_per_step
    cancellation = scope.turn.cancellation
    gate = settings.approvals
    if cancellation.requested:
        withdrawn = gate.withdraw(call, scope, cancellation.reason) if gate else None
        # A resumed call whose request is cancelled closes its approval too.
        decision = Decision("cancelled", withdrawn) if withdrawn is not None else None
        return results.cancelled(call, cancellation.reason), decision
    if index >= limit:
        return results.over_limit(call, limit, len(assistant.tool_calls)), None
    if gate is not None and gate.needs_approval(call, scope.allowlist, scope.turn.instance_key):
        decision = await gate.review(call, scope, store.directory.parent, store)
        return await _decided(settings, decision, call, scope, assistant), decision
    return await _run_tool(settings, call, scope, assistant), None


def _record(
    settings: StepSettings,
    store: ConversationStore,
    call: ToolCall,
    result: ToolCallResult,
    decision: Decision | None,
) -> ToolCallResult:
    """Append ``result`` to the conversation (and settle its approval); returns it."""
    metadata: dict[str, JsonValue] = {}
    if decision is not None:
        approval = decision.approval
        metadata["__goondanApproval"] = {
            "approvalId": approval.approval_id,
            "status": approval.status,
            "arguments": approval.decided_arguments,
            "reason": approval.reason,
        }
    store.append(tool_message(call, result, metadata))
    if decision is not None and settings.approvals is not None:
        settings.approvals.settle(decision.approval)
    return result


async def _decided(
    settings: StepSettings,
    decision: Decision,
    call: ToolCall,
    scope: StepScope,
    assistant: Message,
) -> ToolCallResult:
    """The result of a call an operator decided on (or let expire)."""
    approval = decision.approval
    if decision.outcome == "approved":
        assert settings.approvals is not None
        settings.approvals.mark_started(approval)
        approved = ToolCall(id=call.id, name=call.name, args=approval.run_arguments)
        return await _run_tool(settings, approved, scope, assistant)
    if decision.outcome == "rejected":
        return results.rejected(call, approval.reason)
    if decision.outcome == "cancelled":
        return results.cancelled(call, approval.reason)
    if decision.outcome == "expired":
        return results.approval_expired(call, approval.expires_at_unix)
    return results.interrupted(call)


async def _run_tool(
    settings: StepSettings, call: ToolCall, scope: StepScope, assistant: Message
) -> ToolCallResult:
    """One tool call, inside its own span (``tool.called`` / ``tool.completed`` / ``tool.failed``)."""
    recorder = scope.turn.recorder
    if not recorder.active:
        return await _in_span(settings, call, scope, assistant, new_span_id())
    span = new_span_id()
    call_id, tool, step_id, turn_id = call.id, call.name, scope.id, scope.turn.turn_id
    called = ToolCalledEvent(
        tool_call_id=call_id,
        tool_name=tool,
        step_id=step_id,
        turn_id=turn_id,
        args=capped(call.args),
    )
    recorder.emit(called, span, scope.span_id)
    started = time.perf_counter()
    sink = connection_recorder(
        recorder, call, span=span, step_span=scope.span_id, step_id=step_id, turn_id=turn_id
    )
    try:
        result = await _in_span(settings, call, scope, assistant, span, sink)
    except BaseException as exc:
        failed = ToolFailedEvent(
            tool_call_id=call_id,
            tool_name=tool,
            step_id=step_id,
            turn_id=turn_id,
            duration=round((time.perf_counter() - started) * 1000, 3),
            error_message=repr(exc),
        )
        recorder.emit(failed, span, scope.span_id)
        raise
    completed = ToolCompletedEvent(
        tool_call_id=call_id,
        tool_name=tool,
        step_id=step_id,
        turn_id=turn_id,
        status=result.status,
        duration=round((time.perf_counter() - started) * 1000, 3),
        output=capped(result.output),
        error=result.error.to_json() if result.error else None,
    )
    recorder.emit(completed, span, scope.span_id)
    return result


async def _in_span(
    settings: StepSettings,
    call: ToolCall,
    scope: StepScope,
    assistant: Message,
    span: str,
    sink: ConnectionSink | None = None,
) -> ToolCallResult:
    """The call with ``span`` as the current span, so what the tool starts hangs under it (and
    the connections its sandboxed programs make are recorded on it, through ``sink``)."""
    if settings.before_tool_call is not None:
        settings.before_tool_call()
    token = current_span.set(span)
    sink_token = connection_sink.set(sink)
    try:
        return await settings.executor.execute(call, scope, assistant)
    finally:
        connection_sink.reset(sink_token)
        current_span.reset(token)
