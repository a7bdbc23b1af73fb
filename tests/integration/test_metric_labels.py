"""Metric labels against clients and models that choose their own values: a real daemon on
loopback TCP, thousands of random HTTP methods, a scripted model calling tools it made up.
The series stay as many as the configuration fixes.
"""

from __future__ import annotations

import random
import secrets
import string
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import Daemon
from tests.support.listening import listening

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def test_swarm(tmp_path: Path) -> Iterator[tuple[Daemon, str]]:
    """The test swarm listening on loopback."""
    daemon, api = listening(tmp_path)
    try:
        yield daemon, api
    finally:
        daemon.stop()


def series(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of every sample of ``name`` in a Prometheus exposition."""
    return [
        dict(sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def value(text: str, name: str, **labels: str) -> float:
    """The value of one sample (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_random_http_methods_leave_the_metrics_bounded(test_swarm: tuple[Daemon, str]) -> None:
    _, api = test_swarm
    methods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    with httpx2.Client(base_url=api, timeout=30) as http:
        # Their series exist before the count starts, and the scrape's own.
        assert http.request("BREW", "/healthz").status_code == 405
        assert http.get("/nowhere").status_code == 404
        http.get("/metrics")
        before = http.get("/metrics").text
        chosen = random.Random(7)
        for _ in range(2000):
            method = "".join(chosen.choices(string.ascii_uppercase, k=10))
            assert http.request(method, "/healthz").status_code == 405
        for _ in range(200):
            path = "/" + "".join(chosen.choices(string.ascii_lowercase, k=12))
            assert http.get(path).status_code == 404
        after = http.get("/metrics").text
    labels = series(after, "goondan_http_requests_total")
    assert {row["method"] for row in labels} <= methods
    assert {row["route"] for row in labels} == {"/healthz", "/metrics", "unmatched"}
    assert value(after, "goondan_http_requests_total", route="/healthz", method="other") == 2001
    assert value(after, "goondan_http_requests_total", route="unmatched", method="GET") == 201
    assert http_lines(after) == http_lines(before), "HTTP metrics grew with what clients chose"


def http_lines(exposition: str) -> int:
    """How many samples of HTTP metrics an exposition has."""
    return sum(1 for line in exposition.splitlines() if line.startswith("goondan_http_"))


def inventive_swarm(directory: Path, names: list[list[str]]) -> Path:
    """A swarm whose one agent, asked ``invent N``, calls the tools ``names[N]`` (none of
    which exists), and asked ``list``, its one real tool."""
    rules = ['      - when: {input: "^list$"}\n        call: {tool: agents__list}\n']
    for index, batch in enumerate(names):
        calls = ", ".join(f"{{tool: {name}}}" for name in batch)
        rules.append(f'      - when: {{input: "^invent {index}$"}}\n        calls: [{calls}]\n')
    rules.append('      - reply: "done"\n')
    path = directory / "goondan.yaml"
    path.write_text(
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: inventive}\nspec:\n"
        "  provider: scripted\n  model: rules\n  script:\n    rules:\n"
        + "".join(rules)
        + "---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {name: picker}\nspec:\n"
        "  modelConfig: {modelRef: Model/inventive}\n"
        '  tools: [{ref: {kind: Tool, name: agents, package: "@goondan/base"}}]\n'
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\nspec:\n"
        "  entryAgent: Agent/picker\n  agents: [Agent/picker]\n"
    )
    return path


def test_tool_names_a_model_makes_up_are_counted_as_other(tmp_path: Path) -> None:
    names = [[f"made_up_{secrets.token_hex(4)}__call" for _ in range(30)] for _ in range(10)]
    inventive_swarm(tmp_path, names)
    daemon, api = listening(tmp_path, "goondan.yaml")
    try:
        with httpx2.Client(base_url=api, timeout=30) as http:
            for index in range(len(names)):
                answer = http.post("/v1/agents/picker/requests", json={"input": f"invent {index}"})
                assert (answer.status_code, answer.json()["output"]) == (200, "done")
            assert (
                http.post("/v1/agents/picker/requests", json={"input": "list"}).status_code == 200
            )
            text = http.get("/metrics").text
    finally:
        daemon.stop()
    tools = {row["tool"] for row in series(text, "goondan_tool_calls_total")}
    assert tools == {"agents__list", "other"}
    assert value(text, "goondan_tool_calls_total", agent="picker", tool="other") == 300
    assert value(text, "goondan_tool_calls_total", agent="picker", tool="agents__list") == 1
