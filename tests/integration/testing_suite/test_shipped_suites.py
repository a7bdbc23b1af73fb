"""The TestSuites shipped with the example swarms and with ``init``'s templates pass offline
from the cassettes shipped beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.daemon import run_cli

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]


def passes(directory: Path, bundle: str) -> dict[str, object]:
    done = run_cli("test", bundle, "--json", cwd=directory, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("example", ["schedule", "cluster"])
def test_an_example_swarms_suite_passes(example: str) -> None:
    report = passes(ROOT / "examples" / example, "goondan.yaml")
    assert report["total"] == report["passed"] == 2


@pytest.mark.parametrize("template", ["offline", "multi-agent"])
def test_a_templates_suite_passes_once_written_by_init(tmp_path: Path, template: str) -> None:
    target = tmp_path / "my-swarm"
    made = run_cli("init", str(target), "--template", template, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert list((target / "tests" / "cassettes").rglob("*.cassette.yaml"))
    report = passes(target, "goondan.yaml")
    assert report["total"] == report["passed"] == 2
