"""``benchmarks/testsuite_replay.py --quick``: it records and replays its suite (every case
must pass) and prints every figure. No figure is checked: a busy machine must not fail it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(200)
def test_the_replay_benchmark_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "testsuite_replay.py"), "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=190,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["cases"] == 4
    for key in ("record_seconds", "replay_seconds_per_case", "target_seconds_per_case"):
        assert isinstance(figures[key], float | int), key
    assert len(figures["replays"]) == 1
    assert figures["not_recording"]["same_model"] is True
    assert set(figures["not_recording"]) == {"direct_us", "built_us", "overhead_us", "same_model"}
