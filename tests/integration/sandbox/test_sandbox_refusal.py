"""Where no sandbox can be made, `run` refuses a swarm whose agents start programs, naming the
fix; `doctor` says so; `policy.sandbox: off` runs it anyway, unconfined.

The machine without user namespaces is made for real: the command runs in a user namespace
whose `user.max_user_namespaces` is 0, so neither bubblewrap nor `unshare(2)` can make another.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[3] / "goondan.yaml.example"


def without_user_namespaces(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator *args`` where no user namespace can be made."""
    inner = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -m orchestrator"
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", f'{inner} "$@"', "sh", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def example(tmp_path: Path) -> Path:
    shutil.copy(EXAMPLE, tmp_path / "goondan.yaml")
    return tmp_path


def test_run_refuses_and_names_the_fix(example: Path) -> None:
    done = without_user_namespaces(example, "run", "goondan.yaml", "--input", "write a.txt hi")
    assert done.returncode == 1, done.stderr
    assert "no sandbox for tool programs" in done.stderr
    assert "worker" in done.stderr  # the agent holding bash
    assert "policy.sandbox: off" in done.stderr
    assert "user.max_user_namespaces" in done.stderr
    # Nothing started: no agent wrote anything.
    assert not (example / ".goondan" / "agents").exists()


def test_doctor_reports_the_missing_sandbox(example: Path) -> None:
    done = without_user_namespaces(example, "doctor")
    assert done.returncode == 1
    line = next(ln for ln in done.stdout.splitlines() if "sandbox:" in ln)
    assert line.startswith("FAIL")
    assert "bwrap failed" in line
    assert "namespaces failed" in line


def test_the_sandbox_turned_off_runs_unconfined(example: Path) -> None:
    bundle = example / "goondan.yaml"
    text = bundle.read_text()
    policy = "  policy:\n"
    assert text.count(policy) == 1, "the example's Swarm policy changed: update this test"
    bundle.write_text(text.replace(policy, f'{policy}    sandbox: "off"\n'))
    done = without_user_namespaces(example, "run", "goondan.yaml", "--input", "write a.txt hi")
    assert done.returncode == 0, done.stderr
    assert "wrote 2 bytes to a.txt" in done.stdout
    doctor = without_user_namespaces(example, "doctor")
    line = next(ln for ln in doctor.stdout.splitlines() if "sandbox:" in ln)
    assert line.startswith("warn")
    assert "unconfined" in line
