"""Each process's output in ``<state>/logs/``, and ``logs --process``, against a real daemon."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

from tests.support.daemon import Daemon, run_cli, wait_gone

WAIT = 30


def beta_pid(directory: Path) -> int:
    done = run_cli("status", "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    rows = {row["agent"]: row for row in json.loads(done.stdout)["agents"]}
    return int(rows["beta"]["pid"])


def test_each_process_has_its_files_and_logs_process_tails_them(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        daemon.wait_for("orchestrator started")
        done = run_cli("send", "beta", "chatter 5", cwd=tmp_path)
        assert done.stdout.strip() == "logged 5", done.stderr
        # The daemon's stderr still carries the agent's structured lines, whole.
        last = daemon.wait_for("turn finished", process="agent:beta", deadline=WAIT)
        pid = beta_pid(tmp_path)
        # A SIGKILLed agent loses nothing it wrote: the daemon drains its pipe to the end.
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid)
        daemon.wait_for("agent process crashed (SIGKILL: possibly OOM)", deadline=WAIT)

        logs = tmp_path / ".goondan" / "logs"
        assert stat.S_IMODE(logs.stat().st_mode) == 0o700
        names = sorted(path.name for path in logs.iterdir())
        assert "orchestrator.stderr.log" in names
        assert {"agent:beta.stdout.log", "agent:beta.stderr.log"} <= set(names)
        assert all(stat.S_IMODE((logs / name).stat().st_mode) == 0o600 for name in names)

        # Lines of the killed process: every chatter line, and the last one it wrote.
        end = time.monotonic() + WAIT
        while True:
            shown = run_cli(
                "logs",
                "--process",
                "beta",
                "--stream",
                "stderr",
                "-l",
                "50",
                "--json",
                cwd=tmp_path,
            )
            assert shown.returncode == 0, shown.stderr
            rows = [json.loads(line) for line in shown.stdout.splitlines()]
            events = [json.loads(row["line"]) for row in rows]
            if any(event.get("timestamp") == last["timestamp"] for event in events):
                break
            assert time.monotonic() < end, shown.stdout
        assert [e["n"] for e in events if e.get("event") == "chatter"] == [0, 1, 2, 3, 4]
        assert {row["process"] for row in rows} == {"agent:beta"}
        assert [row["time"] for row in rows] == sorted(row["time"] for row in rows)

        # --lines N is the last N; both streams merged; the Orchestrator's own lines.
        shown = run_cli("logs", "-p", "agent:beta", "--lines", "2", cwd=tmp_path)
        lines = shown.stdout.splitlines()
        assert len(lines) == 2
        assert all(line.split(" ")[1] in ("stdout", "stderr") for line in lines)
        own = run_cli(
            "logs", "-p", "orchestrator", "--stream", "stderr", "-l", "1000", cwd=tmp_path
        )
        assert '"event": "agent process crashed (SIGKILL: possibly OOM)"' in own.stdout

        unknown = run_cli("logs", "--process", "nosuch", cwd=tmp_path)
        assert unknown.returncode == 1
        assert "known: orchestrator, agent:alpha, agent:beta" in unknown.stderr
    finally:
        daemon.stop()
