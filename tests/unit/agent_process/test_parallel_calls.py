"""``toolPolicy.parallelToolCalls``: the calls of one model answer run at once; their results
join the conversation in the model's order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, ToolContext

CALLS = 4
RULES: list[dict[str, Any]] = [
    {
        "when": {"input": "^go$"},
        "calls": [{"tool": "meet__at", "args": {"n": n}} for n in range(CALLS)],
    },
    {"when": {"toolResult": "meet__at"}, "reply": "met"},
]


class Meeting:
    """Each call waits until every call has started, then they finish in reverse order."""

    def __init__(self) -> None:
        self.started = 0
        self.everyone = asyncio.Event()
        self.finished: list[int] = []
        self.turns = [asyncio.Event() for _ in range(CALLS)]
        self.turns[CALLS - 1].set()

    async def at(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        n = int(str(args["n"]))
        self.started += 1
        if self.started == CALLS:
            self.everyone.set()
        await self.everyone.wait()  # only returns if all calls run at once
        await self.turns[n].wait()
        self.finished.append(n)
        if n > 0:
            self.turns[n - 1].set()
        return {"n": n}


def runner(meeting: Meeting, parallel: bool) -> TurnRunner:
    registry = ToolRegistry()
    registry.register(
        ToolCatalogItem(
            name="meet__at",
            parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
            source=ToolSource(type="config", name="meet"),
        ),
        meeting.at,
    )
    pipeline = MiddlewarePipeline()
    settings = StepSettings(
        agent_name="meeter",
        model=ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="meeter"),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=("meet__at",),
        parallel_tool_calls=parallel,
    )
    return TurnRunner(settings)


async def test_parallel_calls_run_at_once_and_join_in_the_models_order(tmp_path: Path) -> None:
    meeting = Meeting()
    store = ConversationStore(tmp_path / "conv")
    store.load()
    async with asyncio.timeout(10):
        result = await runner(meeting, parallel=True).run(
            "default", store, tmp_path, TurnInput(text="go")
        )
    assert result.text == "met"
    assert meeting.finished == [3, 2, 1, 0]  # they finished in reverse...
    tool_messages = [m for m in ConversationStore(tmp_path / "conv").load() if m.role == "tool"]
    results = [m.tool_result for m in tool_messages]
    assert [r["output"]["n"] for r in results if r] == [0, 1, 2, 3]  # ...and joined in order
    calls = [c.id for m in store.messages if m.role == "assistant" for c in m.tool_calls]
    assert [m.source.tool_call_id for m in tool_messages] == calls


async def test_without_the_option_calls_run_one_after_another(tmp_path: Path) -> None:
    meeting = Meeting()
    store = ConversationStore(tmp_path / "conv")
    store.load()
    turn = asyncio.ensure_future(
        runner(meeting, parallel=False).run("default", store, tmp_path, TurnInput(text="go"))
    )
    with pytest.raises(TimeoutError):  # the first call waits for the others forever
        async with asyncio.timeout(0.5):
            await asyncio.shield(turn)
    assert meeting.started == 1
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
