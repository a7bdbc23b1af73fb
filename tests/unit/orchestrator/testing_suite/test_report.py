"""What ``goondan test`` prints of its results: JUnit XML a CI reads, one JSON object, a
table; and which cases ``-k`` selects."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from bundle.spec_testsuite import TestCase
from orchestrator.testing_suite.cases import SuiteCase, selected
from orchestrator.testing_suite.report import json_report, junit_xml, table
from orchestrator.testing_suite.runner import CaseResult, Status


def case(suite: str, name: str) -> SuiteCase:
    return SuiteCase(
        suite=suite,
        case=TestCase.model_validate({"name": name, "input": "hi"}),
        swarm="default",
        entry_agent="lead",
        agents=("lead",),
        fixtures=(),
        base_dir=Path("."),
    )


def result(suite: str, name: str, status: Status, *failures: str) -> CaseResult:
    return CaseResult(case(suite, name), status, list(failures), seconds=0.5)


RESULTS = [
    result("smoke", "greets", "passed"),
    result("smoke", "hands-off", "failed", "handoffs: expected ['a'], got ['b']", "steps: x"),
    result("deep", "reads", "error", "no cassette x.cassette.yaml: record the case first"),
]


def test_junit_counts_per_suite_and_overall() -> None:
    root = ET.fromstring(junit_xml(RESULTS))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")
    smoke, deep = root.findall("testsuite")
    assert (smoke.get("name"), smoke.get("tests"), smoke.get("failures")) == ("smoke", "2", "1")
    assert (deep.get("name"), deep.get("errors")) == ("deep", "1")
    failed = smoke.findall("testcase")[1].find("failure")
    assert failed is not None
    assert failed.get("message") == "handoffs: expected ['a'], got ['b']"
    assert failed.text == "handoffs: expected ['a'], got ['b']\n\nsteps: x"
    error = deep.find("testcase/error")
    assert error is not None
    assert "no cassette" in str(error.get("message"))


def test_json_and_table_say_the_same() -> None:
    data = json_report(RESULTS, 1.25)
    assert (data["total"], data["passed"], data["failed"], data["errors"]) == (3, 1, 1, 1)
    assert data["ok"] is False
    cases = data["cases"]
    assert isinstance(cases, list)
    assert [c["id"] for c in cases] == ["smoke/greets", "smoke/hands-off", "deep/reads"]
    shown = table(RESULTS, 1.25)
    assert "PASS      0.5s  smoke/greets" in shown
    assert "FAIL smoke/hands-off\n  handoffs: expected ['a'], got ['b']\n  steps: x" in shown
    assert shown.endswith("1 passed, 1 failed, 1 errors of 3 case(s) in 1.2 s")


def test_k_takes_substrings_globs_and_alternatives() -> None:
    cases = [case("smoke", "greets"), case("smoke", "hands-off"), case("deep", "reads")]
    assert [c.id for c in selected(cases, None)] == [c.id for c in cases]
    assert [c.id for c in selected(cases, "smoke/")] == ["smoke/greets", "smoke/hands-off"]
    assert [c.id for c in selected(cases, "*-off or reads")] == ["smoke/hands-off", "deep/reads"]
    assert selected(cases, "nothing") == []
