"""The governor of model calls: turn and instance budgets, permits, 429 pauses, usage reports.

The Orchestrator's side is a small fake that answers permit requests the way the broker does;
the broker itself is tested in ``tests/unit/orchestrator/limits/test_limits.py``, and both together
across real processes in ``tests/integration/limits/test_limits.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_process.governor import ModelGovernor, PromptSizes
from agent_process.link import Correlations, OrchestratorLink
from agent_process.models.base import ModelCallError, ModelRequest, ModelResponse, TokenUsage
from agent_process.scope import TurnScope
from agent_process.tools.catalog import ToolCatalogItem
from bundle.plan import AgentPlan, ModelPlan
from bundle.spec_agent import BudgetCeilings, Budgets, ModelLimits, ModelPricing
from goondan.usage import Usage
from ipc import IpcError, IpcMessage
from ipc.events import ModelUsage, read_event
from ipc.questions import ModelPermitRequest, ModelPermitResult
from tools_base import Message

TRACE = "f" * 32


def plan(
    *,
    limits: ModelLimits | None = None,
    pricing: ModelPricing | None = None,
    budgets: Budgets | None = None,
    max_retries: int = 2,
    ask: bool | None = None,
    max_tokens: int | None = 20,
    trace_budgets: bool = False,
) -> AgentPlan:
    return AgentPlan(
        swarm_name="s",
        entry_agent="worker",
        agents=["worker"],
        agent_name="worker",
        model=ModelPlan(
            name="gpt",
            provider="openai",
            model="gpt-test",
            max_retries=max_retries,
            limits=limits,
            pricing=pricing,
            timeout_seconds=2,
        ),
        budgets=budgets or Budgets(),
        max_tokens=max_tokens,
        ask_permits=limits is not None if ask is None else ask,
        trace_budgets=trace_budgets,
        state_dir="/nonexistent",
    )


class FakeOrchestrator:
    """Answers permit requests (grant, or ``refuse`` with an error) and keeps what was said."""

    def __init__(self) -> None:
        self.correlations = Correlations()
        self.requests: list[ModelPermitRequest] = []
        self.reports: list[ModelUsage] = []
        self.refuse: IpcError | None = None
        self.hold = False
        """Answer no permit request (to test waits that end otherwise)."""
        self.asked = asyncio.Event()

    def send(self, message: IpcMessage) -> None:
        body = read_event(message)  # type: ignore[arg-type]
        if isinstance(body, ModelPermitRequest):
            self.requests.append(body)
            self.asked.set()
            if not self.hold:
                answer = ModelPermitResult(0, self.refuse)
                asyncio.get_running_loop().call_soon(
                    self.correlations.resolve, message.correlation_id, answer
                )
        elif isinstance(body, ModelUsage):
            self.reports.append(body)

    def link(self) -> OrchestratorLink:
        return OrchestratorLink(
            agent_name="worker",
            swarm_name="s",
            entry_agent="worker",
            agents=["worker"],
            default_timeout_ms=60_000,
            send=self.send,
            correlations=self.correlations,
        )


class ScriptedCalls:
    """A model that answers from a list: a response, or a ModelCallError to raise."""

    def __init__(self, *outcomes: ModelResponse | ModelCallError) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, ModelCallError):
            raise outcome
        return outcome


def answer(prompt: int = 100, completion: int = 20) -> ModelResponse:
    return ModelResponse(
        text="ok", usage=TokenUsage(prompt_tokens=prompt, completion_tokens=completion)
    )


def turn_scope(
    tmp_path: Path, instance_usage: Usage | None = None, events: list[dict[str, Any]] | None = None
) -> TurnScope:
    seen: list[dict[str, Any]] = [] if events is None else events
    return TurnScope(
        agent_name="worker",
        instance_key="default",
        turn_id="turn-1",
        trace_id=TRACE,
        workdir=tmp_path,
        logger=structlog.get_logger(),
        events=lambda event: seen.append(event.to_builtins()),
        instance_usage=instance_usage or Usage(),
    )


def request(max_tokens: int | None = 20) -> ModelRequest:
    """400 characters in (an estimate of 101 tokens), ``max_tokens`` out."""
    message = Message(id="m1", role="user", content="x" * 400)
    return ModelRequest(messages=[message], tools=[], max_tokens=max_tokens)


REQUEST = request()
"""Reserves 101 tokens in and 20 out: 121."""


async def test_a_turn_stops_before_a_call_whose_reservation_does_not_fit(tmp_path: Path) -> None:
    budgets = Budgets(turn=BudgetCeilings(total_tokens=250))
    governor = ModelGovernor(plan(budgets=budgets))
    model = ScriptedCalls(answer(100, 20))
    turn = turn_scope(tmp_path)
    for _ in range(2):  # 0 and 120 used before each: 121 more fits under 250
        await governor.complete(model, REQUEST, turn)
    with pytest.raises(ModelCallError) as refused:
        await governor.complete(model, REQUEST, turn)
    assert refused.value.code == "E_BUDGET_EXCEEDED"
    assert str(refused.value) == (
        "turn budget exceeded: totalTokens 240 of 250 used by this Turn of 'worker', and this "
        "call may take up to 121; the model was not called"
    )
    assert model.calls == 2


async def test_a_call_that_uses_more_than_it_reserved_is_charged_all_of_it(
    tmp_path: Path,
) -> None:
    budgets = Budgets(turn=BudgetCeilings(total_tokens=250))
    governor = ModelGovernor(plan(budgets=budgets))
    model = ScriptedCalls(answer(300, 20))  # the estimate of 101 was short
    turn = turn_scope(tmp_path)
    await governor.complete(model, REQUEST, turn)
    assert turn.usage.total_tokens == 320
    with pytest.raises(ModelCallError, match=r"^turn budget exceeded: totalTokens 320 of 250 used"):
        await governor.complete(model, REQUEST, turn)
    assert model.calls == 1


async def test_without_max_tokens_a_call_reserves_the_default_output(tmp_path: Path) -> None:
    budgets = Budgets(turn=BudgetCeilings(output_tokens=999))
    governor = ModelGovernor(plan(budgets=budgets, max_tokens=None))
    model = ScriptedCalls(answer())
    with pytest.raises(ModelCallError, match=r"this call may take up to 1000;"):
        await governor.complete(model, request(max_tokens=None), turn_scope(tmp_path))
    assert model.calls == 0


async def test_the_turn_budget_names_its_figures_and_is_recorded(tmp_path: Path) -> None:
    budgets = Budgets(turn=BudgetCeilings(output_tokens=30))
    governor = ModelGovernor(plan(budgets=budgets))
    model = ScriptedCalls(answer(100, 20))
    # Each call reserves 10 out, and the model answers 20: the second call fits (20 + 10),
    # the third finds the ceiling itself passed.
    small = request(max_tokens=10)
    events: list[dict[str, Any]] = []
    turn = turn_scope(tmp_path, events=events)
    await governor.complete(model, small, turn)
    await governor.complete(model, small, turn)
    with pytest.raises(ModelCallError) as refused:
        await governor.complete(model, small, turn)
    assert model.calls == 2
    assert str(refused.value) == (
        "turn budget exceeded: outputTokens 40 of 30 used by this Turn of 'worker'; "
        "the model was not called"
    )
    exceeded = [e for e in events if e["type"] == "budget.exceeded"]
    assert len(exceeded) == 1
    assert {k: exceeded[0][k] for k in ("budget", "figure", "used", "limit")} == {
        "budget": "turn",
        "figure": "outputTokens",
        "used": 40,
        "limit": 30,
    }


async def test_an_instance_budget_spans_turns(tmp_path: Path) -> None:
    budgets = Budgets(instance=BudgetCeilings(input_tokens=250))
    governor = ModelGovernor(plan(budgets=budgets))
    model = ScriptedCalls(answer(100, 20))
    lasting = Usage()
    await governor.complete(model, REQUEST, turn_scope(tmp_path, lasting))
    await governor.complete(model, REQUEST, turn_scope(tmp_path, lasting))
    with pytest.raises(
        ModelCallError,
        match=r"instance budget exceeded: inputTokens 200 of 250 used by conversation instance "
        r"'default' of 'worker', and this call may take up to 101;",
    ):
        await governor.complete(model, REQUEST, turn_scope(tmp_path, lasting))
    assert lasting.calls == 2


async def test_cost_comes_from_the_models_pricing(tmp_path: Path) -> None:
    pricing = ModelPricing(input_per_million_tokens=2.5, output_per_million_tokens=10)
    budgets = Budgets(turn=BudgetCeilings(cost=0.0005))
    governor = ModelGovernor(plan(pricing=pricing, budgets=budgets))
    turn = turn_scope(tmp_path)
    # Each call reserves 101 in and 20 out: 0.0004525.
    response = await governor.complete(ScriptedCalls(answer(100, 20)), REQUEST, turn)
    assert response.usage is not None
    assert response.usage.cost == pytest.approx(0.00045)
    assert turn.usage.cost == pytest.approx(0.00045)
    with pytest.raises(
        ModelCallError, match=r"cost 0\.00045 of 0\.0005 .* this call may take up to 0\.000452;"
    ):
        await governor.complete(ScriptedCalls(answer(100, 20)), REQUEST, turn)


async def test_a_call_with_limits_asks_a_permit_and_reports_its_usage(tmp_path: Path) -> None:
    orchestrator = FakeOrchestrator()
    limits = ModelLimits(tokens_per_minute=10_000, pool="key")
    governor = ModelGovernor(plan(limits=limits), orchestrator.link())
    await governor.complete(ScriptedCalls(answer(100, 20)), REQUEST, turn_scope(tmp_path))
    [asked] = orchestrator.requests
    assert (asked.pool, asked.trace_id, asked.wait_ms) == ("key", TRACE, 2000)
    assert asked.estimated_tokens == 101  # 400 characters / 4, plus one
    [report] = orchestrator.reports
    assert report.permit_id.startswith("corr_")
    assert (report.pool, report.input_tokens, report.output_tokens) == ("key", 100, 20)
    assert report.retry_after_ms is None


async def test_a_call_without_limits_asks_and_reports_nothing(tmp_path: Path) -> None:
    orchestrator = FakeOrchestrator()
    governor = ModelGovernor(plan(), orchestrator.link())
    turn = turn_scope(tmp_path)
    await governor.complete(ScriptedCalls(answer()), REQUEST, turn)
    assert orchestrator.requests == []
    assert orchestrator.reports == []  # counted from the Step's event instead
    assert (turn.usage.input_tokens, turn.instance_usage.output_tokens) == (100, 20)


async def test_a_429_pauses_the_pool_and_is_retried_through_a_new_permit(
    tmp_path: Path,
) -> None:
    orchestrator = FakeOrchestrator()
    limits = ModelLimits(max_concurrent=1, pool="key")
    governor = ModelGovernor(plan(limits=limits), orchestrator.link())
    limited = ModelCallError("429", code="E_MODEL_RATE_LIMITED", retry_after=2.0)
    model = ScriptedCalls(limited, answer())
    response = await governor.complete(model, REQUEST, turn_scope(tmp_path))
    assert response.text == "ok"
    assert model.calls == 2
    assert len(orchestrator.requests) == 2
    first, second = orchestrator.reports
    assert first.retry_after_ms == 2000
    assert (first.input_tokens, first.output_tokens) == (0, 0)
    assert second.retry_after_ms is None
    assert first.permit_id != second.permit_id


async def test_retries_of_a_429_stop_at_max_retries(tmp_path: Path) -> None:
    orchestrator = FakeOrchestrator()
    limits = ModelLimits(max_concurrent=1, pool="key")
    governor = ModelGovernor(plan(limits=limits, max_retries=1), orchestrator.link())
    model = ScriptedCalls(ModelCallError("429", code="E_MODEL_RATE_LIMITED"))
    with pytest.raises(ModelCallError) as failed:
        await governor.complete(model, REQUEST, turn_scope(tmp_path))
    assert failed.value.code == "E_MODEL_RATE_LIMITED"
    assert model.calls == 2
    # Without retry-after the pause doubles: 1 s, then 2 s.
    assert [r.retry_after_ms for r in orchestrator.reports] == [1000, 2000]


async def test_a_refused_permit_ends_the_call_with_its_code(tmp_path: Path) -> None:
    orchestrator = FakeOrchestrator()
    orchestrator.refuse = IpcError("trace budget exceeded: ...", code="E_BUDGET_EXCEEDED")
    governor = ModelGovernor(plan(ask=True), orchestrator.link())
    model = ScriptedCalls(answer())
    with pytest.raises(ModelCallError) as refused:
        await governor.complete(model, REQUEST, turn_scope(tmp_path))
    assert refused.value.code == "E_BUDGET_EXCEEDED"
    assert model.calls == 0
    assert orchestrator.reports == []  # nothing held, nothing to give back


async def test_a_wait_given_up_gives_the_permit_back(tmp_path: Path) -> None:
    orchestrator = FakeOrchestrator()
    orchestrator.hold = True
    limits = ModelLimits(max_concurrent=1, pool="key")
    governor = ModelGovernor(plan(limits=limits), orchestrator.link())
    call = asyncio.ensure_future(
        governor.complete(ScriptedCalls(answer()), REQUEST, turn_scope(tmp_path))
    )
    async with asyncio.timeout(5):
        await orchestrator.asked.wait()
    call.cancel()  # the Turn was cancelled while it waited
    with pytest.raises(asyncio.CancelledError):
        await call
    [report] = orchestrator.reports
    assert report.permit_id
    assert (report.input_tokens, report.output_tokens) == (0, 0)
    assert len(orchestrator.correlations) == 0


class GatedCalls:
    """A model whose calls wait at a gate: each says when it started, and ends with the
    outcome the test sets."""

    def __init__(self) -> None:
        self.started = asyncio.Queue[asyncio.Future[ModelResponse]]()
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        outcome: asyncio.Future[ModelResponse] = asyncio.get_running_loop().create_future()
        self.started.put_nowait(outcome)
        return await outcome

    async def next_call(self) -> asyncio.Future[ModelResponse]:
        async with asyncio.timeout(5):
            return await self.started.get()


async def test_calls_under_way_hold_their_reservations_and_a_failed_one_frees_its_own(
    tmp_path: Path,
) -> None:
    # Room for one call's 121 at a time, not two.
    budgets = Budgets(turn=BudgetCeilings(total_tokens=200))
    governor = ModelGovernor(plan(budgets=budgets))
    model = GatedCalls()
    turn = turn_scope(tmp_path)
    first = asyncio.ensure_future(governor.complete(model, REQUEST, turn))
    under_way = await model.next_call()
    with pytest.raises(ModelCallError) as refused:  # the first has used nothing yet, but holds 121
        await governor.complete(model, REQUEST, turn)
    assert refused.value.code == "E_BUDGET_EXCEEDED"
    assert str(refused.value) == (
        "turn budget exceeded: totalTokens 0 of 200 used by this Turn of 'worker', 121 more is "
        "reserved by calls not yet settled, and this call may take up to 121; the model was "
        "not called"
    )
    under_way.set_exception(ModelCallError("upstream broke", code="E_MODEL_ERROR"))
    with pytest.raises(ModelCallError, match="upstream broke"):
        await first
    assert turn.usage.total_tokens == 0
    second = asyncio.ensure_future(governor.complete(model, REQUEST, turn))
    (await model.next_call()).set_result(answer(100, 20))
    assert (await second).text == "ok"  # the failed call's 121 came back
    assert model.calls == 2


async def test_a_cancelled_call_frees_its_reservation(tmp_path: Path) -> None:
    budgets = Budgets(instance=BudgetCeilings(total_tokens=200))
    governor = ModelGovernor(plan(budgets=budgets))
    model = GatedCalls()
    lasting = Usage()
    first = asyncio.ensure_future(governor.complete(model, REQUEST, turn_scope(tmp_path, lasting)))
    await model.next_call()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.ensure_future(governor.complete(model, REQUEST, turn_scope(tmp_path, lasting)))
    (await model.next_call()).set_result(answer(100, 20))
    await second
    assert lasting.total_tokens == 120


async def test_a_permit_request_carries_the_calls_reservation_for_trace_budgets(
    tmp_path: Path,
) -> None:
    orchestrator = FakeOrchestrator()
    pricing = ModelPricing(input_per_million_tokens=2.5, output_per_million_tokens=10)
    governor = ModelGovernor(
        plan(pricing=pricing, ask=True, trace_budgets=True, max_tokens=50), orchestrator.link()
    )
    await governor.complete(ScriptedCalls(answer()), request(max_tokens=50), turn_scope(tmp_path))
    [asked] = orchestrator.requests
    assert (asked.estimated_tokens, asked.max_output_tokens) == (101, 50)
    assert asked.reserved_cost == pytest.approx(101 * 2.5e-6 + 50 * 1e-5)
    [report] = orchestrator.reports  # settles it
    assert report.permit_id
    assert (report.input_tokens, report.output_tokens) == (100, 20)


def test_prompt_sizes_measure_each_message_and_tool_once_and_anything_replaced_again() -> None:
    sizes = PromptSizes()
    tool = ToolCatalogItem(name="fs__write", description="Write.", parameters={"type": "object"})
    first = [Message(id="m1", role="user", content="x" * 400)]
    assert sizes.tokens("k", first, [tool]) == (400 + 9 + 6 + 18) // 4 + 1
    result = {"status": "ok", "output": "y" * 100}
    grown = [*first, Message(id="m2", role="tool", tool_result=result)]
    expected = (400 + len(json.dumps(result)) + 9 + 6 + 18) // 4 + 1
    assert sizes.tokens("k", grown, [tool]) == expected
    assert sizes.tokens("k", grown, [tool]) == PromptSizes().tokens("k", grown, [tool])
    # A message of the same id but other content (an edited conversation) is measured anew.
    edited = [Message(id="m1", role="user", content="x" * 40), grown[1]]
    assert sizes.tokens("k", edited, []) == (40 + len(json.dumps(result))) // 4 + 1
