"""``Tool.spec.idempotent`` (per export too) and ``policy.crash.maxTurnAttempts`` (Agent over
Swarm): what they become in the agent's plan, and their schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import load_bundle
from bundle.schema import json_schema
from tests.support.ledger import write_ledger_swarm


def test_idempotent_exports_reach_the_plan(tmp_path: Path) -> None:
    plan = load_bundle(write_ledger_swarm(tmp_path)).agent_plan("front", tmp_path / "state")
    [ledger] = [tool for tool in plan.tools if tool.name == "ledger"]
    idempotent = {export.name: export.idempotent for export in ledger.exports}
    assert idempotent == {
        "append": False,
        "append_die": False,
        "note_die": True,
        "poison": True,
    }


def test_a_tool_wide_idempotent_flag_applies_to_exports_that_say_nothing(tmp_path: Path) -> None:
    path = write_ledger_swarm(tmp_path)
    text = path.read_text().replace(
        "  entry: ./ledger_tool.py\n", "  entry: ./ledger_tool.py\n  idempotent: true\n"
    )
    path.write_text(
        text.replace("{name: poison, idempotent: true,", "{name: poison, idempotent: false,")
    )
    plan = load_bundle(path).agent_plan("front", tmp_path / "state")
    [ledger] = [tool for tool in plan.tools if tool.name == "ledger"]
    idempotent = {export.name: export.idempotent for export in ledger.exports}
    assert idempotent == {"append": True, "append_die": True, "note_die": True, "poison": False}


@pytest.mark.parametrize(
    ("swarm", "back", "expected_front", "expected_back"), [(2, 3, 2, 3), (5, 1, 5, 1)]
)
def test_an_agents_max_turn_attempts_overrides_the_swarms(
    tmp_path: Path, swarm: int, back: int, expected_front: int, expected_back: int
) -> None:
    bundle = load_bundle(write_ledger_swarm(tmp_path, attempts=swarm, back_attempts=back))
    state = tmp_path / "state"
    assert bundle.agent_plan("front", state).max_turn_attempts == expected_front
    assert bundle.agent_plan("back", state).max_turn_attempts == expected_back


def test_without_a_policy_a_turn_gets_three_attempts(tmp_path: Path) -> None:
    path = write_ledger_swarm(tmp_path)
    text = path.read_text().replace("    crash: {maxTurnAttempts: 2}\n", "")
    path.write_text(text.replace("  policy: {crash: {maxTurnAttempts: 3}}\n", ""))
    plan = load_bundle(path).agent_plan("back", tmp_path / "state")
    assert plan.max_turn_attempts == 3


def test_a_max_turn_attempts_below_one_is_refused(tmp_path: Path) -> None:
    path = write_ledger_swarm(tmp_path, attempts=0)
    with pytest.raises(Exception, match="maxTurnAttempts"):
        load_bundle(path)


def test_the_schema_documents_both() -> None:
    schema = json_schema()["$defs"]
    assert "E_TOOL_INTERRUPTED" in schema["ToolSpec"]["properties"]["idempotent"]["description"]
    crash = schema["CrashPolicy"]["properties"]["maxTurnAttempts"]
    assert "AGENT_CRASHED" in crash["description"]
    assert "crash" in schema["AgentPolicy"]["properties"]
    assert "crash" in schema["SwarmPolicy"]["properties"]
