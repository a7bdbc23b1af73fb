"""``send`` and ``run --input`` as real subprocesses: the approvals a request waits on are told
on stderr while it waits, and ``--stream`` prints the text as it is produced.

Every wait is on output the processes write (raw pipe reads under deadlines); a call parked
for approval is what holds a request open while the test looks at what came out before it.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.approvals import kill_daemon, start_daemon
from tests.support.daemon import read_log_until, run_cli

pytestmark = pytest.mark.timeout(240)

EXAMPLE = Path(__file__).resolve().parents[3] / "goondan.yaml.example"
GOONDAN = Path(sys.executable).with_name("goondan")
"""The console script, beside the interpreter running the tests."""
WAITING = re.compile(rb"waiting for approval (apr_[0-9a-f]{16}): (\S+)  (\S+)  (.*)\n")

LEAD_SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: lead-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^both (?P<cmd>.+)$"}
        call: {tool: bash__exec, args: {command: "{cmd}"}}
      - when: {toolResult: bash__exec, status: ok}
        call: {tool: agents__request, args: {target: helper, input: "careful echo second"}}
      - when: {input: "^ask (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: helper, input: "{text}"}}
      - when: {toolResult: agents__request}
        reply: "lead heard: {result.response}"
      - when: {input: "^fail"}
        fail: "the lead's model gave up"
      - reply: "lead got: {input}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: helper-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^careful (?P<cmd>.+)$"}
        reply: "checking before I run it"
        call: {tool: bash__exec, args: {command: "{cmd}"}}
      - when: {toolResult: bash__exec, status: ok}
        reply: "ran {result.command} with exit {result.exitCode}"
      - when: {toolResult: bash__exec}
        reply: "not run: {error}"
      - reply: "helper got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: lead}
spec:
  modelConfig: {modelRef: Model/lead-brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
  toolPolicy:
    approval: {tools: [bash__exec]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/helper-brain}
  tools:
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
  toolPolicy:
    approval: {tools: [bash__exec]}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/lead
  agents: [Agent/lead, Agent/helper]
  policy:
    requestTimeoutSeconds: 600
"""
"""``lead`` parks its own shell calls and asks ``helper``, which says something, then parks."""


class Pipe:
    """One output pipe of a subprocess, read as it arrives (raw reads: nothing unseen)."""

    def __init__(self, stream: Any) -> None:
        self.fd = stream.fileno()
        self.data = b""

    def read_until(self, pattern: re.Pattern[bytes] | bytes, count: int = 1) -> bytes:
        """Everything read so far, once ``pattern`` occurs ``count`` times in it."""
        wanted = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        end = time.monotonic() + 60
        while len(wanted.findall(self.data)) < count:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(self.fd, 65536) if ready else b""
            if not chunk:
                raise AssertionError(f"no {wanted.pattern!r} (x{count}) in {self.data!r}")
            self.data += chunk
        return self.data

    def read_rest(self) -> bytes:
        """Everything, once the pipe is closed."""
        end = time.monotonic() + 60
        while True:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"the pipe stayed open; so far: {self.data!r}")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return self.data
            self.data += chunk


def start(command: list[str], directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None:
        return
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


def pending(directory: Path) -> list[dict[str, Any]]:
    listed = run_cli("approvals", "--json", cwd=directory)
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    return rows


def approve(directory: Path, approval: str, *more: str) -> None:
    approved = run_cli("approve", approval, *more, cwd=directory)
    assert approved.returncode == 0, approved.stderr


def test_send_names_the_approval_it_waits_for(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "goondan.yaml")  # its worker parks every bash__exec
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[bytes] | None = None
    try:
        read_log_until(daemon, "orchestrator started")
        wrote = run_cli("send", "worker", "write seen.txt hi", cwd=tmp_path)
        assert wrote.returncode == 0, wrote.stderr
        send = start(cli("send", "worker", "run ls"), tmp_path)
        stderr = Pipe(send.stderr)
        told = stderr.read_until(b"--reason TEXT\n").decode()
        [row] = pending(tmp_path)
        approval = row["approvalId"]
        assert (
            f'waiting for approval {approval}: worker@default  bash__exec  {{"command": "ls"}}'
            in told
        )
        assert f'python -m orchestrator approve {approval} [--args \'{{"command": "ls"}}\']' in told
        assert f"python -m orchestrator reject {approval} --reason TEXT" in told
        assert send.poll() is None  # told while it waits, not after

        approve(tmp_path, approval)
        out, rest = send.communicate(timeout=60)
        told += rest.decode()
        assert send.returncode == 0, told
        assert out.decode().strip() == "seen.txt"  # stdout is the answer alone
        assert f"{approval} (bash__exec) approved by uid {os.getuid()}" in told
    finally:
        stop(send)
        kill_daemon(daemon)


def test_stream_shows_text_and_each_approval_of_the_agents_asked(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(LEAD_SWARM)
    daemon = start_daemon(tmp_path)
    send: subprocess.Popen[bytes] | None = None
    try:
        read_log_until(daemon, "orchestrator started")
        # The console script: the commands it suggests are spelled as it was invoked.
        send = start([str(GOONDAN), "send", "lead", "both echo first", "--stream"], tmp_path)
        stdout, stderr = Pipe(send.stdout), Pipe(send.stderr)
        [(first, where, tool, arguments)] = WAITING.findall(stderr.read_until(b"TEXT\n"))
        assert (where, tool, arguments) == (
            b"lead@default",
            b"bash__exec",
            b'{"command": "echo first"}',
        )
        assert f"goondan approve {first.decode()} [--args" in stderr.data.decode()
        approve(tmp_path, first.decode())

        # The call parked next is the helper's, which the lead asked: it is told too.
        second, where, _, arguments = WAITING.findall(stderr.read_until(b"TEXT\n", 2))[1]
        assert (where, arguments) == (b"helper@default", b'{"command": "echo second"}')
        assert [row["approvalId"] for row in pending(tmp_path)] == [second.decode()]
        # What the helper said before parking is out while the request still waits.
        stdout.read_until(b"checking before I run it")
        assert send.poll() is None

        approve(tmp_path, second.decode(), "--args", '{"command": "echo edited"}')
        assert stdout.read_rest().decode().splitlines() == [
            "checking before I run it",
            "ran echo edited with exit 0",
            "lead heard: ran echo edited with exit 0",
        ]
        assert send.wait(timeout=60) == 0
        told = stderr.read_rest().decode()
        assert f"{first.decode()} (bash__exec) approved by uid {os.getuid()}" in told
        assert f"{second.decode()} (bash__exec) approved by uid {os.getuid()}" in told
        assert 'with arguments {"command": "echo edited"}' in told
    finally:
        stop(send)
        kill_daemon(daemon)


def deltas_by_agent(lines: list[str]) -> dict[str, list[str]]:
    events = [json.loads(line) for line in lines]
    assert {event["event"] for event in events} == {"delta"}
    texts: dict[str, list[str]] = {}
    for event in events:
        texts.setdefault(event["agent"], []).append(event["text"])
    return texts


def test_streamed_text_adds_up_to_the_answer(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "goondan.yaml")
    ask = ("--input", "write a.txt streamed in several words")
    plain = run_cli("run", "goondan.yaml", *ask, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    answer = plain.stdout.strip()
    assert answer == "Done. The worker reports: wrote 25 bytes to a.txt"
    streamed = run_cli("run", "goondan.yaml", *ask, "--stream", cwd=tmp_path)
    assert streamed.returncode == 0, streamed.stderr
    # Each Step on a line of its own: the worker's, then the coordinator's, the answer.
    assert streamed.stdout.splitlines() == ["wrote 25 bytes to a.txt", answer]
    ndjson = run_cli("run", "goondan.yaml", *ask, "--stream", "--json", cwd=tmp_path)
    assert ndjson.returncode == 0, ndjson.stderr
    *events, last = ndjson.stdout.splitlines()
    texts = deltas_by_agent(events)
    assert len(texts["worker"]) > 1  # piece by piece
    assert len(texts["coordinator"]) > 1
    assert "".join(texts["coordinator"]) == answer
    assert "".join(texts["worker"]) == "wrote 25 bytes to a.txt"
    assert {k: v for k, v in json.loads(last).items() if k != "traceId"} == {
        "output": answer,
        "status": "ok",
        "agent": "coordinator",
        "instanceKey": "default",
        "exitCode": 0,
    }

    daemon = start_daemon(tmp_path)
    try:
        read_log_until(daemon, "orchestrator started")
        words = ("send", "coordinator", "write a.txt streamed in several words")
        sent = run_cli(*words, cwd=tmp_path)
        assert (sent.returncode, sent.stdout) == (0, answer + "\n")
        streamed = run_cli(*words, "--stream", cwd=tmp_path)
        assert (streamed.returncode, streamed.stdout.splitlines()) == (
            0,
            ["wrote 25 bytes to a.txt", answer],
        )
        ndjson = run_cli(*words, "--stream", "--json", cwd=tmp_path)
        *events, last = ndjson.stdout.splitlines()
        texts = deltas_by_agent(events)
        assert len(texts["worker"]) > 1
        assert "".join(texts["coordinator"]) == answer
        assert json.loads(last)["output"] == answer  # what --json prints without --stream
    finally:
        kill_daemon(daemon)


def test_one_shot_run_streams_before_it_ends(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(LEAD_SWARM)
    run = start(cli("run", "goondan.yaml", "--input", "ask careful echo hi", "--stream"), tmp_path)
    try:
        stdout, stderr = Pipe(run.stdout), Pipe(run.stderr)
        stdout.read_until(b"checking before I run it")
        [(approval, where, _, _)] = WAITING.findall(stderr.read_until(WAITING))
        assert where == b"helper@default"
        assert run.poll() is None  # the text came while the swarm still runs
        approve(tmp_path, approval.decode())  # through the one-shot swarm's own api.sock
        assert stdout.read_rest().decode().splitlines() == [
            "checking before I run it",
            "ran echo hi with exit 0",
            "lead heard: ran echo hi with exit 0",
        ]
        assert run.wait(timeout=60) == 0
    finally:
        stop(run)


def test_a_failure_streamed_or_not_says_the_same(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(LEAD_SWARM)
    plain = run_cli("run", "goondan.yaml", "--input", "fail now", cwd=tmp_path)
    streamed = run_cli("run", "goondan.yaml", "--input", "fail now", "--stream", cwd=tmp_path)
    assert plain.returncode == streamed.returncode == 1
    # Agents log to the same stderr, so their lines may cut into ours: look for ours.
    said = "error: the lead's model gave up (E_MODEL_SCRIPTED_FAILURE)"
    assert said in plain.stderr
    assert said in streamed.stderr
    assert streamed.stdout == plain.stdout == ""
    refused = run_cli("run", "goondan.yaml", "--stream", cwd=tmp_path)
    assert refused.returncode == 2
    assert "--stream" in refused.stderr

    daemon = start_daemon(tmp_path)
    try:
        read_log_until(daemon, "orchestrator started")
        for words in (("lead", "fail now"), ("nobody", "hi")):
            plain = run_cli("send", *words, cwd=tmp_path)
            streamed = run_cli("send", *words, "--stream", cwd=tmp_path)
            assert plain.returncode == streamed.returncode == 1, plain.stderr
            assert streamed.stderr == plain.stderr != ""
            assert streamed.stdout == plain.stdout == ""
        both = run_cli("send", "lead", "hi", "--stream", "--no-wait", cwd=tmp_path)
        assert both.returncode == 2
    finally:
        kill_daemon(daemon)
    gone = run_cli("send", "lead", "hi", "--stream", cwd=tmp_path)
    assert gone.returncode == 5  # no daemon: as without --stream
