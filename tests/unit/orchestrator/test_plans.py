"""The daemon holds the parts its agents' plans have in common once."""

from __future__ import annotations

from pathlib import Path

from bundle import load_bundle
from orchestrator.plans import SharedParts

ROOT = Path(__file__).resolve().parents[3]


def test_equal_parts_are_one_object_and_every_plan_is_unchanged(tmp_path: Path) -> None:
    bundle = load_bundle(ROOT / "goondan.yaml.example")
    plans = {name: bundle.agent_plan(name, tmp_path) for name in ("coordinator", "worker")}
    parts = SharedParts()
    shared = {name: parts.share(plan) for name, plan in plans.items()}
    assert shared == plans
    coordinator, worker = shared["coordinator"], shared["worker"]
    assert coordinator.agents is worker.agents
    in_both = {t.name for t in coordinator.registry_tools} & {t.name for t in worker.registry_tools}
    assert in_both
    for name in in_both:
        [a] = [t for t in coordinator.registry_tools if t.name == name]
        [b] = [t for t in worker.registry_tools if t.name == name]
        assert a is b
    # the worker's own file-system is the coordinator's registry one: the same plan, one object
    [own] = [t for t in worker.tools if t.name == "file-system"]
    [other] = [t for t in coordinator.registry_tools if t.name == "file-system"]
    assert own is other


def test_different_parts_stay_apart(tmp_path: Path) -> None:
    bundle = load_bundle(ROOT / "goondan.yaml.example")
    plans = {name: bundle.agent_plan(name, tmp_path) for name in ("coordinator", "worker")}
    parts = SharedParts()
    shared = {name: parts.share(plan) for name, plan in plans.items()}
    assert shared["coordinator"].model is not shared["worker"].model  # two Model resources
    assert shared["coordinator"].model == plans["coordinator"].model
