"""One scope object per Turn and per Step: what the contexts and the events read from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_process.conversation import ConversationStore
from agent_process.models.scripted import ScriptedModel
from agent_process.scope import StepScope, TurnScope
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import (
    MiddlewarePipeline,
    StepMiddlewareContext,
    ToolCallMiddlewareContext,
)
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnMiddlewareContext, TurnResult, TurnRunner
from bundle.scripted import ScriptSpec
from ipc.runtime_events import TurnStartedEvent
from tools_base import JsonObject, ToolCallResult, ToolContext


def turn_scope(tmp_path: Path, events: list[dict[str, Any]] | None = None) -> TurnScope:
    return TurnScope(
        agent_name="agent",
        instance_key="key",
        turn_id="turn-1",
        trace_id="a" * 32,
        workdir=tmp_path,
        logger=structlog.get_logger(),
        events=(lambda event: events.append(event.to_builtins())) if events is not None else None,
    )


def test_a_step_scope_names_its_step_and_keeps_it_through_replace(tmp_path: Path) -> None:
    step = StepScope(turn=turn_scope(tmp_path), index=2)
    assert step.id == "turn-1-step-2"
    assert step.allowlist == frozenset()
    final = dataclasses.replace(step, allowlist=frozenset({"a__b"}))
    assert (final.id, final.span_id, final.turn) == (step.id, step.span_id, step.turn)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.index = 3  # type: ignore[misc]


def test_the_recorder_stamps_events_with_the_scope_identity(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    scope = turn_scope(tmp_path, events)
    assert scope.recorder.active
    scope.recorder.emit(TurnStartedEvent(turn_id=scope.turn_id), scope.span_id, None)
    [event] = events
    assert event["agentName"] == "agent"
    assert event["instanceKey"] == "key"
    assert event["traceId"] == "a" * 32
    assert event["spanId"] == scope.span_id
    assert not turn_scope(tmp_path).recorder.active


def test_named_results_carry_the_turn_identity(tmp_path: Path) -> None:
    scope = turn_scope(tmp_path)
    failed = TurnResult.failed(scope, "E_X", "broke", steps=2)
    assert (failed.turn_id, failed.trace_id, failed.status) == ("turn-1", "a" * 32, "error")
    assert failed.error is not None
    assert failed.error.code == "E_X"
    assert failed.duration_ms >= 0
    before = TurnResult.failed(TurnInput(text="hi", trace_id="b" * 32), "E_Y", "no turn")
    assert (before.turn_id, before.trace_id, before.duration_ms) == ("", "b" * 32, 0.0)
    limit = TurnResult.out_of_steps(
        scope, max_steps=3, text="", usage=failed.usage, restart_reason=None
    )
    assert limit.finish_reason == "max_steps"
    assert limit.text.startswith("Turn stopped: reached maxStepsPerTurn (3)")


async def test_every_middleware_context_reads_the_same_identity(tmp_path: Path) -> None:
    """Extension authors keep the attribute names; they are read-only views of the scope."""
    seen: dict[str, tuple[Any, ...]] = {}

    def upper(ctx: ToolContext, args: JsonObject) -> JsonObject:
        seen["tool"] = (ctx.agent_name, ctx.instance_key, ctx.turn_id, ctx.trace_id)
        return {"text": str(args["text"]).upper()}

    async def turn(ctx: TurnMiddlewareContext) -> TurnResult:
        seen["turn"] = (ctx.agent_name, ctx.instance_key, ctx.turn_id, ctx.trace_id)
        assert ctx.input.text == "shout hi"
        assert ctx.runtime is None
        with pytest.raises(AttributeError):
            ctx.turn_id = "other"  # type: ignore[misc]
        return await ctx.next()

    async def step(ctx: StepMiddlewareContext[Any]) -> Any:
        seen.setdefault("step", (ctx.agent_name, ctx.instance_key, ctx.turn_id, ctx.trace_id))
        assert ctx.step_index == ctx.scope.index
        return await ctx.next()

    async def call(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        seen["call"] = (ctx.agent_name, ctx.instance_key, ctx.turn_id, ctx.trace_id)
        assert (ctx.step_index, ctx.runtime) == (0, None)
        ctx.args = {"text": "changed"}
        return await ctx.next()

    registry = ToolRegistry()
    registry.register(
        ToolCatalogItem(name="text__upper", source=ToolSource(type="config", name="text")), upper
    )
    pipeline = MiddlewarePipeline()
    pipeline.register("turn", turn)
    pipeline.register("step", step)
    pipeline.register("toolCall", call)
    rules = [
        {"when": {"toolResult": "text__upper", "status": "ok"}, "reply": "{result.text}!"},
        {"call": {"tool": "text__upper", "args": {"text": "hi"}}},
    ]
    settings = StepSettings(
        agent_name="shouter",
        model=ScriptedModel(ScriptSpec.model_validate({"rules": rules}), agent_name="shouter"),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=("text__upper",),
    )
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await TurnRunner(settings).run(
        "key", store, tmp_path, TurnInput(text="shout hi", trace_id="c" * 32)
    )
    await settings.executor.aclose()
    assert result.status == "ok"
    assert result.text == "CHANGED!"
    expected = ("shouter", "key", result.turn_id, "c" * 32)
    assert seen == {"turn": expected, "step": expected, "call": expected, "tool": expected}
