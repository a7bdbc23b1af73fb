"""The TestSuites shipped with the example swarms and with ``init``'s templates pass offline
from the cassettes shipped beside them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.daemon import run_cli
from tests.support.template_cassettes import record

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]


def passes(directory: Path, bundle: str, without: tuple[str, ...] = ()) -> dict[str, object]:
    env = {name: value for name, value in os.environ.items() if name not in without}
    done = run_cli("test", bundle, "--json", cwd=directory, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("example", ["schedule", "cluster"])
def test_an_example_swarms_suite_passes(example: str) -> None:
    report = passes(ROOT / "examples" / example, "goondan.yaml")
    assert report["total"] == report["passed"] == 2


@pytest.mark.parametrize(
    ("template", "cases"), [("offline", 2), ("multi-agent", 2), ("openai", 1), ("anthropic", 1)]
)
def test_a_templates_suite_passes_once_written_by_init(
    tmp_path: Path, template: str, cases: int
) -> None:
    """Offline, with no API key in the environment (the openai and anthropic templates'
    cassettes hold stand-in answers until their users record the real models')."""
    target = tmp_path / "my-swarm"
    made = run_cli("init", str(target), "--template", template, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert list((target / "tests" / "cassettes").rglob("*.cassette.yaml"))
    report = passes(target, "goondan.yaml", without=("OPENAI_API_KEY", "ANTHROPIC_API_KEY"))
    assert report["total"] == report["passed"] == cases


@pytest.mark.parametrize("template", ["openai", "anthropic"])
def test_the_stand_in_cassettes_shipped_are_current(tmp_path: Path, template: str) -> None:
    """Recorded again against the stand-ins, a template's cassettes are byte for byte the ones
    shipped: after a change of its prompt or tool, ``python -m
    tests.support.template_cassettes`` records them again."""
    recorded = record(template, tmp_path / "swarm")
    shipped = ROOT / "orchestrator" / "templates" / template / "tests" / "cassettes"
    assert recorded == {
        str(path.relative_to(shipped)): path.read_text()
        for path in sorted(shipped.rglob("*.cassette.yaml"))
    }
