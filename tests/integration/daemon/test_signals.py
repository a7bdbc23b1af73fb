"""Signals meant for the daemon (Ctrl-C, ``systemctl stop``) reach every process of its group:
agents must not die of them mid-Turn. The Turn finishes, its answer is delivered, all exit.
The supervisor's own SIGTERM, after the grace period, still ends an agent at once."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bundle import load_bundle
from ipc import EventMessage, IpcMessage
from ipc.questions import DeleteInstance, DeleteInstanceResult
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from orchestrator.transport import MultiprocessingTransport
from tests.support.daemon import read_log_until, run_cli, wait_until_processing
from tests.support.fork_server import fork_one_child
from tests.support.swarm import running_swarm, write_swarm

pytestmark = pytest.mark.timeout(120)

# An agent's log line once it has acted on a SIGTERM: it starts its drain, or it was already
# draining (the daemon's shutdown, sent on its own signal, may reach it first).
TOOK_SIGTERM = ("SIGTERM; draining", "SIGTERM while draining; the drain goes on")


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def session_processes(session: int) -> set[int]:
    """Live processes of a session: the daemon's is itself, its fork server, its resource
    tracker and its agents (all in the group a terminal or systemd signals)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.add(int(entry))
    return found


def wait_gone(pids: set[int], deadline: float = 20) -> set[int]:
    """Wait on each process's pidfd (readable once it exits); returns those still running."""
    watched: dict[int, int] = {}
    for pid in pids:
        try:
            watched[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue
    end = time.monotonic() + deadline
    try:
        while watched:
            ready, _, _ = select.select(list(watched), [], [], max(0.0, end - time.monotonic()))
            if not ready:
                break
            for fd in ready:
                del watched[fd]
                os.close(fd)
    finally:
        for fd in watched:
            os.close(fd)
    return {pid for pid in watched.values() if alive(pid)}


def agent_pids(stderr: str) -> set[int]:
    pids = set()
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "agent process spawned":
            pids.add(int(record["pid"]))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_group_lets_the_running_turn_finish(
    tmp_path: Path, sig: signal.Signals
) -> None:
    write_swarm(tmp_path, grace=20)
    gate = tmp_path / "gate"  # beta's Turn runs until this file exists
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            "goondan.yaml",
            "--input",
            f"ask beta hold {gate}",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_until_processing(tmp_path, "beta")
        group = session_processes(daemon.pid)  # daemon, fork server, resource tracker, agents
        os.killpg(daemon.pid, sig)  # what Ctrl-C and KillMode=control-group do
        # the Turn ends only once the daemon, and beta, have taken the signal
        log = read_log_until(daemon, "stopping")
        if sig == signal.SIGTERM:  # beta's own SIGTERM (SIGINT is ignored by agents)
            log = read_log_until(daemon, TOOK_SIGTERM, agent="beta", log=log)
        gate.touch()
        out, rest = daemon.communicate(timeout=60)
        stdout, stderr = out.decode(), (log + rest).decode()
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert daemon.returncode == 0, stderr
    assert stdout.strip() == "released", stderr
    pids = agent_pids(stderr)
    assert len(pids) == 2  # alpha and beta, neither restarted
    assert pids < group
    assert "AGENT_CRASHED" not in stderr
    assert wait_gone(group) == set()
    assert session_processes(daemon.pid) == set()  # nothing started later lingers either


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_group_answers_the_send_waiting_on_the_turn(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The daemon serves (no --input); an operator's `send` waits on a Turn that hands off to a
    second agent; the whole group is signalled: the send still gets the Turn's answer."""
    write_swarm(tmp_path, grace=20)
    gate = tmp_path / "gate"  # beta's Turn runs until this file exists
    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    send = None
    try:
        log = read_log_until(daemon, "agent ready")  # the entry agent: the daemon serves
        send = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "send", "alpha", f"ask beta hold {gate}"],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until_processing(tmp_path, "beta")
        group = session_processes(daemon.pid)
        os.killpg(daemon.pid, sig)
        # the Turn ends only once the daemon, and beta, have taken the signal
        log = read_log_until(daemon, "stopping", log=log)
        if sig == signal.SIGTERM:  # beta's own SIGTERM (SIGINT is ignored by agents)
            log = read_log_until(daemon, TOOK_SIGTERM, agent="beta", log=log)
        gate.touch()
        answer, complaint = send.communicate(timeout=60)
        _, rest = daemon.communicate(timeout=60)
        stderr = (log + rest).decode()
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert send.returncode == 0, complaint
    assert answer.strip() == "released"
    assert daemon.returncode == 0, stderr
    assert "AGENT_CRASHED" not in stderr
    assert len(agent_pids(stderr)) == 2  # nothing was restarted
    assert wait_gone(group) == set()
    assert session_processes(daemon.pid) == set()


def test_sigterm_to_an_agent_alone_drains_it_and_it_exits_clean(tmp_path: Path) -> None:
    write_swarm(tmp_path, grace=20)
    gate = tmp_path / "gate"  # beta's Turn runs until this file exists
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            "goondan.yaml",
            "--input",
            f"ask beta hold {gate}",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_until_processing(tmp_path, "beta")
        rows = {
            r["agent"]: r
            for r in json.loads(run_cli("status", "--json", cwd=tmp_path).stdout)["agents"]
        }
        os.kill(int(rows["beta"]["pid"]), signal.SIGTERM)
        log = read_log_until(daemon, TOOK_SIGTERM, agent="beta")
        gate.touch()  # beta took its SIGTERM mid-Turn: let the Turn finish
        out, rest = daemon.communicate(timeout=60)
        stdout, stderr = out.decode(), (log + rest).decode()
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    assert daemon.returncode == 0, stderr
    assert stdout.strip() == "released"
    exits = [
        json.loads(line)
        for line in stderr.splitlines()
        if line.startswith("{") and '"agent process' in line and '"beta"' in line
    ]
    assert not [e for e in exits if "crashed" in str(e.get("event"))], exits


def test_ctrl_c_at_the_prompt_lets_the_turn_finish(tmp_path: Path) -> None:
    import pty

    write_swarm(tmp_path, grace=20)
    leader, follower = pty.openpty()
    # The terminal becomes the controlling terminal of the daemon's new session, so a typed
    # Ctrl-C is turned into SIGINT for its foreground group by the kernel, as at a real prompt.
    take_terminal = (
        "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
        "os.execv(sys.executable, [sys.executable, '-m', 'orchestrator', 'run', 'goondan.yaml'])"
    )
    gate = tmp_path / "gate"  # beta's Turn runs until this file exists
    daemon = subprocess.Popen(
        [sys.executable, "-c", take_terminal],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""

    def read_until(marker: bytes, deadline: float = 30) -> None:
        nonlocal seen
        end = time.monotonic() + deadline
        while marker not in seen:
            ready, _, _ = select.select([leader], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {marker!r} in {seen!r}")
            try:
                seen += os.read(leader, 4096)
            except OSError:  # the terminal closed
                raise AssertionError(f"no {marker!r} in {seen!r}") from None

    try:
        read_until(b"alpha> ")
        os.write(leader, f"ask beta hold {gate}\n".encode())
        wait_until_processing(tmp_path, "beta")
        os.write(leader, b"\x03")  # Ctrl-C typed at the terminal
        read_log_until(daemon, "stopping")  # the daemon took the SIGINT mid-Turn
        gate.touch()
        read_until(b"released")
        daemon.communicate(timeout=60)  # the rest of its log: a full pipe would block its exit
        assert daemon.returncode == 0
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        os.close(leader)
        if daemon.stderr is not None:
            daemon.stderr.close()


async def test_the_supervisors_sigterm_ends_an_agent_that_cannot_stop_within_the_grace(
    tmp_path: Path,
) -> None:
    """Escalation: past the grace period the supervisor's SIGTERM ends a draining agent at once
    (its Turn's tool takes 30 s to give in), rather than waiting for the SIGKILL after it."""
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path, grace=0.5), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(60):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
        request = asyncio.ensure_future(orchestrator.request("stubborn 30", agent="beta"))
        await orchestrator.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        await orchestrator.shutdown()
        answer = await request
    beta = orchestrator.supervisor.handle("beta")
    assert beta.status is ProcessStatus.TERMINATED
    assert beta.last_exit is not None
    assert beta.last_exit.signal == signal.SIGTERM, beta.last_exit.describe()
    assert answer.status == "error"


async def test_a_sigterm_during_a_restarts_drain_lets_the_turn_finish(tmp_path: Path) -> None:
    """`systemctl stop` while an agent drains for a restart (or a --watch reload): the
    group's SIGTERM reaches a draining agent, which goes on finishing its Turn."""
    async with running_swarm(tmp_path, grace=20) as orchestrator, asyncio.timeout(60):
        supervisor = orchestrator.supervisor
        await supervisor.ensure_running("beta")
        request = asyncio.ensure_future(orchestrator.request("slow 3", agent="beta"))
        await supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        pid = supervisor.handle("beta").pid
        assert pid is not None
        restart = asyncio.ensure_future(supervisor.restart_agent("beta", orchestrator.grace))
        await supervisor.wait_for_status("beta", ProcessStatus.DRAINING)
        # The agent reads its pipe in order: once it answers a question sent after the
        # shutdown, it has taken the shutdown and is draining.
        answer = await orchestrator.router.ask("beta", DeleteInstance("other"))
        assert isinstance(answer, DeleteInstanceResult)
        assert answer.ok is True
        os.kill(pid, signal.SIGTERM)
        result = await request
        await restart
    assert result.status == "ok", result
    assert result.output == "slow done"
    beta = orchestrator.supervisor.handle("beta")
    assert beta.crashes == 0
    assert beta.last_exit is not None
    assert beta.last_exit.exitcode == 0  # it drained to the end: the SIGTERM did not end it


PROBE = """
import signal


def report(conn):
    conn.send([signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
               signal.getsignal(signal.SIGTERM) == signal.SIG_IGN])
"""


def test_agents_are_forked_with_sigint_and_sigterm_ignored(tmp_path: Path) -> None:
    """Before an agent's own code sets its dispositions, a child of the fork server already
    ignores both signals, so a Ctrl-C at the moment an agent starts cannot kill it."""
    assert fork_one_child(tmp_path, PROBE) == [True, True]


async def test_a_sigterm_before_the_agents_loop_runs_starts_its_drain(tmp_path: Path) -> None:
    """Neither lost nor fatal: the agent boots, reports ready, drains (nothing runs) and
    exits 0."""
    bundle = load_bundle(write_swarm(tmp_path))
    plan = bundle.agent_plan("beta", tmp_path / "state", "default")
    transport = MultiprocessingTransport(entry="tests.support.agent_entries:sigterm_while_starting")
    seen: list[IpcMessage] = []
    worker = await transport.start("beta", plan, seen.append)
    try:
        async with asyncio.timeout(30):
            info = await worker.exited
    finally:
        worker.kill()
        worker.channel.close()
    assert info.exitcode == 0, info.describe()
    kinds = [m.kind for m in seen if isinstance(m, EventMessage)]
    assert kinds.index("ready") < kinds.index("shutdown_ack"), kinds


async def test_a_turn_cut_short_by_the_end_of_the_grace_period_is_answered_as_such(
    tmp_path: Path,
) -> None:
    """Not AGENT_CRASHED: the agent stopped as asked; the caller is told the Turn was cut
    short by the shutdown, and so is the one queued behind it."""
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path, grace=0.5), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(60):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
        running = asyncio.ensure_future(orchestrator.request("slow 30", agent="beta"))
        await orchestrator.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        queued = asyncio.ensure_future(orchestrator.request("slow 30", agent="beta"))
        await asyncio.sleep(0)  # one yield: the request forwards its delegate, then waits
        # The agent reads its pipe in order: once it answers a question sent after the
        # delegate, the delegate is queued behind the running Turn.
        await orchestrator.router.ask("beta", DeleteInstance("other"))
        await orchestrator.shutdown()
        answers = [await running, await queued]
    for answer in answers:
        assert answer.status == "error"
        assert answer.error.code == "SHUTTING_DOWN", answer
        assert "grace period" in answer.error.message
    beta = orchestrator.supervisor.handle("beta")
    assert beta.last_exit is not None
    assert beta.last_exit.exitcode == 0
