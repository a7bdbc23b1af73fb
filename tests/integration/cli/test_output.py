"""What the command line prints where it prints it: into a pipe its reader closes early, the
last lines of the event log (``logs -n``), and tables on terminals of a given width or piped.

Every command runs as a real process over a state directory written with the runtime's own
writers (the event log) or in the files' own format (instances, approvals).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from goondan.defaults import INSTANCE_METADATA_FORMAT
from ipc.runtime_events import TurnStartedEvent
from orchestrator.eventlog import EventLog
from tests.support.daemon import run_cli

pytestmark = pytest.mark.timeout(120)

LONG_ARGUMENTS = {"command": "echo " + "x" * 300}


def event_log(state: Path, count: int, agent: str = "worker") -> None:
    """``count`` Turns of ``agent``, each its own trace, written by the daemon's own writer."""
    log = EventLog(state)
    try:
        for index in range(count):
            log.append(
                TurnStartedEvent(
                    timestamp=f"2026-01-01T00:00:00.{index % 1000:03d}Z",
                    agent_name=agent,
                    instance_key="default",
                    trace_id=f"trace-{index:06d}",
                    span_id=f"span-{index:06d}",
                    turn_id=f"turn-{index:06d}",
                )
            )
    finally:
        log.close()


def instances(state: Path, count: int) -> None:
    for index in range(count):
        directory = state / "agents" / "worker" / "instances" / f"key-{index:05d}"
        directory.mkdir(parents=True)
        metadata = {
            "formatVersion": INSTANCE_METADATA_FORMAT,
            "agentName": "worker",
            "instanceKey": f"key-{index:05d}",
            "status": "idle",
            "updatedAt": "2026-01-01T00:00:00Z",
            "usage": {"totalTokens": index, "calls": 1},
        }
        (directory / "metadata.json").write_text(json.dumps(metadata))


def approvals(state: Path, count: int) -> list[str]:
    ids = []
    for index in range(count):
        approval_id = f"apr_{index:016x}"
        directory = state / "agents" / "worker" / "instances" / "default" / "approvals"
        directory.mkdir(parents=True, exist_ok=True)
        record = {
            "approvalId": approval_id,
            "status": "pending",
            "agentName": "worker",
            "instanceKey": "default",
            "toolName": "bash__exec",
            "arguments": LONG_ARGUMENTS,
            "requestedAt": f"2026-01-01T00:00:{index % 60:02d}Z",
            "expiresAt": "2999-01-01T00:00:00Z",
            "expiresAtUnix": 32472144000,
        }
        (directory / f"{approval_id}.json").write_text(json.dumps(record))
        ids.append(approval_id)
    return ids


@pytest.fixture
def busy_state(tmp_path: Path) -> Path:
    """A state directory whose listings run far past a pipe's buffer."""
    state = tmp_path / "state"
    event_log(state, 3000)
    instances(state, 1500)
    approvals(state, 1500)
    return state


@pytest.mark.parametrize(
    "command",
    [
        ["logs"],
        ["logs", "--json"],
        ["instances"],
        ["approvals"],
        ["usage", "--traces", "3000"],
    ],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(
    busy_state: Path, tmp_path: Path, command: list[str]
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *command, "--state-dir", str(busy_state)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # `| head -1`: one line, then the reader is gone
    child.stdout.close()
    try:
        _, stderr = child.communicate(timeout=60)
    finally:
        child.kill()
    assert first.strip()
    assert stderr.decode() == ""  # no "internal error", no traceback
    assert child.returncode == 141  # 128 + SIGPIPE, as `git log | head` reports it


def test_logs_lines_prints_the_last_events_and_follow_starts_with_ten(tmp_path: Path) -> None:
    state = tmp_path / "state"
    event_log(state, 50)
    everything = run_cli("logs", "--state-dir", str(state), "--json", cwd=tmp_path)
    last_three = run_cli("logs", "--state-dir", str(state), "--json", "-n", "3", cwd=tmp_path)
    none = run_cli("logs", "--state-dir", str(state), "--lines", "0", cwd=tmp_path)
    bad = run_cli("logs", "--state-dir", str(state), "-n", "-2", cwd=tmp_path)

    def traces(done: subprocess.CompletedProcess[str]) -> list[str]:
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["traceId"] for line in done.stdout.splitlines()]

    assert traces(everything) == [f"trace-{i:06d}" for i in range(50)]
    assert traces(last_three) == ["trace-000047", "trace-000048", "trace-000049"]
    assert none.stdout == ""
    assert bad.returncode == 2
    assert "--lines" in bad.stderr

    # -f: the last ten, then it waits for more (no daemon: it tails the file).
    follow = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "logs", "-f", "--json", "--state-dir", str(state)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        past = [json.loads(follow.stdout.readline())["traceId"] for _ in range(10)]
        event_log(state, 1, agent="late")  # appended after the past was printed
        new = json.loads(follow.stdout.readline())
    finally:
        follow.kill()
        follow.communicate(timeout=30)
    assert past == [f"trace-{i:06d}" for i in range(40, 50)]
    assert new["agentName"] == "late"


def on_terminal(columns: int, *args: str, cwd: Path) -> list[str]:
    """The lines ``python -m orchestrator *args`` prints on a terminal ``columns`` wide."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env: dict[str, Any] = {**os.environ, "NO_COLOR": "1", "TERM": "xterm"}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        _, errors = child.communicate(timeout=60)
    finally:
        child.kill()
        os.close(leader)
    assert child.returncode == 0, errors
    return output.decode().replace("\r\n", "\n").splitlines()


@pytest.mark.parametrize("columns", [60, 200])
def test_tables_fit_the_terminal_and_cut_long_cells(tmp_path: Path, columns: int) -> None:
    state = tmp_path / "state"
    [approval_id] = approvals(state, 1)
    instances(state, 2)
    for command in (["approvals"], ["instances"]):
        lines = on_terminal(columns, *command, "--state-dir", str(state), cwd=tmp_path)
        assert lines, command
        assert all(len(line) <= columns for line in lines), (command, lines)
        assert "\x1b[" not in "".join(lines)  # NO_COLOR
    lines = on_terminal(columns, "approvals", "--state-dir", str(state), cwd=tmp_path)
    [row] = [line for line in lines if line.startswith(approval_id)]  # the id is never cut
    if columns >= 100:
        assert "bash__exec" in row
    assert row.rstrip().endswith("…")  # the arguments are cut short, never wrapped
    assert len(lines) == 2  # the header and the one row
    [header, *rows] = on_terminal(columns, "instances", "--state-dir", str(state), cwd=tmp_path)
    assert header.split()[:2] == ["AGENT", "INSTANCE"]
    assert [row.split()[1] for row in rows] == ["key-00000", "key-00001"]


def test_piped_tables_keep_their_fixed_columns(tmp_path: Path) -> None:
    state = tmp_path / "state"
    [approval_id] = approvals(state, 1)
    instances(state, 2)
    listed = run_cli("instances", "--state-dir", str(state), cwd=tmp_path)
    assert listed.stdout.splitlines() == [
        f"{'AGENT':<20} {'INSTANCE':<24} {'STATUS':<11} {'TOKENS':>9}  UPDATED",
        f"{'worker':<20} {'key-00000':<24} {'idle':<11} {0:>9}  2026-01-01T00:00:00Z",
        f"{'worker':<20} {'key-00001':<24} {'idle':<11} {1:>9}  2026-01-01T00:00:00Z",
    ]
    waiting = run_cli("approvals", "--state-dir", str(state), cwd=tmp_path)
    arguments = json.dumps(LONG_ARGUMENTS)[:200] + "…"
    assert waiting.stdout.splitlines() == [
        f"{approval_id}  worker@default  bash__exec  {arguments}  expires 2999-01-01T00:00:00Z"
    ]
