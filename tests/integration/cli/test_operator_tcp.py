"""Operating a daemon that wants a token: every command of the CLI over ``api.sock`` (no token:
the socket's file mode is its check) and over TCP with ``--api-url`` and ``--api-token-env``;
the Docker image's HEALTHCHECK, run as the image runs it; the studio's live view.

Waits are on the daemon's JSON log and on CLI processes, under deadlines.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.studio.server import Studio
from tests.support.approvals import write_approval_swarm
from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "operator-tcp-token-77a1"
TOKEN_ENV = "OPERATOR_TCP_TOKEN"


def token_daemon(directory: Path) -> tuple[Daemon, int]:
    """The approval swarm, serving TCP on a free loopback port with :data:`TOKEN` wanted."""
    write_approval_swarm(directory)
    daemon = Daemon(
        directory,
        bundle="goondan.yaml",
        args=["--listen", "127.0.0.1:0", "--api-token-env", TOKEN_ENV],
        env={TOKEN_ENV: TOKEN},
    )
    port = int(daemon.wait_for("http api listening")["port"])  # type: ignore[call-overload]
    daemon.wait_for("agent ready")
    return daemon, port


class Operator:
    """The CLI as an operator runs it: on this machine over api.sock (run beside the swarm,
    with no token anywhere in its environment), or from elsewhere over TCP."""

    def __init__(self, directory: Path, port: int, via: str) -> None:
        self.via = via
        base = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, "GOONDAN_API_URL")}
        if via == "tcp":
            self.cwd = directory / "elsewhere"  # no state directory here
            self.cwd.mkdir()
            self.env = {**base, TOKEN_ENV: TOKEN}
            self.options = ["--api-url", f"http://127.0.0.1:{port}", "--api-token-env", TOKEN_ENV]
        else:
            self.cwd, self.env, self.options = directory, base, []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "orchestrator", *args, *self.options]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, *self.options, cwd=self.cwd, env=self.env)

    def json(self, *args: str) -> Any:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(params=["api.sock", "tcp"])
def operated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Daemon, Operator]]:
    daemon, port = token_daemon(tmp_path)
    try:
        yield daemon, Operator(tmp_path, port, request.param)
    finally:
        daemon.stop()


def parked(daemon: Daemon, operator: Operator, text: str) -> tuple[subprocess.Popen[str], str]:
    """``send clerk TEXT`` left waiting for an approval; the process and the approval's id."""
    sent = operator.start("send", "clerk", text)
    before = sum(1 for e in daemon.events if e.get("event") == "tool call waits for approval")
    while (
        sum(1 for e in daemon.events if e.get("event") == "tool call waits for approval") == before
    ):
        daemon.wait_for("tool call waits for approval", process="agent:clerk")
    rows = operator.json("approvals")
    [row] = [r for r in rows if r["arguments"]["path"] == text.split()[1]]
    return sent, row["approvalId"]


def finished(sent: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = sent.communicate(timeout=60)
    return sent.returncode, out, err


def logs_line(
    logs: subprocess.Popen[str], wanted: str, deadline: float = 30, *, stderr: bool = False
) -> str:
    """The first line ``logs -f --json`` prints with ``wanted`` in it (raw reads, bounded)."""
    stream = logs.stderr if stderr else logs.stdout
    assert stream is not None
    fd = stream.fileno()
    buffer = b""
    end = time.monotonic() + deadline
    while True:
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            if wanted.encode() in line:
                return line.decode()
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"logs -f printed no {wanted!r} within {deadline} s")
        buffer += chunk


def test_every_command_operates_a_daemon_that_wants_a_token(
    operated: tuple[Daemon, Operator],
) -> None:
    daemon, operator = operated
    status = operator.json("status")
    assert [row["agent"] for row in status["agents"]] == ["clerk", "hasty"]
    assert "agents" in operator.json("usage")
    said = operator.run("send", "clerk", "hello there")
    assert (said.returncode, said.stdout.strip()) == (0, "clerk got: hello there"), said.stderr

    sent, approval = parked(daemon, operator, "write a.txt approved")
    approved = operator.run("approve", approval)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"approved {approval} (file-system__write)"
    assert finished(sent)[:2] == (0, "wrote 8 bytes to a.txt\n")

    sent, approval = parked(daemon, operator, "write b.txt refused")
    rejected = operator.run("reject", approval, "--reason", "not today")
    assert rejected.returncode == 0, rejected.stderr
    code, out, err = finished(sent)
    assert code == 0, err
    assert "E_TOOL_REJECTED" in out

    sent, _ = parked(daemon, operator, "write c.txt never")
    [waiting] = operator.json("requests")
    cancelled = operator.run("cancel", waiting["traceId"], "--reason", "changed my mind")
    assert cancelled.returncode == 0, cancelled.stderr
    code, _, err = finished(sent)
    assert code == 1
    assert "CANCELLED" in err

    restarted = operator.run("restart", "clerk")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.startswith("clerk: restarted (pid ")

    logs = operator.start("logs", "-f", "--json")
    try:
        if operator.via == "tcp":  # the daemon's live events only: it says when they flow
            logs_line(logs, "following the events of the daemon at http://", stderr=True)
        else:  # the event log from its start, then the live events
            logs_line(logs, '"type": "process.')
        answer = operator.json("send", "clerk", "followed")
        event = json.loads(logs_line(logs, answer["turn"]["traceId"]))
    finally:
        logs.terminate()
        logs.communicate(timeout=30)
    assert event["agentName"] == "clerk"


def test_tcp_without_the_right_token_says_which_and_exits_6(tmp_path: Path) -> None:
    daemon, port = token_daemon(tmp_path)
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    try:
        bare = run_cli("status", "--api-url", url, cwd=tmp_path, env=env)
        unset = run_cli(
            "status", "--api-url", url, "--api-token-env", TOKEN_ENV, cwd=tmp_path, env=env
        )
        wrong = run_cli(
            "send", "clerk", "hi", "--api-token-env", TOKEN_ENV,
            cwd=tmp_path, env={**env, TOKEN_ENV: "not-it", "GOONDAN_API_URL": url},
        )  # fmt: skip
        bad_url = run_cli("status", "--api-url", f"https://127.0.0.1:{port}", cwd=tmp_path)
    finally:
        daemon.stop()
    gone = run_cli("status", "--api-url", url, cwd=tmp_path, env=env)
    assert (bare.returncode, unset.returncode, wrong.returncode) == (6, 6, 6)
    assert "pass --api-token-env NAME" in bare.stderr
    assert f"--api-token-env {TOKEN_ENV}: the variable is not set or empty" in unset.stderr
    assert f"refused the token in ${TOKEN_ENV}" in wrong.stderr
    assert (bad_url.returncode, gone.returncode) == (2, 5)
    assert "--api-url" in bad_url.stderr
    assert f"no daemon answers at {url}" in gone.stderr


def healthcheck(state_dir: Path) -> list[str]:
    """The Dockerfile's HEALTHCHECK command, with this interpreter and ``state_dir`` in place
    of the image's ``python`` and ``/state`` (the state directory its CMD gives ``run``)."""
    text = (ROOT / "Dockerfile").read_text()
    [command] = re.findall(r"^HEALTHCHECK [^\n]*\\\n\s+CMD (\[.*\])$", text, re.M)
    [run] = re.findall(r"^CMD (\[.*\])$", text, re.M)
    served = json.loads(run)
    assert served[served.index("--state-dir") + 1] == "/state"
    argv: list[str] = json.loads(command)
    assert argv[0] == "python"
    assert "'/state'" in argv[-1]
    return [sys.executable, *[arg.replace("'/state'", repr(str(state_dir))) for arg in argv[1:]]]


def test_the_docker_healthcheck_passes_against_a_daemon_that_wants_a_token(
    tmp_path: Path,
) -> None:
    state = tmp_path / ".goondan"
    daemon, _ = token_daemon(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}  # as docker runs it: no token
    try:
        healthy = subprocess.run(
            healthcheck(state), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
        )
    finally:
        daemon.stop()
    gone = subprocess.run(
        healthcheck(state), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert healthy.returncode == 0, healthy.stderr
    assert gone.returncode != 0


async def test_the_studio_is_live_over_a_daemon_that_wants_a_token(tmp_path: Path) -> None:
    daemon, _ = token_daemon(tmp_path)
    try:
        agents = await Studio(tmp_path / ".goondan").agents()
    finally:
        daemon.stop()
    assert agents["mode"] == "live"
    assert [row["agent"] for row in agents["agents"]] == ["clerk", "hasty"]
