"""The walkthroughs of README.md and of the documentation site (``docs/``), run command by
command as written there, so they cannot drift.

Commands come from the README's fenced blocks, found by their section's heading; none is
copied here. Only what must change is changed: the daemon's TCP port (``127.0.0.1:8080`` is
bound as port 0, and the port it got replaces 8080 in later commands), an approval id (a
README placeholder becomes the real one), and ``pip install`` (this environment has it). A
command a reader leaves running in a terminal (the daemon, ``logs --follow``, a ``send`` that
waits for an approval) runs in the background with no terminal, and is stopped at the end.
Each command must exit 0; where the README shows output, the output must match it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.readme import Command
from tests.support.walkthrough import Background, Shell

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "goondan.yaml.example"
DOCS = ROOT / "docs"
WORKSPACE = Path(".goondan/agents/worker/instances/default/workspace")
"""Where the example's worker writes (as the Quick start says)."""
WRITTEN = re.compile(r"\bwrite (\S+\.txt)\b")
README_PORT = "127.0.0.1:8080"
PLACEHOLDER_ID = re.compile(r"apr_(?:…|[0-9a-f]{16})")
NOT_HERE = ("pip install", "python -m pytest")
"""Steps run elsewhere: installing (done already), and the whole test suite (this is in it)."""


RUNNER_RECORD = Path(".goondan/runner.json")
"""Where ``run --detach`` records the daemon it started (its pid)."""
RUNNER_LOG = Path(".goondan/runner.log")
"""Where a detached daemon's output goes (instead of the reader's terminal)."""


class Detached:
    """A daemon started with ``run --detach``: ready once that command returned, found again
    by its record, stopped with SIGTERM as the reader would (``kill PID``)."""

    def __init__(self, directory: Path, started: str) -> None:
        self.directory = directory
        self.started = started
        """What ``run --detach`` printed: all the reader's terminal gets of the daemon."""
        record = json.loads((directory / RUNNER_RECORD).read_text())
        self.pid = int(record["pid"])
        # Held from now: the daemon is not our child, and its pid could be reused once gone.
        self.handle = os.pidfd_open(self.pid)

    @property
    def text(self) -> str:
        """The daemon's output, from its log file."""
        return (self.directory / RUNNER_LOG).read_text(errors="replace")

    def stop(self, deadline: float = 60) -> int | None:
        """SIGTERM, then wait for it to end: 0 when it ended and logged a clean stop, else
        ``None`` (SIGKILL if it outlives ``deadline``)."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.handle, signal.SIGTERM)
        ended, _, _ = select.select([self.handle], [], [], deadline)
        if not ended:
            self.kill()
            return None
        os.close(self.handle)
        self.handle = -1
        return 0 if '"orchestrator stopped"' in self.text else None

    def kill(self) -> None:
        """SIGKILL it, if it still runs (a test that failed half-way)."""
        if self.handle < 0:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.handle, signal.SIGKILL)
        select.select([self.handle], [], [], 30)
        os.close(self.handle)
        self.handle = -1


class Terminal(Shell):
    """A :class:`Shell` that also stops, at the end, the daemons started with ``--detach``."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.detached: list[Detached] = []

    def close(self) -> None:
        super().close()
        for daemon in self.detached:
            daemon.kill()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Terminal]:
    """A terminal in a directory holding the repository's example swarm."""
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    terminal = Terminal(tmp_path)
    try:
        yield terminal
    finally:
        terminal.close()


def steps(command: Command) -> str | None:
    """``command`` less the steps that run elsewhere (``None`` when nothing is left)."""
    kept = [p for p in command.parts() if not p.startswith(NOT_HERE)]
    return " && ".join(kept) or None


def is_daemon(text: str) -> bool:
    return " orchestrator run " in f" {text} " and "--input" not in text


def leaves_running(command: Command) -> bool:
    """What a reader leaves running in a terminal of its own."""
    return (
        command.background
        or is_daemon(command.text)
        or "--follow" in command.text
        or (command.comment or "").startswith("waits")
    )


def start_detached(shell: Terminal, text: str) -> Detached:
    """The daemon ``run --detach`` starts: the command returns once the daemon is ready (its
    API answers and its entry agent runs), printing where its output goes, and nothing of that
    output: the reader's terminal stays theirs."""
    done = shell.run(text)
    assert done.returncode == 0, f"{text}\n{done.stdout}{done.stderr}"
    printed = done.stdout + done.stderr
    assert printed.startswith("started (pid "), printed
    assert str(RUNNER_LOG) in printed, printed
    daemon = Detached(shell.directory, printed)
    shell.detached.append(daemon)
    return daemon


def start_daemon(shell: Terminal, text: str) -> Background | Detached:
    """The daemon of ``text``, on a free port if it listens on TCP, ready for requests."""
    if "--detach" in text:
        return start_detached(shell, text)
    daemon = shell.start(text.replace(README_PORT, "127.0.0.1:0"))
    if README_PORT in text:
        port = daemon.json_event("http api listening")["port"]
        shell.substitutions.append((README_PORT, f"127.0.0.1:{port}"))
    daemon.json_event("agent ready", agent="coordinator")  # the entry agent
    return daemon


def pending_approval_id(shell: Shell) -> str:
    listed = shell.run("python -m orchestrator approvals --json")
    assert listed.returncode == 0, listed.stderr
    [approval] = json.loads(listed.stdout)
    return str(approval["approvalId"])


def check_answer(command: Command, output: str) -> None:
    """A request's answer, when it is one: no error in it."""
    if output.startswith("{"):
        answer = json.loads(output)
        assert "error" not in answer, (command.line, answer)
    if "event: answer" in output:
        final = output.split("event: answer", 1)[1]
        assert '"status": "ok"' in final, (command.line, output)


def walk(shell: Terminal, commands: list[Command]) -> dict[str, Background | Detached]:
    """Run ``commands`` in order; the ones left running, by their text as written."""
    running: dict[str, Background | Detached] = {}
    for command in commands:
        text = steps(command)
        if text is None:
            continue
        if PLACEHOLDER_ID.search(text):
            text = PLACEHOLDER_ID.sub(pending_approval_id(shell), text)
        if is_daemon(text):
            running[command.text] = start_daemon(shell, text)
        elif leaves_running(command):
            started = shell.start(text)
            if " send " in f" {text} " and command.comment and "parked" in command.comment:
                started.read_until("waiting for approval")  # the call is parked now
            running[command.text] = started
        else:
            done = shell.run(text)
            where = f"README.md:{command.line}: {text}"
            assert done.returncode == 0, f"{where}\n{done.stdout}{done.stderr}"
            assert "Traceback" not in done.stderr, f"{where}\n{done.stderr}"
            check_answer(command, done.stdout)
            sample = command.output_sample()
            if sample is not None:
                assert sample.search(done.stdout), f"{where}: {sample.pattern}\n{done.stdout}"
    return running


def test_quick_start(shell: Terminal) -> None:
    section = readme.section("Quick start")
    [commands] = [b.commands() for b in section.blocks_of("sh")]
    [shown] = section.blocks_of("")  # the answer of the first line
    first = steps(commands[0])
    assert first is not None
    done = shell.run(first)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == shown.text.strip()
    for command in commands[1:]:
        assert steps(command) is None, f"README.md:{command.line}: not run here"
    for name in WRITTEN.findall(first):
        assert (shell.directory / WORKSPACE / name).is_file(), name


def test_a_first_session_with_the_daemon(shell: Terminal) -> None:
    [block] = readme.section("A first session with the daemon").blocks_of("sh")
    commands = block.commands()
    running = walk(shell, commands)

    [daemon] = [b for text, b in running.items() if is_daemon(text)]
    [follower] = [b for text, b in running.items() if "--follow" in text]
    [waiting] = [b for text, b in running.items() if " send " in f" {text} "]
    assert isinstance(follower, Background)
    assert isinstance(waiting, Background)
    assert waiting.wait() == 0, waiting.text  # answered once approved
    assert "approved" in waiting.text
    # Every file the session asks the worker to write is in its workspace.
    for name in WRITTEN.findall(block.text):
        assert (shell.directory / WORKSPACE / name).is_file(), name
    # `logs --follow` saw the session as it happened.
    follower.read_until("approval.decided")
    assert "turn.completed" in follower.text
    assert follower.stop() is not None
    assert daemon.stop() == 0, daemon.text[-4000:]


def test_approving_a_parked_call_from_another_terminal(shell: Terminal) -> None:
    section = readme.section("Human approval of tool calls", DOCS / "guides" / "approvals.md")
    listing, block = section.blocks_of("sh")  # the decided calls, then the walk-through
    assert shell.run("cp goondan.yaml.example goondan.yaml").returncode == 0  # as set up before
    running = walk(shell, block.commands())
    [daemon] = [b for text, b in running.items() if is_daemon(text)]
    [waiting] = [b for text, b in running.items() if " send " in f" {text} "]
    assert isinstance(waiting, Background)
    assert waiting.wait() == 0, waiting.text  # "terminal 1 now prints the answer"
    assert "approved" in waiting.text
    # Terminal 1 holds the request and its answer, never the daemon's log lines: those are in
    # the daemon's own file.
    assert isinstance(daemon, Detached), "the walk-through starts the daemon in terminal 1"
    assert '"event": "agent ready"' in daemon.text
    assert '"event"' not in daemon.started + waiting.text, daemon.started + waiting.text
    # The listing of decided calls shows this one as the page's first line does.
    [command] = listing.commands()
    done = shell.run(command.text)
    assert done.returncode == 0, done.stderr
    assert readme.decision_pattern(command.notes[0]).fullmatch(done.stdout.strip()), done.stdout
    assert daemon.stop() == 0, daemon.text[-4000:]


def test_the_openai_client_snippet_of_the_http_api(shell: Terminal) -> None:
    section = readme.section("The HTTP API", DOCS / "guides" / "http-api.md")
    [daemon_command] = [
        c for c in section.blocks_of("sh")[0].commands() if c.text.startswith("python ")
    ]
    snippet = section.blocks_of("python")[0].text
    assert shell.run("cp goondan.yaml.example goondan.yaml").returncode == 0
    daemon = start_daemon(shell, daemon_command.text)
    shell.env.pop("GOONDAN_API_TOKEN", None)  # the Quick-start daemon has no token
    done = shell.run(f"python - <<'PY'\n{snippet}PY")
    assert done.returncode == 0, done.stderr
    assert "['coordinator', 'worker']" in done.stdout
    assert "Done. The worker reports: wrote" in done.stdout
    assert daemon.stop() == 0, daemon.text[-4000:]
