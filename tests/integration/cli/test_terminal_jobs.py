"""The daemon as a job of an interactive shell: ``run goondan.yaml &`` and in the foreground.

Each test runs the real CLI on a pseudo-terminal whose session has job control (see
:mod:`tests.support.terminal`); the example swarm's worker parks every ``bash__exec`` call
for an operator, who decides it with the real ``approve`` command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import read_log_until, run_cli, wait_gone
from tests.support.terminal import TerminalJob

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[3]
RUN = [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    return tmp_path


def start_send(directory: Path, agent: str, text: str) -> subprocess.Popen[str]:
    """``send AGENT TEXT`` from outside the session: it waits for the answer."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", agent, text, "--timeout", "120"],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def approve_the_parked_call(directory: Path, job: TerminalJob, log: bytes) -> bytes:
    """Wait for the worker to park its call, then approve it as an operator would."""
    assert job.holder.stderr is not None
    log = read_log_until(job.holder, "tool call waits for approval", log=log)
    listed = run_cli("approvals", "--json", cwd=directory)
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    [row] = rows
    assert row["toolName"] == "bash__exec"
    approved = run_cli("approve", row["approvalId"], cwd=directory)
    assert approved.returncode == 0, approved.stderr
    return log


def test_a_daemon_started_in_the_background_is_never_stopped_and_serves(bundle: Path) -> None:
    """``run goondan.yaml &``: no prompt, no SIGTTIN stop; a parked call is approved from
    outside and its ``send`` answered; SIGTERM ends the daemon."""
    job = TerminalJob(RUN, cwd=bundle, background=True)
    send: subprocess.Popen[str] | None = None
    try:
        log = read_log_until(job.holder, "orchestrator started")
        send = start_send(bundle, "worker", "run echo approved-from-outside")
        log = approve_the_parked_call(bundle, job, log)
        answer, complaint = send.communicate(timeout=120)
        assert send.returncode == 0, complaint
        assert answer.strip() == "approved-from-outside"
        assert job.state() != "T", "the background daemon was stopped"
        assert b"> " not in job.drain(), "a background daemon offered a prompt"
        os.kill(job.pid, signal.SIGTERM)
        assert wait_gone(job.pid, 60), "SIGTERM did not end the daemon"
        assert job.holder.wait(timeout=30) == 0
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.communicate()
        job.close()


def test_in_the_foreground_the_prompt_answers_once_the_call_is_approved(bundle: Path) -> None:
    """The daemon owns the terminal: its prompt shows, a typed request parks a call, the
    operator approves it and the answer shows on the terminal; Ctrl-D stops the daemon."""
    job = TerminalJob([*RUN, "--agent", "worker"], cwd=bundle, background=False)
    try:
        job.read_until(b"worker> ")
        job.type(b"run echo typed-at-the-prompt\n")
        approve_the_parked_call(bundle, job, b"")
        job.read_until(b"typed-at-the-prompt\r\n")
        job.read_until(b"worker> ", deadline=30)
        job.type(b"\x04")
        assert job.holder.wait(timeout=60) == 0
    finally:
        job.close()


def test_with_interactive_a_background_daemon_prompts_once_brought_to_the_foreground(
    bundle: Path,
) -> None:
    """``run --interactive &``: no prompt (and no stop) while in the background; ``fg`` brings
    the prompt, which answers what is typed."""
    job = TerminalJob([*RUN, "--interactive"], cwd=bundle, background=True)
    try:
        log = read_log_until(job.holder, "orchestrator started")
        read_log_until(job.holder, "agent ready", log=log)
        assert job.state() != "T"
        assert b"> " not in job.drain()
        job.to_foreground()
        job.read_until(b"coordinator> ")
        job.type(b"write notes.txt from the foreground\n")
        job.read_until(b"wrote 19 bytes to notes.txt")
        job.type(b"\x04")
        assert job.holder.wait(timeout=60) == 0
    finally:
        job.close()


def test_a_one_shot_run_in_the_background_writes_its_answer_under_tostop(bundle: Path) -> None:
    """``run --input TEXT &`` with ``stty tostop``: writing to the terminal from the background
    (its log, its answer) raises SIGTTOU, which must not stop the run."""
    job = TerminalJob(
        [*RUN, "--input", "write notes.txt in the background"],
        cwd=bundle,
        background=True,
        tostop=True,
        log_to_terminal=True,
    )
    try:
        job.read_until(b"wrote 17 bytes to notes.txt", deadline=90)
        assert job.holder.wait(timeout=60) == 0
    finally:
        job.close()


def test_interactive_needs_a_terminal_and_a_daemon(bundle: Path) -> None:
    """``--interactive`` without a terminal on stdin, or with ``--input``/``--detach``, is a
    usage error naming the option (exit 2), before anything starts."""
    off_terminal = run_cli("run", "goondan.yaml", "--interactive", cwd=bundle)
    assert off_terminal.returncode == 2, off_terminal.stderr
    assert "--interactive" in off_terminal.stderr
    assert "terminal" in off_terminal.stderr
    one_shot = run_cli("run", "goondan.yaml", "--interactive", "--input", "hi", cwd=bundle)
    assert one_shot.returncode == 2, one_shot.stderr
    assert "--interactive" in one_shot.stderr
    assert not (bundle / ".goondan" / "api.sock").exists()
