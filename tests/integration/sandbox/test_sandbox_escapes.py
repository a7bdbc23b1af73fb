"""A prompt-injected model's `bash` against a real daemon: every escape is refused or bounded,
and the agent answers the next request. Run with each backend of the sandbox (bubblewrap, and
the kernel's namespaces where bubblewrap is not used).

Each attack is one that worked when `bash` ran with the daemon's authority: reading the API token
from /proc, killing the fork server through its pipes, stopping the daemon, reading the state
directory, approving another agent's parked call over api.sock, reaching the daemon's loopback
listener.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.daemon import free_port, run_cli
from tests.support.sandbox_attack import BACKENDS, BASH_AND_READ_MODEL, AttackSwarm, attack_daemon

pytestmark = pytest.mark.timeout(180)

TOKEN = "tok-for-operators-only-7d1f"
OTHER_SECRET = "sk-other-agents-key-93ab"
FILE_LIMIT_MIB = 8

SWARM = (
    BASH_AND_READ_MODEL
    + """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: mallory}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"},
       config: {sandbox: {fileSizeMiB: %(file_limit)d, processes: 64}}}
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: victim}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [{ref: {kind: Tool, name: bash, package: "@goondan/base"}}]
  toolPolicy:
    approval: {tools: [bash__exec], timeoutSeconds: 120}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/mallory
  agents: [Agent/mallory, Agent/victim]
  policy: {sandbox: %(backend)s}
"""
)


@dataclass
class Swarm(AttackSwarm):
    port: int

    def healthy(self) -> None:
        """The swarm still answers: Mallory, and another agent through the fork server."""
        assert self.bash("echo alive")["stdout"] == "alive\n"
        done = run_cli("status", "--json", cwd=self.directory)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module", params=BACKENDS)
def swarm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swarm]:
    directory = tmp_path_factory.mktemp(f"escapes-{request.param}")
    config = SWARM % {"backend": request.param, "file_limit": FILE_LIMIT_MIB}
    port = free_port()
    with attack_daemon(
        directory,
        config,
        env={"GOONDAN_API_TOKEN": TOKEN, "VICTIM_KEY": OTHER_SECRET},
        args=["--listen", f"127.0.0.1:{port}", "--api-token-env", "GOONDAN_API_TOKEN"],
    ) as daemon:
        yield Swarm(directory, daemon, request.param, port)


def test_the_backend_is_the_one_asked_for(swarm: Swarm) -> None:
    # PID 1 of the sandbox is bubblewrap's reaper, or the launcher of the namespaces backend.
    out = swarm.bash("tr '\\0' ' ' < /proc/1/cmdline")
    expected = "bwrap" if swarm.backend == "bwrap" else "_launch.py"
    assert expected in str(out["stdout"])


def test_no_secret_through_proc(swarm: Swarm) -> None:
    out = swarm.bash(
        "for f in /proc/1/environ /proc/self/environ /proc/$PPID/environ /proc/*/environ; do "
        "tr '\\0' '\\n' < $f 2>/dev/null; done; env"
    )
    text = json.dumps(out)
    assert TOKEN not in text
    assert OTHER_SECRET not in text
    # The agent's and daemon's processes have no name in the sandbox's /proc.
    listed = swarm.bash("ls /proc | grep -E '^[0-9]+$' | wc -l")
    assert int(str(listed["stdout"]).strip()) <= 6


def test_the_fork_server_and_the_daemon_are_out_of_reach(swarm: Swarm) -> None:
    agents_before = {a["agent"]: a.get("pid") for a in _agents(swarm)}
    daemon_pid = swarm.daemon.process.pid
    # The attack that killed the fork server: write to every pipe of the agent's parent.
    attack = (
        "A=$PPID; FS=$(awk '/PPid/{print $2}' /proc/$A/status); "
        'for f in /proc/$FS/fd/*; do case "$(readlink $f)" in pipe:*) printf x > $f;; esac; done; '
        f"kill -STOP {daemon_pid}; kill -9 -1; echo tried"
    )
    swarm.bash(attack)
    swarm.healthy()
    assert swarm.send("victim", "hello") == "idle"  # a new agent still starts from the fork server
    agents_after = {a["agent"]: a.get("pid") for a in _agents(swarm)}
    assert agents_after["mallory"] == agents_before["mallory"]
    with open(f"/proc/{daemon_pid}/stat") as stat:
        assert stat.read().rsplit(")", 1)[1].split()[0] != "T"


def _agents(swarm: Swarm) -> list[dict[str, object]]:
    done = run_cli("status", "--json", cwd=swarm.directory)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    rows: list[dict[str, object]] = body["agents"]
    return rows


def test_the_state_directory_and_other_tenants_have_no_name(swarm: Swarm) -> None:
    victim_note = swarm.instance_dir("victim") / "workspace"
    victim_note.mkdir(parents=True, exist_ok=True)
    (victim_note / "note.txt").write_text("victim's note")
    out = swarm.bash(
        f"ls {swarm.state} 2>&1; cat {swarm.state}/runtime-events.jsonl 2>&1 | head -c 100; "
        f"cat {victim_note}/note.txt 2>&1; echo overwritten > {victim_note}/note.txt 2>&1; "
        f"test -S {swarm.state}/api.sock && echo SOCKET-VISIBLE; echo end"
    )
    assert "victim's note" not in str(out["stdout"])
    assert "SOCKET-VISIBLE" not in str(out["stdout"])
    assert (victim_note / "note.txt").read_text() == "victim's note"
    assert "traceId" not in str(out["stdout"])


def test_writing_outside_the_workspace_is_refused(swarm: Swarm) -> None:
    target = swarm.directory / "escaped.txt"
    out = swarm.bash(
        f"echo x > {target}; echo x > /usr/escaped; echo x > /etc/escaped; "
        "echo inside > /tmp/private && cat /tmp/private"
    )
    assert not target.exists()
    assert not Path("/usr/escaped").exists()
    assert not Path("/etc/escaped").exists()
    assert out["stdout"] == "inside\n"  # its own /tmp works, and is its own
    assert not Path("/tmp/private").exists()


def test_an_approval_cannot_be_decided_from_the_sandbox(swarm: Swarm) -> None:
    parked = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "send", "victim", "run touch approved-by-mallory"],
        cwd=swarm.directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        approval = _wait_for_approval(swarm)
        sock = swarm.state / "api.sock"
        out = swarm.bash(
            f"curl -s -m 5 --unix-socket {sock} -X POST -H 'Content-Type: application/json' "
            f"-d '{{}}' http://x/v1/approvals/{approval}/approve; "
            f"curl -s -m 5 -X POST -H 'Content-Type: application/json' -d '{{}}' "
            f"http://127.0.0.1:{swarm.port}/v1/approvals/{approval}/approve; echo exit=$?"
        )
        assert "exit=0" not in str(out["stdout"])
        listed = json.loads(run_cli("approvals", "--json", cwd=swarm.directory).stdout)
        assert [r["status"] for r in listed if r["approvalId"] == approval] == ["pending"]
        rejected = run_cli("reject", approval, "--reason", "not from a shell", cwd=swarm.directory)
        assert rejected.returncode == 0, rejected.stderr
        parked.communicate(timeout=60)
    finally:
        if parked.poll() is None:
            parked.kill()
            parked.communicate()
    workspace = swarm.instance_dir("victim") / "workspace"
    assert not (workspace / "approved-by-mallory").exists()


def _wait_for_approval(swarm: Swarm) -> str:
    """The id of the victim's parked call, once the daemon lists it (bounded: each look is a
    CLI round trip)."""
    for _ in range(200):
        listed = run_cli("approvals", "--json", cwd=swarm.directory)
        rows = json.loads(listed.stdout or "[]")
        pending = [r["approvalId"] for r in rows if r.get("agentName") == "victim"]
        if pending:
            return str(pending[0])
    raise AssertionError("the victim's call was never parked for approval")


def test_network_off_reaches_not_even_loopback(swarm: Swarm) -> None:
    out = swarm.bash(f"curl -s -m 5 http://127.0.0.1:{swarm.port}/healthz; echo exit=$?")
    assert "exit=0" not in str(out["stdout"])
    # The daemon's listener is up: only the sandbox is cut off.
    with socket.create_connection(("127.0.0.1", swarm.port), timeout=5):
        pass


def test_a_fork_bomb_is_bounded(swarm: Swarm) -> None:
    out = swarm.bash("bomb() { bomb | bomb & }; bomb; sleep 1; echo survived")
    assert out["exitCode"] is not None
    swarm.healthy()


def test_a_huge_file_is_cut_at_the_limit(swarm: Swarm) -> None:
    out = swarm.bash("head -c 10G /dev/zero > big.bin; echo exit=$?; wc -c < big.bin")
    size = int(str(out["stdout"]).split()[-1])
    assert size <= FILE_LIMIT_MIB * 1024 * 1024
    assert "exit=0" not in str(out["stdout"])
    swarm.bash("rm -f big.bin")


def test_a_hard_link_planted_by_bash_is_not_read_through(swarm: Swarm) -> None:
    swarm.bash("echo mine > linked-a && ln linked-a linked-b && echo planted")
    assert swarm.send("mallory", "read linked-b") == "refused E_FS_PATH_OUTSIDE_WORKDIR"
