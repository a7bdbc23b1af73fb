"""A case's expectations held against what its run showed (the runtime events its daemon
recorded): each failure names what was expected and what was found."""

from __future__ import annotations

from typing import Any

from bundle.spec_testsuite import Expectation
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import (
    ProcessSpawnedEvent,
    StepCompletedEvent,
    TokenCounts,
    ToolCalledEvent,
    ToolCompletedEvent,
)
from orchestrator.testing_suite.expect import failures, subset
from orchestrator.testing_suite.observe import Observation


def expect(**fields: Any) -> Expectation:
    return Expectation.model_validate(fields)


def run(*calls: tuple[str, str, dict[str, Any], str], answer: str = "done") -> Observation:
    """What a run showed: ``(agent, tool, args, status)`` calls, one Step each, and the
    answer."""
    seen = Observation()
    for pid, agent in enumerate(("lead", "helper"), 100):
        seen.observe(ProcessSpawnedEvent(agent_name=agent, pid=pid))
    for i, (agent, tool, args, status) in enumerate(calls):
        seen.observe(
            ToolCalledEvent(agent_name=agent, tool_name=tool, tool_call_id=f"c{i}", args=args)
        )
        seen.observe(
            ToolCompletedEvent(
                agent_name=agent, tool_name=tool, tool_call_id=f"c{i}", status=status
            )
        )
        seen.observe(StepCompletedEvent(agent_name=agent, token_usage=TokenCounts(total_tokens=10)))
    seen.answers.append(DelegateAnswer("ok", output=answer))
    return seen


HANDOFF = run(
    ("lead", "agents__request", {"target": "helper", "input": "write"}, "ok"),
    ("helper", "file-system__write", {"path": "a.txt", "content": "x", "append": False}, "ok"),
    answer="lead done: wrote a.txt",
)


def test_a_run_that_meets_every_expectation_passes() -> None:
    wanted = expect(
        answer={
            "contains": ["lead done", "a.txt"],
            "matches": "^lead",
            "equals": "lead done: wrote a.txt",
        },
        handoffs=["helper"],
        tools=[
            {"name": "agents__request"},
            {"name": "file-system__write", "args": {"path": "a.txt"}},
        ],
        maxSteps=2,
        maxTokens=20,
    )
    assert failures(wanted, HANDOFF) == []
    assert [call.pid for call in HANDOFF.tools] == [100, 101]


def test_each_unmet_expectation_names_expected_and_found() -> None:
    wanted = expect(
        answer={"contains": "nope", "matches": "^x", "equals": "y"},
        handoffs=["lead"],
        tools=[{"name": "file-system__write", "args": {"path": "b.txt"}}],
        maxSteps=1,
        maxTokens=5,
    )
    assert failures(wanted, HANDOFF) == [
        "answer: expected it to contain 'nope', got 'lead done: wrote a.txt'",
        "answer: expected it to match /^x/, got 'lead done: wrote a.txt'",
        "answer: expected 'y', got 'lead done: wrote a.txt'",
        "handoffs: expected ['lead'], got ['helper']",
        'tools: expected file-system__write({"path": "b.txt"}) in order, got '
        'agents__request({"input": "write", "target": "helper"}), '
        'file-system__write({"append": false, "content": "x", "path": "a.txt"})',
        "steps: expected at most 1, took 2",
        "tokens: expected at most 5, used 20",
    ]


def test_tool_calls_in_order_or_anywhere() -> None:
    reversed_order = [{"name": "file-system__write"}, {"name": "agents__request"}]
    assert failures(expect(tools={"calls": reversed_order, "inOrder": False}), HANDOFF) == []
    [failure] = failures(expect(tools=reversed_order), HANDOFF)
    assert failure.startswith("tools: expected agents__request({}) in order, got ")


def test_errors_fail_a_case_unless_it_expects_them() -> None:
    broken = run(("lead", "agents__request", {"target": "helper"}, "error"))
    broken.answers[-1] = DelegateAnswer.failure(IpcError("the model is gone", code="E_MODEL"))
    assert failures(expect(), broken) == [
        "Turn 1 failed: E_MODEL: the model is gone",
        "tool call agents__request of agent 'lead' failed",
    ]
    assert failures(expect(noErrors=False), broken) == []


def test_arguments_match_as_nested_subsets() -> None:
    assert subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3})
    assert not subset({"a": {"b": 2}}, {"a": {"b": 1}})
    assert not subset({"a": 1}, {})
    assert subset([1, 2], [1, 2])
    assert not subset([1], [1, 2])
