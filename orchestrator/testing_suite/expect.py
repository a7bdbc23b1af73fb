"""The checks of a case's ``expect``: each failure says what was expected and what was found."""

from __future__ import annotations

import json
import re

from bundle.spec_testsuite import Expectation, ToolCallExpectation
from orchestrator.testing_suite.observe import Observation, ToolCallSeen


def failures(expect: Expectation, seen: Observation) -> list[str]:
    """Every way ``seen`` falls short of ``expect`` (empty: the case passes)."""
    found: list[str] = []
    if expect.no_errors:
        for i, answer in enumerate(seen.answers, 1):
            if not answer.ok and answer.error is not None:
                found.append(f"Turn {i} failed: {answer.error.code}: {answer.error.message}")
        found += [e for e in seen.errors if e.startswith("tool call")]
    if expect.answer is not None:
        found += _answer(expect, seen.answer)
    if expect.handoffs is not None and seen.handoffs != expect.handoffs:
        found.append(f"handoffs: expected {expect.handoffs}, got {seen.handoffs}")
    if expect.tools is not None:
        found += _tools(expect.tools.calls, expect.tools.in_order, seen.tools)
    if expect.max_steps is not None and seen.steps > expect.max_steps:
        found.append(f"steps: expected at most {expect.max_steps}, took {seen.steps}")
    if expect.max_tokens is not None and seen.tokens > expect.max_tokens:
        found.append(f"tokens: expected at most {expect.max_tokens}, used {seen.tokens}")
    return found


def _answer(expect: Expectation, answer: str) -> list[str]:
    checks = expect.answer
    assert checks is not None
    found: list[str] = []
    for text in checks.contains or ():
        if text not in answer:
            found.append(f"answer: expected it to contain {text!r}, got {answer!r}")
    if checks.matches is not None and not re.search(checks.matches, answer):
        found.append(f"answer: expected it to match /{checks.matches}/, got {answer!r}")
    if checks.equals is not None and answer != checks.equals:
        found.append(f"answer: expected {checks.equals!r}, got {answer!r}")
    return found


def subset(expected: object, actual: object) -> bool:
    """Whether ``expected`` is found in ``actual``: mappings key by key (recursively), other
    values equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and subset(value, actual[key]) for key, value in expected.items()
        )
    return expected == actual


def _matches(want: ToolCallExpectation, call: ToolCallSeen) -> bool:
    return call.name == want.name and subset(want.args, call.args)


def _shown(calls: list[ToolCallSeen]) -> str:
    if not calls:
        return "no tool call"
    return ", ".join(f"{c.name}({json.dumps(c.args, sort_keys=True)})" for c in calls)


def _tools(
    wanted: list[ToolCallExpectation], in_order: bool, calls: list[ToolCallSeen]
) -> list[str]:
    if in_order:
        position = 0
        for want in wanted:
            while position < len(calls) and not _matches(want, calls[position]):
                position += 1
            if position == len(calls):
                return [
                    f"tools: expected {want.name}({json.dumps(want.args, sort_keys=True)}) "
                    f"in order, got {_shown(calls)}"
                ]
            position += 1
        return []
    return [
        f"tools: expected {want.name}({json.dumps(want.args, sort_keys=True)}), got {_shown(calls)}"
        for want in wanted
        if not any(_matches(want, call) for call in calls)
    ]
