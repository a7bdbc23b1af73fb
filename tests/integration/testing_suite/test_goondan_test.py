"""``goondan test`` for real: a suite recorded against a local Chat Completions server, then
replayed with the server seeing nothing; a changed prompt, a wrong expectation and a bad suite
each reported as a user needs to see them."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import run_cli
from tests.support.model_server import ModelServer
from tests.support.suite_swarm import API_KEY, answer, write_bundle

pytestmark = pytest.mark.timeout(300)


def goondan_test(bundle: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``goondan test --json`` on ``bundle``: exit status, the JSON object, stderr."""
    done = run_cli("test", str(bundle), "--json", *args, cwd=bundle, timeout=240)
    data = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, data, done.stderr


def point_at(bundle: Path, url: str) -> None:
    """Aim the bundle's Model at the server at ``url``."""
    swarm = bundle / "goondan.yaml"
    swarm.write_text(re.sub(r"baseUrl: \S+", f"baseUrl: {url}", swarm.read_text()))


def by_case(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {case["case"]: case for case in report["cases"]}


def stable(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What must not change between replays (not times, not process ids)."""
    out = []
    for case in report["cases"]:
        tools = [{k: v for k, v in call.items() if k != "pid"} for call in case["tools"]]
        out.append({**{k: v for k, v in case.items() if k != "seconds"}, "tools": tools})
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The suite's bundle with every case recorded, and how many calls the server answered."""
    directory = tmp_path_factory.mktemp("recorded")
    with ModelServer(answer) as server:
        bundle = write_bundle(directory / "swarm", server.url)
        code, report, stderr = goondan_test(bundle, "--record")
        assert code == 0, (report, stderr)
        calls = len(server.calls)
    return bundle, calls


@pytest.fixture
def bundle(recorded: tuple[Path, int], tmp_path: Path) -> Path:
    """A copy of the recorded bundle, its own to change."""
    copy = tmp_path / "swarm"
    shutil.copytree(recorded[0], copy)
    return copy


def test_a_recorded_suite_replays_offline_three_times_alike(
    recorded: tuple[Path, int], bundle: Path
) -> None:
    _, calls = recorded
    assert calls >= 9
    cassettes = sorted((bundle / "tests" / "cassettes" / "basics").iterdir())
    assert [p.name for p in cassettes] == [
        "greeting.cassette.yaml",
        "handoff.cassette.yaml",
        "helper-alone.cassette.yaml",
        "reads-seed.cassette.yaml",
        "two-turns.cassette.yaml",
    ]
    for cassette in cassettes:
        text = cassette.read_text()
        assert API_KEY not in text
        assert "uthorization" not in text
    greeting = (bundle / "tests" / "cassettes" / "basics" / "greeting.cassette.yaml").read_text()
    assert "\n  chunks:\n  - hi fro\n  - m lead\n" in greeting  # the Turn streamed: pieces kept

    reports = []
    with ModelServer(answer) as server:
        point_at(bundle, server.url)
        for _ in range(3):
            code, report, stderr = goondan_test(bundle)
            assert code == 0, (report, stderr)
            reports.append(report)
        assert server.calls == []  # every answer came from the cassettes
    assert stable(reports[0]) == stable(reports[1]) == stable(reports[2])
    assert reports[0]["passed"] == 5
    assert by_case(reports[0])["reads-seed"]["answer"] == "seed says: planted"  # the fixture

    handoff = by_case(reports[0])["handoff"]
    assert handoff["handoffs"] == ["helper"]
    request, write = handoff["tools"]
    assert (request["agent"], write["agent"]) == ("lead", "helper")
    assert request["pid"] != write["pid"]  # each agent's tools ran in its own process


def test_a_changed_prompt_fails_only_the_cases_of_that_agent(bundle: Path) -> None:
    swarm = bundle / "goondan.yaml"
    swarm.write_text(swarm.read_text().replace("You write files.", "You write careful files."))
    code, report, _ = goondan_test(bundle)
    assert code == 1
    cases = by_case(report)
    assert {name: case["status"] for name, case in cases.items()} == {
        "handoff": "failed",
        "greeting": "passed",
        "helper-alone": "failed",
        "two-turns": "passed",
        "reads-seed": "failed",
    }
    first = cases["helper-alone"]["failures"][0]
    assert "no recorded model call of agent 'helper'" in first
    assert (
        "\n - role: system\n"
        "-  content: You are helper. You write files.\n"
        "+  content: You are helper. You write careful files.\n"
    ) in first
    assert cases["handoff"]["failures"][0].startswith("no recorded model call of agent 'helper'")


def test_a_wrong_expectation_names_what_was_expected_and_found(bundle: Path) -> None:
    suite = bundle / "testsuite.yaml"
    suite.write_text(
        suite.read_text()
        .replace("handoffs: [helper]", "handoffs: [lead]")
        .replace("args: {path: report.txt}", "args: {path: summary.txt}")
    )
    junit = bundle / "results.xml"
    code, report, _ = goondan_test(bundle, "--junit", str(junit))
    assert code == 1
    failures = by_case(report)["handoff"]["failures"]
    assert "handoffs: expected ['lead'], got ['helper']" in failures
    assert any(
        f.startswith('tools: expected file-system__write({"path": "summary.txt"}) in order, got ')
        and '"path": "report.txt"' in f
        for f in failures
    ), failures

    root = ET.parse(junit).getroot()
    [suite_element] = root.findall("testsuite")
    assert suite_element.get("name") == "basics"
    assert (suite_element.get("tests"), suite_element.get("failures")) == ("5", "1")
    assert suite_element.get("errors") == "0"
    failed = [c for c in suite_element.findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["handoff"]


def test_a_bad_suite_exits_4_naming_file_line_and_field(bundle: Path) -> None:
    suite = bundle / "testsuite.yaml"
    suite.write_text(suite.read_text().replace("maxSteps: 2", "maxStep: 2"))
    done = run_cli("test", str(bundle), cwd=bundle, timeout=120)
    assert done.returncode == 4, done.stderr
    line = suite.read_text().splitlines().index("        maxStep: 2") + 1
    assert f"testsuite.yaml:{line}: TestSuite/basics: spec.cases[3].expect.maxStep:" in done.stderr


def test_k_selects_and_update_records_only_the_failing_cases(bundle: Path) -> None:
    code, report, _ = goondan_test(bundle, "-k", "greet or two-*")
    assert code == 0
    assert [c["case"] for c in report["cases"]] == ["greeting", "two-turns"]

    cassettes = bundle / "tests" / "cassettes" / "basics"
    untouched = (cassettes / "greeting.cassette.yaml").read_text()
    swarm = bundle / "goondan.yaml"
    swarm.write_text(swarm.read_text().replace("You write files.", "You write careful files."))
    with ModelServer(answer) as server:
        point_at(bundle, server.url)
        code, report, _ = goondan_test(bundle, "--update")
        assert code == 0, report
        assert {c.agent for c in server.calls} >= {"helper"}
    recorded = [c["case"] for c in report["cases"] if c["recorded"]]
    assert sorted(recorded) == ["handoff", "helper-alone", "reads-seed"]
    assert (cassettes / "greeting.cassette.yaml").read_text() == untouched
    assert "You write careful files." in (cassettes / "handoff.cassette.yaml").read_text()


def test_an_unreadable_cassette_is_an_error_of_its_case(bundle: Path) -> None:
    broken = bundle / "tests" / "cassettes" / "basics" / "greeting.cassette.yaml"
    broken.write_text("agent: [unclosed\n")
    code, report, _ = goondan_test(bundle, "-k", "greeting")
    assert code == 1
    [case] = report["cases"]
    assert case["status"] == "error"
    assert "greeting.cassette.yaml cannot be read" in case["failures"][0]
    assert "record the case again (--record)" in case["failures"][0]
