"""A Turn its agent died under, twice, as the studio's trace API shows it: one Turn with three
attempts, the work each crash cut short and what became of it."""

from __future__ import annotations

from typing import Any

from ipc.runtime_events import read_event
from orchestrator.studio.events import Trace
from tests.support.studio_events import TRACE, event


def resumed(stamp: str, span: str, before: str, attempt: int, **more: Any) -> dict[str, Any]:
    fields = {"attempt": attempt, "requestId": "req_1", "resumedSpanId": before, **more}
    return event("turn.resumed", stamp, "worker", span, "ctool", **fields)


def tool(kind: str, stamp: str, span: str, step: str, call: str, name: str) -> dict[str, Any]:
    return event(kind, stamp, "worker", span, step, toolCallId=call, toolName=name)


# The coordinator hands a Turn to the worker. Attempt 1 asks for two calls and dies in them
# (``ledger__append`` is not idempotent: answered E_TOOL_INTERRUPTED; ``ledger__note`` is: run
# again); attempt 2 runs the note again and dies in its next model call; attempt 3 ends it.
DIED_TWICE = [
    event("turn.started", "20.000", "coordinator", "ct"),
    event("step.started", "20.001", "coordinator", "cs0", "ct", stepIndex=0),
    tool("tool.called", "20.002", "ctool", "cs0", "call_h", "agents__request"),
    event("turn.started", "20.010", "worker", "w1", "ctool"),
    event("step.started", "20.011", "worker", "w1s0", "w1", stepIndex=0),
    tool("tool.called", "20.020", "w1a", "w1s0", "call_a", "ledger__append"),
    tool("tool.called", "20.021", "w1b", "w1s0", "call_b", "ledger__note"),
    event("turn.started", "22.000", "worker", "w2", "ctool"),
    resumed("22.001", "w2", "w1", 2),
    tool("tool.called", "22.002", "w2b", "w2", "call_b", "ledger__note"),
    {**tool("tool.completed", "22.003", "w2b", "w2", "call_b", "ledger__note"), "status": "ok"},
    event("step.started", "22.004", "worker", "w2s1", "w2", stepIndex=1),
    event("turn.started", "24.000", "worker", "w3", "ctool"),
    resumed("24.001", "w3", "w2", 3),
    event("step.started", "24.002", "worker", "w3s1", "w3", stepIndex=1),
    event("step.completed", "24.010", "worker", "w3s1", "w3", stepIndex=1, duration=8.0),
    event("turn.completed", "24.011", "worker", "w3", "ctool", duration=11.0),
    {
        **tool("tool.completed", "24.012", "ctool", "cs0", "call_h", "agents__request"),
        "status": "ok",
    },
    event("step.completed", "24.013", "coordinator", "cs0", "ct", stepIndex=0, duration=4012.0),
    event("turn.completed", "24.014", "coordinator", "ct", duration=4014.0),
]


def traced(events: list[dict[str, Any]]) -> dict[str, Any]:
    trace = Trace(TRACE)
    for one in events:
        trace.add(read_event(one))
    return trace.to_json()


def test_a_turns_attempts_follow_each_other_as_one_turn() -> None:
    body = traced(DIED_TWICE)
    rows = body["spans"]
    assert [(r["spanId"], r["depth"]) for r in rows] == [
        ("ct", 0),
        ("cs0", 1),
        ("ctool", 2),
        ("w1", 3),
        ("w1s0", 4),
        ("w1a", 5),
        ("w1b", 5),
        ("w2", 3),
        ("w2b", 4),
        ("w2s1", 4),
        ("w3", 3),
        ("w3s1", 4),
    ]
    turns = {r["spanId"]: r for r in rows if r["agent"] == "worker" and r["kind"] == "turn"}
    assert [(t["attempt"], t["attempts"], t["attemptOf"]) for t in turns.values()] == [
        (1, 3, "w1"),
        (2, 3, "w1"),
        (3, 3, "w1"),
    ]
    assert [t["status"] for t in turns.values()] == ["interrupted", "interrupted", "ok"]
    assert (
        turns["w1"]["error"]
        == "worker's process died under this attempt; attempt 2 took the Turn up"
    )
    assert body["trace"]["status"] == "ok"  # the Turn came to what its last attempt did


def test_each_later_attempt_says_what_the_crash_before_it_cut_short() -> None:
    rows = {r["spanId"]: r for r in traced(DIED_TWICE)["spans"]}
    assert rows["w2"]["crash"] == {
        "after": 1,
        "agent": "worker",
        "replayed": False,
        "rerun": ["ledger__note"],
        "interrupted": ["ledger__append"],
        "modelAskedAgain": False,  # its model had answered: the calls were under way
    }
    assert (rows["w1a"]["status"], rows["w1a"]["resumedAs"]) == (
        "interrupted",
        "E_TOOL_INTERRUPTED",
    )
    assert (rows["w1b"]["status"], rows["w1b"]["resumedAs"]) == ("interrupted", "rerun")
    assert "resumedAs" not in rows["w1s0"]
    assert rows["w3"]["crash"]["modelAskedAgain"] is True
    assert rows["w3"]["crash"]["rerun"] == rows["w3"]["crash"]["interrupted"] == []
    assert rows["w2s1"]["resumedAs"] == "askedAgain"
    assert "crash" not in rows["w1"]


def test_another_agents_turn_under_an_interrupted_attempt_is_not_cut_short() -> None:
    events = [
        event("turn.started", "20.000", "front", "f1"),
        event("step.started", "20.001", "front", "f1s0", "f1", stepIndex=0),
        event(
            "tool.called",
            "20.002",
            "front",
            "f1t",
            "f1s0",
            toolCallId="c",
            toolName="agents__request",
        ),
        event("turn.started", "20.003", "back", "b1", "f1t"),
        event("turn.started", "21.000", "front", "f2"),
        {**event("turn.resumed", "21.001", "front", "f2"), "attempt": 2, "resumedSpanId": "f1"},
    ]
    rows = {r["spanId"]: r for r in traced(events)["spans"]}
    assert [rows[s]["status"] for s in ("f1", "f1s0", "f1t", "b1")] == [
        "interrupted",
        "interrupted",
        "interrupted",
        "running",  # back's Turn goes on; its answer reaches nobody
    ]
    assert rows["f2"]["crash"]["interrupted"] == ["agents__request"]


def test_a_trace_without_resumed_turns_is_left_as_it_is() -> None:
    events = DIED_TWICE[:7]
    rows = traced(events)["spans"]
    assert all("attempt" not in r for r in rows)
    assert {r["status"] for r in rows} == {"running"}
