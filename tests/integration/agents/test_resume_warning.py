"""The daemon warns at start of a conversation to resume only when a Turn really was cut
short: not on every run after the first, whose finished Turns leave ``events.jsonl`` as is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
WARNING = "resuming an interrupted conversation"


def resume_events(state_dir: Path) -> list[dict[str, object]]:
    """The ``resume_pending`` lifecycle events of the runtime event log."""
    path = state_dir / "runtime-events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [
        event
        for event in map(json.loads, filter(None, lines))
        if "resume_pending" in json.dumps(event)
    ]


def test_later_runs_of_finished_turns_do_not_warn(tmp_path: Path) -> None:
    """Each one-shot run ends its Turns; the first fold rewrites the base (and empties the
    events), later ones append to it and leave the events on disk."""
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    events = tmp_path / ".goondan/agents/worker/instances/default/conversation/events.jsonl"
    for run, text in enumerate(("one", "two", "three")):
        if run == 2:
            assert events.stat().st_size > 0  # a finished Turn's events stay until compaction
        done = run_cli("run", "goondan.yaml", "--input", f"write notes.txt {text}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"wrote {len(text)} bytes to notes.txt" in done.stdout
        assert WARNING not in done.stderr
    assert not resume_events(tmp_path / ".goondan")


def test_a_turn_killed_mid_way_is_named_at_the_next_start(tmp_path: Path) -> None:
    """The worker parks a call for approval (its Turn runs), the whole daemon is SIGKILLed;
    the next start names that conversation, and only that one."""
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    finished = run_cli("run", "goondan.yaml", "--input", "write notes.txt one", cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    daemon = Daemon(tmp_path, bundle="goondan.yaml")
    send: subprocess.Popen[str] | None = None
    try:
        daemon.wait_for("orchestrator started")
        send = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "send",
                "worker",
                "run echo never",
                "--instance",
                "k",
            ],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        daemon.wait_for("tool call waits for approval", process="agent:worker")
    finally:
        daemon.stop()  # SIGKILL of its session: the Turn never ends, its events never fold
        if send is not None:
            send.kill()
            send.wait(timeout=10)
    again = run_cli("run", "goondan.yaml", "--input", "hello", cwd=tmp_path, timeout=150)
    assert again.returncode == 0, again.stderr
    warnings = [
        json.loads(line)
        for line in again.stderr.splitlines()
        if line.startswith("{") and WARNING in line
    ]
    assert [(w["agent"], w["instance"]) for w in warnings] == [("worker", "k")]
