"""The pytest plugin for real: a bundle's TestSuite cases are pytest items, and a test written
in Python gets a swarm on its own cassette; recorded once against a local model server, both
replay offline."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.model_server import ModelServer
from tests.support.suite_swarm import answer, write_bundle

pytestmark = pytest.mark.timeout(300)

PYTHON_TEST = """\
from pathlib import Path

BUNDLE = Path(__file__).parent


def test_a_handoff_from_python(goondan_swarm):
    swarm = goondan_swarm(BUNDLE)
    first = swarm.ask("delegate: write the report")
    assert first.ok, first.error
    assert first.output == "lead done: helper wrote report.txt"
    assert swarm.seen.handoffs == ["helper"]
    assert [call.name for call in swarm.seen.tools] == ["agents__request", "file-system__write"]
    assert swarm.misses() == []
"""


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest with the plugin on ``directory`` (its own rootdir: none of our options)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "orchestrator.testing_suite.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            *args,
            str(directory),
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_cases_are_items_and_the_fixture_replays_what_it_recorded(tmp_path: Path) -> None:
    directory = tmp_path / "swarm"
    with ModelServer(answer) as server:
        write_bundle(directory, server.url)
        (directory / "pytest.ini").write_text("[pytest]\n")
        (directory / "test_swarm.py").write_text(PYTHON_TEST)
        recording = run_pytest(directory, "--goondan-record")
        assert recording.returncode == 0, recording.stdout + recording.stderr
        recorded_calls = len(server.calls)
    assert recorded_calls > 0
    assert (directory / "tests/cassettes/python/test_a_handoff_from_python.cassette.yaml").is_file()

    report = tmp_path / "junit.xml"
    replay = run_pytest(directory, f"--junitxml={report}", "-k", "not greeting")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    cases = ET.parse(report).getroot().iter("testcase")
    assert sorted(c.get("name") for c in cases) == [
        "basics/handoff",
        "basics/helper-alone",
        "basics/reads-seed",
        "basics/two-turns",
        "test_a_handoff_from_python",
    ]


def test_a_failing_case_shows_its_failures(tmp_path: Path) -> None:
    directory = tmp_path / "swarm"
    write_bundle(directory, "http://127.0.0.1:9/v1")
    (directory / "pytest.ini").write_text("[pytest]\n")
    done = run_pytest(directory, "-k", "greeting")
    assert done.returncode == 1
    assert "basics/greeting" in done.stdout
    assert "no cassette" in done.stdout
    assert "goondan test --record" in done.stdout
