"""``Model.spec.limits``/``pricing`` and ``budgets`` on Swarm and Agent: what the plans get.

Broken declarations are in the corpus (``limits_invalid.yaml``, ``budget_invalid.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from bundle import load_bundle
from bundle.schema import json_schema

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: fast}
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: hi}]}
  limits: {pool: openai-key, maxConcurrent: 4}
  pricing: {inputPerMillionTokens: 0.15, outputPerMillionTokens: 0.6}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: smart}
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: hi}]}
  limits: {pool: openai-key, tokensPerMinute: 30000}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: free}
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: hi}]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: lead}
spec:
  modelConfig: {modelRef: Model/fast}
  budgets:
    turn: {outputTokens: 500}
    trace: {totalTokens: 9000}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/smart}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: idle}
spec:
  modelConfig: {modelRef: Model/free}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: s}
spec:
  entryAgent: Agent/lead
  agents: [Agent/lead, Agent/helper, Agent/idle]
  budgets:
    turn: {totalTokens: 20000}
    instance: {totalTokens: 1000000}
"""


def test_models_naming_one_pool_share_its_merged_limits(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM)
    bundle = load_bundle(path)
    lead = bundle.agent_plan("lead", tmp_path)
    helper = bundle.agent_plan("helper", tmp_path)
    assert lead.model.pool == helper.model.pool == "openai-key"
    assert lead.model.limits == helper.model.limits
    assert helper.model.limits is not None
    assert (helper.model.limits.max_concurrent, helper.model.limits.tokens_per_minute) == (
        4,
        30000,
    )
    assert lead.model.pricing is not None
    assert lead.model.pricing.cost(1_000_000, 1_000_000) == 0.75
    assert helper.model.pricing is None


def test_an_agents_budgets_override_the_swarms_figure_by_figure(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM)
    bundle = load_bundle(path)
    lead = bundle.agent_plan("lead", tmp_path).budgets
    assert lead.turn is not None
    assert lead.turn.limits() == {"outputTokens": 500, "totalTokens": 20000}
    assert lead.instance is not None
    assert lead.instance.limits() == {"totalTokens": 1000000}
    assert lead.trace is not None
    assert lead.trace.limits() == {"totalTokens": 9000}
    helper = bundle.agent_plan("helper", tmp_path).budgets
    assert helper.trace is None
    assert helper.turn is not None
    assert helper.turn.limits() == {"totalTokens": 20000}


def test_every_agent_asks_permits_once_a_trace_budget_exists(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM)
    idle = load_bundle(path).agent_plan("idle", tmp_path)
    assert idle.model.limits is None
    assert idle.ask_permits  # lead's trace budget counts the calls of every agent
    assert idle.trace_budgets  # and its calls reserve their tokens against it
    path.write_text(SWARM.replace("    trace: {totalTokens: 9000}\n", ""))
    idle = load_bundle(path).agent_plan("idle", tmp_path)
    assert not idle.ask_permits
    assert not idle.trace_budgets
    assert load_bundle(path).agent_plan("lead", tmp_path).ask_permits  # its Model has limits


def test_the_schema_documents_limits_pricing_and_budgets() -> None:
    defs = json_schema()["$defs"]
    assert set(defs["ModelLimits"]["properties"]) == {
        "maxConcurrent",
        "requestsPerMinute",
        "tokensPerMinute",
        "pool",
    }
    assert set(defs["Budgets"]["properties"]) == {"turn", "instance", "trace"}
    assert set(defs["BudgetCeilings"]["properties"]) == {
        "inputTokens",
        "outputTokens",
        "totalTokens",
        "cost",
    }
    assert defs["ModelPricing"]["required"] == [
        "inputPerMillionTokens",
        "outputPerMillionTokens",
    ]
