"""docs/guides/testing.md as written: its example bundle recorded and replayed by
``goondan test`` with its own commands, and its Python test run by the pytest plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import run_cli
from tests.support.readme import section

pytestmark = pytest.mark.timeout(300)

PYTEST = [sys.executable, "-m", "pytest", "-p", "orchestrator.testing_suite.pytest_plugin"]
PYTEST += ["-p", "no:cacheprovider", "-q"]
GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "testing.md"


def test_the_guides_example_records_and_replays(tmp_path: Path) -> None:
    example = section("An example", GUIDE)
    [bundle] = example.blocks_of("yaml")
    (tmp_path / "goondan.yaml").write_text(bundle.text)
    commands = [c.text for block in example.blocks_of("sh") for c in block.commands()]
    assert commands == ["goondan test --record", "goondan test"]
    for command in commands:
        done = run_cli(*command.split()[1:], cwd=tmp_path, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 passed, 0 failed, 0 errors of 2 case(s)" in done.stdout
    cassettes = tmp_path / "tests" / "cassettes" / "smoke"
    assert sorted(p.name for p in cassettes.iterdir()) == [
        "delegates-a-file.cassette.yaml",
        "explains-itself.cassette.yaml",
    ]
    done = run_cli("test", "--json", "-k", "delegates", cwd=tmp_path, timeout=240)
    [case] = json.loads(done.stdout)["cases"]
    assert case["handoffs"] == ["worker"]

    [shown] = section("Cassettes", GUIDE).blocks_of("")
    swarm = tmp_path / "goondan.yaml"
    prompt = "You write files in your workspace."
    swarm.write_text(
        swarm.read_text().replace(prompt, "You write files carefully in your workspace.")
    )
    missed = run_cli("test", "-k", "delegates", cwd=tmp_path, timeout=240)
    assert missed.returncode == 1
    diff = shown.text[shown.text.index("  --- recorded request") : shown.text.index("   tools:")]
    assert diff in missed.stdout  # the miss reads as the guide shows it
    swarm.write_text(
        swarm.read_text().replace("You write files carefully in your workspace.", prompt)
    )

    [python_test] = section("Tests in Python", GUIDE).blocks_of("python")
    (tmp_path / "test_guide_example.py").write_text(python_test.text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for record in (["--goondan-record"], []):
        ran = subprocess.run(
            [*PYTEST, *record, str(tmp_path)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "3 passed" in ran.stdout  # the suite's two cases and the Python test
