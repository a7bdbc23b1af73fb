"""A Turn taken up again after its agent process died under it (scripted model, real executor,
real conversation files). The "death" is the Turn's task cancelled mid-call: what it left on
disk is exactly what a SIGKILL leaves, and the next attempt reads it back from the files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.models.base import ModelRequest, ModelResponse
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from agent_process.turn_resume import REQUEST_KEY, find_turn
from bundle.scripted import ScriptSpec
from ipc.runtime_events import RuntimeEvent, TurnResumedEvent
from tools_base import JsonObject, ToolContext

RULES: list[dict[str, Any]] = [
    {
        "when": {"input": "^write (?P<w>.+)$"},
        "call": {"tool": "file__append", "args": {"w": "{w}"}},
    },
    {"when": {"input": "^note (?P<w>.+)$"}, "call": {"tool": "file__note", "args": {"w": "{w}"}}},
    {"when": {"toolResult": "file__append", "status": "ok"}, "reply": "wrote {result.count}"},
    {"when": {"toolResult": "file__note", "status": "ok"}, "reply": "noted {result.count}"},
    {"when": {"toolResult": "file__append", "status": "error"}, "reply": "unsure: {error}"},
    {"reply": "hello"},
]


class Counting:
    """The scripted model, counting its calls."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="a")
        self.calls = 0
        self.hang = False
        self.called = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        self.called.set()
        if self.hang:
            await asyncio.Event().wait()
        return await self.inner.complete(request)


class Harness:
    """A Turn runner whose ``file`` tool appends a line to a file per call (its effect);
    ``file__note`` is declared idempotent, ``file__append`` is not."""

    def __init__(self, tmp_path: Path, max_turn_attempts: int = 3) -> None:
        self.effects = tmp_path / "effects.txt"
        self.conversation = tmp_path / "conv"
        self.model = Counting()
        self.block = False
        self.entered = asyncio.Event()
        self.events: list[RuntimeEvent] = []
        registry = ToolRegistry()
        for export in ("append", "note"):
            registry.register(
                ToolCatalogItem(
                    name=f"file__{export}",
                    parameters={"type": "object", "properties": {"w": {"type": "string"}}},
                    source=ToolSource(type="config", name="file"),
                ),
                self._effect,
            )
        pipeline = MiddlewarePipeline()
        settings = StepSettings(
            agent_name="a",
            model=self.model,
            registry=registry,
            executor=ToolExecutor(registry, pipeline),
            pipeline=pipeline,
            config_tool_names=("file__append", "file__note"),
            idempotent_tools=frozenset({"file__note"}),
        )
        self.runner = TurnRunner(
            settings, events=self.events.append, max_turn_attempts=max_turn_attempts
        )

    async def _effect(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        with self.effects.open("a") as out:
            out.write(f"{args['w']}\n")
        self.entered.set()
        if self.block:  # the process "dies" here, after the effect
            await asyncio.Event().wait()
        return {"count": len(self.effects.read_text().splitlines())}

    def store(self) -> ConversationStore:
        store = ConversationStore(self.conversation)
        store.load()
        return store

    async def run(
        self, text: str, request_id: str, attempt: int = 1, *, carried: bool = False
    ) -> Any:
        """Run a Turn for ``request_id``; ``carried``: routed again by a restarted daemon,
        which counts its deliveries from 1 again."""
        turn_input = TurnInput(
            text=text, request_id=request_id, attempt=attempt, may_resume=attempt > 1 or carried
        )
        return await self.runner.run("default", self.store(), self.conversation, turn_input)

    async def killed_in_tool(self, text: str, request_id: str) -> None:
        """Run a Turn and cut it down inside its tool call, after the tool's effect."""
        self.block = True
        task = asyncio.ensure_future(self.run(text, request_id))
        await asyncio.wait_for(self.entered.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        self.block = False

    def effect_count(self) -> int:
        return len(self.effects.read_text().splitlines()) if self.effects.exists() else 0

    def resumed(self) -> list[TurnResumedEvent]:
        return [e for e in self.events if isinstance(e, TurnResumedEvent)]


async def test_the_user_message_records_the_request(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    result = await harness.run("say hi", "req-1")
    assert (result.status, result.text) == ("ok", "hello")
    recorded = find_turn(harness.store().messages, "req-1")
    assert recorded is not None
    assert recorded.answer is not None
    record = recorded.message.metadata[REQUEST_KEY]
    assert isinstance(record, dict)
    assert (record["requestId"], record["turnId"], record["attempt"]) == (
        "req-1",
        result.turn_id,
        1,
    )


async def test_an_ended_turn_answers_again_without_a_model_call(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    first = await harness.run("write x", "req-1")
    assert (first.status, first.text, harness.model.calls) == ("ok", "wrote 1", 2)
    again = await harness.run("write x", "req-1", attempt=2)
    assert (again.status, again.text) == ("ok", "wrote 1")
    assert harness.model.calls == 2  # no model call
    assert harness.effect_count() == 1  # no tool call
    assert [m.role for m in harness.store().messages].count("user") == 1
    (resumed,) = harness.resumed()
    assert (resumed.attempt, resumed.replayed, resumed.resumed_turn_id) == (
        2,
        True,
        first.turn_id,
    )


async def test_a_non_idempotent_call_in_flight_is_answered_interrupted(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    await harness.killed_in_tool("write x", "req-1")
    assert (harness.effect_count(), harness.model.calls) == (1, 1)
    result = await harness.run("write x", "req-1", attempt=2)
    assert result.status == "ok"
    assert result.text.startswith("unsure: ")
    assert "may or may not have run" in result.text
    assert harness.effect_count() == 1  # never run twice
    assert harness.model.calls == 2  # the recorded tool call was not asked for again
    roles = [m.role for m in harness.store().messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    (resumed,) = harness.resumed()
    assert (resumed.attempt, resumed.replayed, resumed.request_id) == (2, False, "req-1")
    started = [e for e in harness.events if e.type == "turn.started"]
    assert resumed.resumed_span_id == started[0].span_id != started[1].span_id


async def test_an_idempotent_call_in_flight_runs_again(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    await harness.killed_in_tool("note x", "req-1")
    result = await harness.run("note x", "req-1", attempt=2)
    assert (result.status, result.text) == ("ok", "noted 2")
    assert harness.effect_count() == 2  # run again, as its tool allows
    assert harness.model.calls == 2
    # It runs in the resumed attempt's Step 0, a span the trace holds.
    called = [e for e in harness.events if e.type == "tool.called"][-1]
    steps = [e for e in harness.events if e.type in ("step.started", "step.completed")]
    opened = [e for e in steps if e.span_id == called.parent_span_id]
    assert [(e.type, e.step_index) for e in opened] == [
        ("step.started", 0),
        ("step.completed", 0),
    ]
    assert opened[0].parent_span_id == harness.resumed()[0].span_id


async def test_a_turn_killed_during_its_model_call_asks_once_more(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.model.hang = True
    task = asyncio.ensure_future(harness.run("say hi", "req-1"))
    await asyncio.wait_for(harness.model.called.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    harness.model.hang = False
    result = await harness.run("say hi", "req-1", attempt=2)
    assert (result.status, result.text, harness.model.calls) == ("ok", "hello", 2)
    assert [m.role for m in harness.store().messages] == ["user", "assistant"]


async def test_a_later_attempt_links_to_the_one_before_it(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.model.hang = True
    for attempt in (1, 2):
        harness.model.called.clear()
        task = asyncio.ensure_future(harness.run("say hi", "req-1", attempt=attempt))
        await asyncio.wait_for(harness.model.called.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    harness.model.hang = False
    result = await harness.run("say hi", "req-1", attempt=3)
    assert result.text == "hello"
    second, third = harness.resumed()
    assert third.attempt == 3
    assert third.resumed_turn_id == second.turn_id


async def test_attempts_count_on_across_daemon_restarts(tmp_path: Path) -> None:
    harness = Harness(tmp_path, max_turn_attempts=5)
    harness.model.hang = True
    for _ in range(2):  # two daemons die under the Turn; each delivered it as attempt 1
        harness.model.called.clear()
        task = asyncio.ensure_future(harness.run("say hi", "req-1", carried=True))
        await asyncio.wait_for(harness.model.called.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    harness.model.hang = False
    result = await harness.run("say hi", "req-1", carried=True)
    assert result.text == "hello"
    assert [e.attempt for e in harness.resumed()] == [2, 3]


async def test_an_unknown_request_id_starts_a_turn(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    await harness.run("write a", "req-1")
    result = await harness.run("write b", "req-2", attempt=2)  # died before it began
    assert (result.text, harness.effect_count()) == ("wrote 2", 2)
    assert harness.resumed() == []


async def test_a_new_turn_after_a_crash_still_closes_the_dead_calls(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    await harness.killed_in_tool("note x", "req-1")
    # Another request comes first: the interrupted Turn's calls are closed, never run.
    result = await harness.run("say hi", "req-2")
    assert result.text == "hello"
    assert harness.effect_count() == 1
    roles = [m.role for m in harness.store().messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    # The interrupted request comes back: its Turn moves after the other one and goes on
    # from its closed call; nothing of it is asked or run twice.
    again = await harness.run("note x", "req-1", attempt=2)
    assert again.status == "ok"
    assert harness.effect_count() == 1
    messages = harness.store().messages
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [m.content for m in messages if m.role == "user"] == ["say hi", "note x"]


async def test_a_turn_cut_in_its_model_call_moves_after_the_turns_that_ran_meanwhile(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path)
    harness.model.hang = True
    task = asyncio.ensure_future(harness.run("say hi", "req-1"))
    await asyncio.wait_for(harness.model.called.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    harness.model.hang = False
    await harness.run("write a", "req-2")  # the restarted agent took another message first
    result = await harness.run("say hi", "req-1", attempt=2)
    assert (result.status, result.text) == ("ok", "hello")
    users = [m.content for m in harness.store().messages if m.role == "user"]
    assert users == ["write a", "say hi"]  # asked once, after the Turn that ran meanwhile
    assert len(harness.resumed()) == 1


async def test_a_turn_that_killed_its_agent_too_often_is_answered_agent_crashed(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, max_turn_attempts=2)
    harness.model.hang = True
    for attempt in (1, 2):
        harness.model.called.clear()
        task = asyncio.ensure_future(harness.run("say hi", "req-1", attempt=attempt))
        await asyncio.wait_for(harness.model.called.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    result = await harness.run("say hi", "req-1", attempt=3)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "AGENT_CRASHED"
    assert "2 times" in result.error.message
    assert harness.model.calls == 2  # not asked a third time


async def test_a_delivery_that_never_ran_the_turn_does_not_count(tmp_path: Path) -> None:
    harness = Harness(tmp_path, max_turn_attempts=1)
    # Attempts 1 and 2 died while the request only waited in the queue: attempt 3 runs it.
    result = await harness.run("say hi", "req-1", attempt=3)
    assert (result.status, result.text) == ("ok", "hello")


async def test_a_moved_turn_leaves_every_tool_result_after_its_call(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.model.hang = True  # A dies in its model call
    task = asyncio.ensure_future(harness.run("say hi", "req-a"))
    await asyncio.wait_for(harness.model.called.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    harness.model.hang = False
    await harness.killed_in_tool("write b", "req-b")  # then B, inside its tool
    await harness.run("say hi", "req-a", attempt=2)  # A comes back first, B after it
    await harness.run("write b", "req-b", attempt=2)
    messages = harness.store().messages
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            assert message.source.tool_call_id in open_calls, [m.role for m in messages]
            open_calls.discard(message.source.tool_call_id or "")
        elif message.tool_calls:
            assert not open_calls
            open_calls = {call.id for call in message.tool_calls}
    assert not open_calls
    assert [m.content for m in messages if m.role == "user"] == ["say hi", "write b"]
    assert harness.effect_count() == 1  # B's call is not run again
