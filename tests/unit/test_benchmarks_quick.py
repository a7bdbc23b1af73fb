"""The benchmarks' ``--quick`` modes: each runs with small counts, checks its own calls, and
prints its JSON with every key. No figure is checked: a benchmark gates nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.timeout(60)
def test_tool_call_quick_prints_every_figure_with_the_sandbox_beside_its_floor() -> None:
    figures = run_quick("tool_call.py")
    for label in ("async", "inline", "thread"):
        assert isinstance(figures[f"{label}_overhead_us"], float | int)
        assert set(figures["handlers"][label]) == {
            "direct_us",
            "executor_us",
            "overhead_us",
            "ratio",
        }
    box = figures["sandbox"]
    assert box["command"] == "true"
    assert box["calls"] >= 1
    # The floor is always measured; a backend is either measured or skipped with its reason.
    assert isinstance(box["off_ms"], float)
    assert isinstance(box["bare_sh_ms"], float)
    for mode in ("bwrap", "namespaces"):
        keys = {f"{mode}_ms", f"{mode}_p90_ms", f"{mode}_p99_ms", f"{mode}_added_ms"}
        assert keys <= set(box)
        if mode in box["skipped"]:
            assert box["skipped"][mode]
            assert all(box[key] is None for key in keys)
        else:
            assert mode in box["backends"]
            assert all(isinstance(box[key], float) for key in keys)
    assert ("bwrap" in box["skipped"]) == (box["bare_bwrap_ms"] is None)
    assert "bare_bwrap_added_ms" in box
    assert figures["targets"]["sandbox_bwrap_added_ms"] == 10.0
