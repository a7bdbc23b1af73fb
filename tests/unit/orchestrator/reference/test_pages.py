"""The generated reference pages leave nothing out: every command and option of the parser,
every kind and field of the schema, every runtime event type."""

from __future__ import annotations

import argparse
import re

from bundle.schema import json_schema
from bundle.spec_kinds import SPEC_MODELS
from ipc.runtime_events import EventType
from ipc.runtime_events.types import HEADER_TYPE
from orchestrator.cli.parser import build_parser
from orchestrator.reference import PAGES, cli_page, events_page, resources_page
from orchestrator.reference.__main__ import main


def test_every_command_and_option_has_an_entry() -> None:
    page = cli_page()
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = []
    for name, sub in commands.choices.items():
        if f"\n## `{name}`\n" not in page:
            missing.append(name)
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if f"`{flag}" not in page:
                    missing.append(f"{name} {flag}")
    assert missing == []


def test_every_kind_and_field_has_an_entry() -> None:
    page = resources_page()
    defs = json_schema()["$defs"]
    missing = []
    for kind, model in SPEC_MODELS.items():
        if f"\n## {kind}\n" not in page:
            missing.append(kind)
        for field in defs[model.__name__].get("properties", {}):
            if f"| `{field}`" not in page:
                missing.append(f"{kind}.{field}")
    assert missing == []
    assert "| `policy.crash.maxTurnAttempts` |" in page  # nested fields are flattened


def test_every_event_type_has_an_entry() -> None:
    page = events_page()
    missing = [t.value for t in EventType if t.value != HEADER_TYPE and f"`{t.value}`" not in page]
    assert missing == []


def test_a_page_prints_from_the_command_line(capsys: object) -> None:
    assert main(["reference/events.md"]) == 0
    assert main(["reference/nothing.md"]) == 2
    assert main([]) == 0
    assert set(PAGES) == {
        "reference/resources.md",
        "reference/cli.md",
        "reference/events.md",
        "reference/http-api.md",
        "reference/metrics.md",
    }


def test_every_metric_served_has_an_entry() -> None:
    from orchestrator.http.metrics import SwarmMetrics
    from orchestrator.reference.metrics import declared_metrics, metrics_page
    from tests.support.fake_swarm import FakeSwarm

    served = re.findall(
        r"^# TYPE (goondan_\w+) (\w+)$", SwarmMetrics(FakeSwarm()).exposition().decode(), re.M
    )
    assert len(served) > 20
    page = metrics_page()
    kinds = {name: kind for name, kind, _, _ in declared_metrics()}
    missing = []
    for name, kind in served:
        base = name.removesuffix("_total").removesuffix("_created")
        if f"`{base}`" not in page or kinds.get(base) != kind:
            missing.append(f"{name} {kind}")
    assert missing == []


def test_every_route_has_an_entry() -> None:
    from orchestrator.http.front_doors import front_door_operations
    from orchestrator.http.openapi import OPERATIONS, path_template
    from orchestrator.reference import http_api_page

    page = http_api_page()
    routes = {**OPERATIONS, **front_door_operations()}
    missing = [f"{m} {p}" for m, p in routes if f"`{m} {path_template(p)}`" not in page]
    assert missing == []
