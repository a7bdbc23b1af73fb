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
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import Daemon
from tests.support.listening import listening
from tests.support.model_server import Answer, ModelServer, text_reply
from tests.support.wire_server import Reply, openai_completion

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
    # Methods the HTTP parser knows but the API does not serve reach the app (405, counted as
    # "other"); names no parser knows may be refused before it (400 on httptools), uncounted.
    unusual = ["PROPFIND", "MKCOL", "LOCK", "UNLOCK", "PURGE", "SEARCH", "REPORT", "MOVE"]
    with httpx2.Client(base_url=api, timeout=30) as http:
        # Their series exist before the count starts, and the scrape's own.
        assert http.request("PROPFIND", "/healthz").status_code == 405
        assert http.get("/nowhere").status_code == 404
        http.get("/metrics")
        before = http.get("/metrics").text
        chosen = random.Random(7)
        reached_the_app = 1
        for n in range(2000):
            if n % 2:
                assert http.request(unusual[n % len(unusual)], "/healthz").status_code == 405
                reached_the_app += 1
            else:
                method = "".join(chosen.choices(string.ascii_uppercase, k=10))
                status = http.request(method, "/healthz").status_code
                assert status in (400, 405)
                reached_the_app += status == 405
        for _ in range(200):
            path = "/" + "".join(chosen.choices(string.ascii_lowercase, k=12))
            assert http.get(path).status_code == 404
        after = http.get("/metrics").text
    labels = series(after, "goondan_http_requests_total")
    assert {row["method"] for row in labels} <= methods
    assert {row["route"] for row in labels} == {"/healthz", "/metrics", "unmatched"}
    other = value(after, "goondan_http_requests_total", route="/healthz", method="other")
    assert other == reached_the_app
    assert value(after, "goondan_http_requests_total", route="unmatched", method="GET") == 201
    assert http_lines(after) == http_lines(before), "HTTP metrics grew with what clients chose"


def http_lines(exposition: str) -> int:
    """How many samples of HTTP metrics an exposition has."""
    return sum(1 for line in exposition.splitlines() if line.startswith("goondan_http_"))


def inventive(names: list[list[str]]) -> Answer:
    """A model that, asked ``invent N``, calls the tools ``names[N]`` (none of which exists),
    asked ``list``, its one real tool, and answers ``done`` once the calls are answered: what a
    real model making names up does, which a scripted Model's rules may not (validate refuses a
    rule naming a tool its agents cannot call)."""

    def answer(agent: str, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] != "user":
            return text_reply("done")
        content = last["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        batch = ["agents__list"] if text == "list" else names[int(text.split()[1])]
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
            for i, n in enumerate(batch)
        ]
        return Reply(body=openai_completion({"content": None, "tool_calls": calls}, "tool_calls"))

    return answer


def inventive_swarm(directory: Path, url: str) -> Path:
    """A swarm whose one agent talks to the inventive model at ``url``."""
    path = directory / "goondan.yaml"
    path.write_text(
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: inventive}\nspec:\n"
        f"  provider: openai\n  model: gpt-test\n  baseUrl: {url}\n"
        "  apiKey: {value: sk-local}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {name: picker}\nspec:\n"
        "  modelConfig: {modelRef: Model/inventive}\n"
        '  prompt: {system: "You are picker."}\n'
        '  tools: [{ref: {kind: Tool, name: agents, package: "@goondan/base"}}]\n'
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\nspec:\n"
        "  entryAgent: Agent/picker\n  agents: [Agent/picker]\n"
    )
    return path


def test_tool_names_a_model_makes_up_are_counted_as_other(tmp_path: Path) -> None:
    names = [[f"made_up_{secrets.token_hex(4)}__call" for _ in range(30)] for _ in range(10)]
    with ModelServer(inventive(names)) as model:
        inventive_swarm(tmp_path, model.url)
        daemon, api = listening(tmp_path, "goondan.yaml")
        try:
            with httpx2.Client(base_url=api, timeout=30) as http:
                for index in range(len(names)):
                    answer = http.post(
                        "/v1/agents/picker/requests", json={"input": f"invent {index}"}
                    )
                    assert (answer.status_code, answer.json()["output"]) == (200, "done")
                listed = http.post("/v1/agents/picker/requests", json={"input": "list"})
                assert listed.status_code == 200
                text = http.get("/metrics").text
        finally:
            daemon.stop()
    tools = {row["tool"] for row in series(text, "goondan_tool_calls_total")}
    assert tools == {"agents__list", "other"}
    assert value(text, "goondan_tool_calls_total", agent="picker", tool="other") == 300
    assert value(text, "goondan_tool_calls_total", agent="picker", tool="agents__list") == 1
