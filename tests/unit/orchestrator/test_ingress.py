"""The ingress table of a Connection, case by case (first match wins; nothing is dropped)."""

from __future__ import annotations

from typing import Any

import pytest

from bundle.spec_connector import Ingress
from orchestrator.ingress import Destination, IngressTable, UnknownIngressAgent, as_text

AGENTS = ("coordinator", "worker", "triage")


def table(*rules: dict[str, Any]) -> IngressTable:
    return IngressTable.of(Ingress.model_validate({"rules": list(rules)}), "coordinator", AGENTS)


def test_no_rules_sends_everything_to_the_entry_agent_under_its_own_key() -> None:
    assert table().route("anything", {}, "cli:3") == Destination("coordinator", "cli:3", None)


def test_the_first_matching_rule_wins() -> None:
    rules = table(
        {"match": {"event": "github_push"}, "route": {"agentRef": "Agent/worker"}},
        {"match": {}, "route": {"agentRef": "Agent/triage"}},
        {"match": {"event": "github_push"}, "route": {"agentRef": "Agent/coordinator"}},
    )
    assert rules.route("github_push", {}, "k") == Destination("worker", "k", 0)
    assert rules.route("slack_message", {}, "k") == Destination("triage", "k", 1)


def test_every_property_of_a_match_must_equal_as_text() -> None:
    rules = table(
        {
            "match": {"event": "message", "properties": {"channel": "C1", "urgent": True, "n": 2}},
            "route": {"agentRef": "Agent/triage"},
        }
    )
    full = {"channel": "C1", "urgent": "true", "n": "2"}
    assert rules.route("message", full, "k").agent == "triage"
    assert rules.route("message", {**full, "urgent": "True"}, "k").rule is None
    assert rules.route("message", {"channel": "C1", "urgent": "true"}, "k").rule is None
    assert rules.route("other", full, "k").rule is None  # wrong event: the entry agent


def test_a_route_without_agent_goes_to_the_entry_agent() -> None:
    rules = table({"match": {"event": "e"}, "route": {"instanceKey": "shared"}})
    assert rules.route("e", {}, "own") == Destination("coordinator", "shared", 0)


@pytest.mark.parametrize(
    ("route", "properties", "expected"),
    [
        ({"instanceKey": "  fixed  "}, {"chat": "42"}, "fixed"),
        ({"instanceKeyProperty": "chat"}, {"chat": "42"}, "42"),
        ({"instanceKeyPrefix": "tg:", "instanceKeyProperty": "chat"}, {"chat": "42"}, "tg:42"),
        ({"instanceKeyPrefix": "tg:", "instanceKeyProperty": "chat"}, {"chat": ""}, "own"),
        ({"instanceKeyPrefix": "tg:", "instanceKeyProperty": "chat"}, {}, "own"),
        ({"instanceKeyPrefix": "tg:"}, {"chat": "42"}, "own"),
        ({"instanceKey": "   "}, {}, "own"),
        ({}, {}, "own"),
    ],
)
def test_the_instance_key(route: dict[str, Any], properties: dict[str, str], expected: str) -> None:
    assert table({"route": route}).route("e", properties, "own").instance_key == expected


def test_a_rule_naming_an_agent_outside_the_swarm_is_refused() -> None:
    with pytest.raises(UnknownIngressAgent, match=r"rules\[1\].*Agent/ghost"):
        table({"route": {}}, {"route": {"agentRef": "Agent/ghost"}})


def test_a_fixed_key_and_a_key_property_together_are_a_config_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        table({"route": {"instanceKey": "a", "instanceKeyProperty": "b"}})


@pytest.mark.parametrize(
    ("value", "text"), [(True, "true"), (False, "false"), (2.0, "2"), (2.5, "2.5"), (None, "")]
)
def test_yaml_scalars_read_as_event_text(value: Any, text: str) -> None:
    assert as_text(value) == text
