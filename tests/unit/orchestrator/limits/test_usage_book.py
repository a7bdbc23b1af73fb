"""A trace's root in the usage book: the agent whose Turn began it, whoever called a model first."""

from __future__ import annotations

from ipc.runtime_events import AnyEvent, read_event
from orchestrator.limits.usage import UsageBook, trace_root
from orchestrator.studio.events import Trace

BUDGETS = {"coordinator": {"totalTokens": 1000.0}}


def turn_started(agent: str, span: str, parent: str | None = None) -> AnyEvent:
    event = {
        "type": "turn.started",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "agentName": agent,
        "traceId": "t1",
        "spanId": span,
    }
    return read_event({**event, "parentSpanId": parent} if parent else event)


def step_completed(agent: str, tokens: int) -> AnyEvent:
    return read_event(
        {
            "type": "step.completed",
            "timestamp": "2026-01-01T00:00:01.000Z",
            "agentName": agent,
            "traceId": "t1",
            "spanId": f"step-{agent}",
            "tokenUsage": {"promptTokens": tokens, "completionTokens": 1},
        }
    )


def handoff() -> list[AnyEvent]:
    """A coordinator's Turn hands work to a worker, whose Step ends before the coordinator's."""
    return [
        turn_started("coordinator", "turn-c"),
        turn_started("worker", "turn-w", parent="tool-c"),
        step_completed("worker", 10),
        step_completed("coordinator", 20),
    ]


def test_the_root_is_the_turn_started_by_no_caller() -> None:
    assert trace_root(turn_started("coordinator", "a")) == "coordinator"
    assert trace_root(turn_started("worker", "b", parent="tool")) is None
    assert trace_root(step_completed("coordinator", 1)) is None


def test_the_book_names_the_entry_agent_though_the_delegate_reported_first() -> None:
    book = UsageBook(lambda agent: BUDGETS.get(agent, {}))
    for event in handoff():
        book.observe(event, count=lambda agent: True)
    entry = book.traces["t1"]
    assert entry.root == "coordinator"
    assert entry.limits == BUDGETS["coordinator"]  # the budget of the agent it entered at
    assert entry.agents == {"coordinator", "worker"}
    assert (entry.usage.calls, entry.usage.input_tokens) == (2, 30)
    assert entry.started_at == "2026-01-01T00:00:00.000Z"


def test_a_turn_start_seen_late_corrects_the_root_and_its_budget() -> None:
    book = UsageBook(lambda agent: BUDGETS.get(agent, {}))
    book.observe(step_completed("worker", 10), count=lambda agent: True)
    assert book.traces["t1"].root == "worker"
    book.observe(turn_started("coordinator", "turn-c"), count=lambda agent: True)
    assert book.traces["t1"].root == "coordinator"
    assert book.traces["t1"].limits == BUDGETS["coordinator"]


def test_the_studio_shows_the_same_root() -> None:
    trace = Trace("t1")
    for event in handoff():
        trace.add(event)
    root = trace.root()
    assert root is not None
    assert root.agent == "coordinator"
