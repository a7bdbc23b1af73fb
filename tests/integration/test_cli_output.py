"""What the command line prints where it prints it: tables on terminals of a given width, or
piped.

Every command runs as a real process over a state directory written in the files' own format
(instances, approvals).
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
from tests.support.daemon import run_cli

pytestmark = pytest.mark.timeout(120)

LONG_ARGUMENTS = {"command": "echo " + "x" * 300}


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
