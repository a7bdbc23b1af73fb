"""``policy.concurrency`` of an Agent and of its Swarm: which one reaches the agent's plan,
and the schema editors see. Broken values are in the corpus (``concurrency_invalid.yaml``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.schema import json_schema

CONFIG = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec:
  provider: scripted
  model: rules
  script: {{rules: [{{reply: hi}}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: plain}}
spec:
  modelConfig: {{modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: own}}
spec:
  modelConfig: {{modelRef: Model/m}}
  policy: {{concurrency: {own}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/plain
  agents: [Agent/plain, Agent/own]
{swarm_policy}"""


def plans(tmp_path: Path, own: str, swarm: str | None) -> tuple[str, str]:
    policy = f"  policy: {{concurrency: {swarm}}}\n" if swarm else ""
    path = tmp_path / "goondan.yaml"
    path.write_text(CONFIG.format(own=own, swarm_policy=policy))
    bundle = load_bundle(path)
    state = tmp_path / "state"
    return (
        bundle.agent_plan("plain", state).concurrency,
        bundle.agent_plan("own", state).concurrency,
    )


def test_enqueue_is_the_default(tmp_path: Path) -> None:
    assert plans(tmp_path, "reject", None) == ("enqueue", "reject")


@pytest.mark.parametrize("swarm", ["enqueue", "reject", "interrupt"])
def test_the_agent_overrides_the_swarm(tmp_path: Path, swarm: str) -> None:
    assert plans(tmp_path, "interrupt", swarm) == (swarm, "interrupt")


def test_a_wrong_value_names_its_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(CONFIG.format(own="Reject", swarm_policy=""))
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    (issue,) = raised.value.errors
    assert (issue.code, issue.field, issue.line) == (
        "E_CONFIG_SCHEMA_INVALID",
        "spec.policy.concurrency",
        20,
    )
    assert "enqueue" in issue.message
    assert "interrupt" in issue.message
    assert "goondan.yaml:20" in issue.format()


def test_the_schema_documents_both_fields() -> None:
    defs = json_schema()["$defs"]
    swarm = defs["SwarmPolicy"]["properties"]["concurrency"]
    assert swarm["enum"] == ["enqueue", "reject", "interrupt"]
    assert swarm["default"] == "enqueue"
    agent = defs["AgentPolicy"]["properties"]["concurrency"]
    assert "INSTANCE_BUSY" in agent["description"]
    assert "policy" in defs["AgentSpec"]["properties"]
