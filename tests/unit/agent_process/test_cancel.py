"""Cancelling a Turn: it stops at a safe point and leaves a conversation a provider accepts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.models.base import ModelRequest, ModelResponse
from agent_process.models.scripted import ScriptedModel
from agent_process.scope import Cancellation, TurnCancelled
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, ToolContext

TRACE = "0" * 31 + "1"


class Harness:
    """A runner whose ``steps__mark`` tool records its calls, and may cancel the Turn."""

    def __init__(self, tmp_path: Path, model: Any = None) -> None:
        self.calls: list[str] = []
        self.cancel_on_call: str | None = None
        registry = ToolRegistry()
        registry.register(
            ToolCatalogItem(
                name="steps__mark",
                parameters={"type": "object", "properties": {"name": {"type": "string"}}},
                source=ToolSource(type="config", name="steps"),
            ),
            self.mark,
        )
        pipeline = MiddlewarePipeline()
        rules: list[dict[str, Any]] = [
            {
                "when": {"input": "^two calls$"},
                "calls": [
                    {"tool": "steps__mark", "args": {"name": "first"}},
                    {"tool": "steps__mark", "args": {"name": "second"}},
                ],
            },
            {"when": {"toolResult": "steps__mark"}, "reply": "marked"},
            {"reply": "hello"},
        ]
        settings = StepSettings(
            agent_name="marker",
            model=model
            or ScriptedModel(ScriptSpec.model_validate({"rules": rules}), agent_name="marker"),
            registry=registry,
            executor=ToolExecutor(registry, pipeline),
            pipeline=pipeline,
            config_tool_names=("steps__mark",),
        )
        self.runner = TurnRunner(settings)
        self.store = ConversationStore(tmp_path / "conv")
        self.store.load()
        self.workdir = tmp_path

    async def mark(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        name = str(args.get("name"))
        self.calls.append(name)
        if name == self.cancel_on_call:  # an operator cancels while this call runs
            self.runner.cancel(TRACE, "stop please")
        return {"marked": name}

    async def run(self, text: str) -> Any:
        turn = TurnInput(text=text, trace_id=TRACE)
        return await self.runner.run("default", self.store, self.workdir, turn)

    def roles(self) -> list[str]:
        return [m.role for m in self.store.messages]


class Endless:
    """A model that never answers until it is abandoned."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.abandoned = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.called.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.abandoned = True
            raise
        raise AssertionError("unreachable")


async def test_a_call_running_when_cancelled_finishes_and_the_next_is_not_run(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path)
    harness.cancel_on_call = "first"
    result = await harness.run("two calls")
    assert harness.calls == ["first"]
    assert (result.status, result.finish_reason) == ("error", "cancelled")
    assert result.error is not None
    assert result.error.code == "CANCELLED"
    assert "stop please" in result.error.message
    # Every call of the assistant message has its result; no model call came after them.
    assert harness.roles() == ["user", "assistant", "tool", "tool"]
    second = harness.store.messages[-1].tool_result
    assert second is not None
    assert second["error"]["code"] == "E_TOOL_CANCELLED"
    assert ConversationStore(tmp_path / "conv").load() == harness.store.messages  # folded


async def test_a_model_call_in_flight_is_abandoned(tmp_path: Path) -> None:
    model = Endless()
    harness = Harness(tmp_path, model)
    turn = asyncio.create_task(harness.run("hi"))
    async with asyncio.timeout(5):
        await model.called.wait()
        assert harness.runner.cancel(TRACE, "enough") == 1
        result = await turn
    assert model.abandoned
    assert (result.finish_reason, result.step_count) == ("cancelled", 0)
    assert harness.roles() == ["user"]  # nothing half-written


async def test_a_turn_of_a_cancelled_trace_that_comes_up_later_does_nothing(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path)
    assert harness.runner.cancel(TRACE, "queued") == 0
    result = await harness.run("two calls")
    assert result.finish_reason == "cancelled"
    assert harness.calls == []
    assert harness.store.messages == []


async def test_the_next_turn_after_a_cancel_runs_normally(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.cancel_on_call = "first"
    await harness.run("two calls")
    fresh = TurnInput(text="hi again")  # a new request: a new trace
    result = await harness.runner.run("default", harness.store, tmp_path, fresh)
    assert (result.status, result.text) == ("ok", "hello")


async def test_abortable_leaves_other_cancellations_alone() -> None:
    cancellation = Cancellation()

    async def waits() -> None:
        await cancellation.abortable(asyncio.Event().wait())

    task = asyncio.create_task(waits())
    await asyncio.sleep(0)  # let it start waiting
    task.cancel()  # not ours: a plain cancellation of the task
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task
    cancellation.request("later")
    with pytest.raises(TurnCancelled, match=r"^later$"):
        cancellation.check()
