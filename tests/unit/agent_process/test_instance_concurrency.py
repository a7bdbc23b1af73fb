"""``policy.concurrency`` on the instance queue, with the real Turn loop: a scripted model,
a tool held open by the test, real conversation files.

Each Turn of ``work <word>`` calls ``gate__hold`` (which waits until the test lets it go),
then answers ``did <word>``; any other message is answered ``saw <message>``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.instance_policy import QueuedTurn, settle, supersede
from agent_process.instances import InstanceBusy, InstanceManager
from agent_process.models.base import TokenUsage
from agent_process.models.scripted import ScriptedModel
from agent_process.scope import Cancellation, TurnCancelled
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnResult, TurnRunner
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, ToolContext

WAIT = 10.0
USAGE = TokenUsage()

RULES: list[dict[str, Any]] = [
    {"when": {"input": "^work (?P<w>.+)$"}, "call": {"tool": "gate__hold", "args": {"w": "{w}"}}},
    {"when": {"toolResult": "gate__hold"}, "reply": "did {result.w}"},
    {"reply": "saw {input}"},
]


class Gate:
    """The ``gate__hold`` tool: each call is recorded, then waits for :meth:`open`."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.entered = asyncio.Event()
        self._open = asyncio.Event()

    async def hold(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        self.calls.append(str(args["w"]))
        self.entered.set()
        await self._open.wait()
        return {"w": args["w"]}

    def open(self) -> None:
        self._open.set()


def instances(tmp_path: Path, gate: Gate, concurrency: Any) -> InstanceManager:
    registry = ToolRegistry()
    registry.register(
        ToolCatalogItem(
            name="gate__hold",
            parameters={"type": "object", "properties": {"w": {"type": "string"}}},
            source=ToolSource(type="config", name="gate"),
        ),
        gate.hold,
    )
    pipeline = MiddlewarePipeline()
    settings = StepSettings(
        agent_name="a",
        model=ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="a"),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=("gate__hold",),
        system_prompt="You work.",
    )
    runner = TurnRunner(settings, max_steps=8)
    return InstanceManager("a", tmp_path, runner, concurrency=concurrency)


def conversation(manager: InstanceManager) -> list[tuple[str, str]]:
    store = ConversationStore(manager.conversation_directory("k"))
    return [(m.role, m.content if isinstance(m.content, str) else "") for m in store.load()]


async def answers(*futures: asyncio.Future[TurnResult]) -> list[str]:
    results = await asyncio.wait_for(asyncio.gather(*futures), WAIT)
    return [r.text if r.error is None else f"{r.error.code}" for r in results]


async def test_enqueue_runs_the_second_message_after_the_first(tmp_path: Path) -> None:
    gate = Gate()
    manager = instances(tmp_path, gate, "enqueue")
    first = manager.admit("k", TurnInput(text="work one"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    second = manager.admit("k", TurnInput(text="hello"))
    gate.open()
    assert await answers(first, second) == ["did one", "saw hello"]
    users = [text for role, text in conversation(manager) if role == "user"]
    assert users == ["work one", "hello"]


async def test_reject_refuses_a_message_while_a_turn_runs(tmp_path: Path) -> None:
    gate = Gate()
    manager = instances(tmp_path, gate, "reject")
    first = manager.admit("k", TurnInput(text="work one"))
    with pytest.raises(InstanceBusy) as refused:  # queued, not yet started: busy already
        manager.admit("k", TurnInput(text="too soon"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    with pytest.raises(InstanceBusy) as refused:
        manager.admit("k", TurnInput(text="hello"))
    assert refused.value.code == "INSTANCE_BUSY"
    assert "policy.concurrency" in str(refused.value)
    other = manager.admit("other", TurnInput(text="hi"))  # other conversations are not held
    assert await answers(other) == ["saw hi"]
    gate.open()
    assert await answers(first) == ["did one"]
    assert await answers(manager.admit("k", TurnInput(text="later"))) == ["saw later"]
    users = [text for role, text in conversation(manager) if role == "user"]
    assert users == ["work one", "later"]  # a refused message never reaches the conversation


async def test_reject_does_not_refuse_a_request_whose_turn_began_here(tmp_path: Path) -> None:
    # Delivered again after its agent died (a later attempt), a request that already began
    # its Turn was admitted then: refusing it now would answer BUSY for a stored message.
    gate = Gate()
    manager = instances(tmp_path, gate, "reject")
    first = manager.admit("k", TurnInput(text="work one", request_id="r1", may_resume=True))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    again = TurnInput(text="work one", request_id="r1", attempt=2, may_resume=True)
    carried = manager.admit("k", again)
    with pytest.raises(InstanceBusy):  # another request is still refused
        manager.admit("k", TurnInput(text="hello", request_id="r2", may_resume=True))
    gate.open()
    assert await answers(first, carried) == ["did one", "did one"]
    users = [text for role, text in conversation(manager) if role == "user"]
    assert users == ["work one"]


async def test_a_request_whose_turn_began_here_interrupts_nobody(tmp_path: Path) -> None:
    # Carried to a restarted agent after a newer message came, a request whose Turn had begun
    # must not pass the newer message an answer to an older one.
    gate = Gate()
    manager = instances(tmp_path, gate, "interrupt")
    first = manager.admit("k", TurnInput(text="work one", request_id="r1", may_resume=True))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    newer = manager.admit("k", TurnInput(text="hello", request_id="r2", may_resume=True))
    again = TurnInput(text="work one", request_id="r1", attempt=2, may_resume=True)
    carried = manager.admit("k", again)
    gate.open()
    assert await answers(newer, carried) == ["saw hello", "did one"]
    await answers(first)


async def test_reject_leaves_the_agents_own_turns_queued(tmp_path: Path) -> None:
    gate = Gate()
    manager = instances(tmp_path, gate, "reject")
    first = manager.admit("k", TurnInput(text="work one"))
    own = manager.submit("k", TurnInput(text="inbox"))  # a Turn the agent starts itself
    gate.open()
    assert await answers(first, own) == ["did one", "saw inbox"]


async def test_interrupt_stops_at_the_step_boundary_and_answers_both(tmp_path: Path) -> None:
    gate = Gate()
    manager = instances(tmp_path, gate, "interrupt")
    first = manager.admit("k", TurnInput(text="work one"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    second = manager.admit("k", TurnInput(text="hello"))
    assert not first.done()  # the Step under way (its tool call) finishes first
    gate.open()
    assert await answers(first, second) == ["saw hello", "saw hello"]
    # The tool call ran whole (its result is kept), and no model call answered it before
    # the new message.
    messages = conversation(manager)
    assert [role for role, _ in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert (messages[1][1], messages[4][1], messages[5][1]) == ("work one", "hello", "saw hello")
    assert gate.calls == ["one"]


async def test_interrupt_chains_queued_messages_to_the_newest_answer(tmp_path: Path) -> None:
    gate = Gate()
    manager = instances(tmp_path, gate, "interrupt")
    first = manager.admit("k", TurnInput(text="work one"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    second = manager.admit("k", TurnInput(text="work two"))
    third = manager.admit("k", TurnInput(text="last"))
    gate.open()
    assert await answers(first, second, third) == ["saw last"] * 3
    users = [text for role, text in conversation(manager) if role == "user"]
    assert users == ["work one", "work two", "last"]  # each message once, in order
    assert gate.calls == ["one"]  # the queued Turn stopped before its first Step


async def test_interrupt_of_an_idle_instance_is_an_ordinary_turn(tmp_path: Path) -> None:
    gate = Gate()
    gate.open()
    manager = instances(tmp_path, gate, "interrupt")
    assert await answers(manager.admit("k", TurnInput(text="work one"))) == ["did one"]
    assert await answers(manager.admit("k", TurnInput(text="hello"))) == ["saw hello"]


def test_an_unknown_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown concurrency"):
        instances(tmp_path, Gate(), "drop")


async def test_an_interrupt_lets_the_abortable_wait_finish() -> None:
    cancellation = Cancellation()
    release = asyncio.Event()

    async def wait() -> str:
        await release.wait()
        return "done"

    task = asyncio.ensure_future(cancellation.abortable(wait()))
    await asyncio.sleep(0)
    cancellation.interrupt("newer message")
    release.set()
    assert await asyncio.wait_for(task, WAIT) == "done"
    assert not cancellation.requested  # tool calls not yet started still run
    with pytest.raises(TurnCancelled, match="newer message"):
        cancellation.check()


def turn(text: str) -> QueuedTurn:
    return QueuedTurn(TurnInput(text=text), asyncio.get_running_loop().create_future())


def answered(text: str) -> TurnResult:
    return TurnResult(
        turn_id="t",
        trace_id="0" * 32,
        status="ok",
        text=text,
        finish_reason="text_response",
        step_count=1,
        duration_ms=0,
    )


async def test_a_superseded_turn_that_answers_first_keeps_its_answer() -> None:
    first, second = turn("one"), turn("two")
    assert supersede(first, second)
    settle(first, answered("own answer"))  # it ended before reaching a Step boundary
    assert first.future.result().text == "own answer"
    assert not supersede(first, turn("three"))  # answered already: nothing to interrupt


async def test_an_interrupted_turn_follows_the_chain_to_the_newest_answer() -> None:
    first, second, third = turn("one"), turn("two"), turn("three")
    supersede(first, second)
    supersede(second, third)
    for stopped in (first, second):
        settle(stopped, TurnResult.cancelled(stopped.turn_input, "newer", steps=0, usage=USAGE))
    assert not first.future.done()
    settle(third, answered("for all"))
    await asyncio.wait_for(asyncio.gather(first.future, second.future), WAIT)
    assert first.future.result().text == second.future.result().text == "for all"


async def test_an_operators_cancel_is_not_forwarded_without_an_interrupt() -> None:
    first, second = turn("one"), turn("two")
    first.superseded_by = second  # linked, but never asked to stop at a boundary
    settle(first, TurnResult.cancelled(first.turn_input, "operator", steps=0, usage=USAGE))
    assert first.future.result().error is not None
