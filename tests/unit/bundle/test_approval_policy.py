"""``Agent.spec.toolPolicy.approval``: what a valid one becomes in the plan, and its schema.

Broken ones are in the corpus (``approval_*.yaml``), each with the exact issues it yields.
"""

from __future__ import annotations

from pathlib import Path

from bundle import load_bundle
from bundle.schema import json_schema
from tests.support.approvals import write_approval_swarm


def test_the_policy_reaches_the_agents_plan(tmp_path: Path) -> None:
    bundle = load_bundle(write_approval_swarm(tmp_path, hasty_timeout=90))
    clerk = bundle.agent_plan("clerk", tmp_path / "state")
    assert clerk.approval_tools == ["bash__exec", "file-system__write"]
    assert clerk.approval_timeout_seconds == 3600
    hasty = bundle.agent_plan("hasty", tmp_path / "state")
    assert (hasty.approval_tools, hasty.approval_timeout_seconds) == (["file-system__write"], 90)


def test_a_policy_may_name_a_single_tool(tmp_path: Path) -> None:
    path = write_approval_swarm(tmp_path)
    path.write_text(
        path.read_text().replace(
            "      tools: [bash__exec, file-system__write]\n", "      tools: [bash__exec]\n"
        )
    )
    plan = load_bundle(path).agent_plan("clerk", tmp_path / "state")
    assert plan.approval_tools == ["bash__exec"]


def test_the_schema_documents_the_policy() -> None:
    schema = json_schema()
    policy = schema["$defs"]["ApprovalPolicy"]
    assert set(policy["properties"]) == {"tools", "timeoutSeconds"}
    assert policy["required"] == ["tools"]
    assert "E_TOOL_APPROVAL_TIMEOUT" in policy["properties"]["timeoutSeconds"]["description"]
