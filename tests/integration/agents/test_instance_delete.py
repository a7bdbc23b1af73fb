"""Deleting a conversation races nothing: it is refused while a Turn of it is queued or running,
and a history reported deleted never comes back."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.daemon import Daemon, run_cli, wait_until_processing
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


def history(swarm: Orchestrator, key: str) -> str:
    conversation = swarm.state_dir / "agents" / "beta" / "instances" / key / "conversation"
    return "".join(p.read_text() for p in conversation.glob("*.jsonl"))


async def delete(swarm: Orchestrator, key: str) -> dict[str, object]:
    answer = await swarm.operations.delete_instance("beta", key)
    return answer.to_wire()


@pytest.mark.parametrize("delay_steps", [0, 1, 3, 10, 30])
async def test_a_delete_racing_a_send_never_reports_a_history_that_comes_back(
    swarm: Orchestrator, delay_steps: int
) -> None:
    key = f"race{delay_steps}"
    async with asyncio.timeout(30):
        assert (await swarm.request("old secret", agent="beta", instance_key=key)).status == "ok"
        turn = asyncio.ensure_future(swarm.request("slow 0.5", agent="beta", instance_key=key))
        for _ in range(delay_steps):
            await asyncio.sleep(0)  # let the send travel a little further each time
        answer = await delete(swarm, key)
        await turn
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    files = history(swarm, key)
    if answer.get("ok"):
        assert answer.get("deleted") is True
        assert "old secret" not in files  # deleted means deleted, even after the Turn
    else:
        assert "queued or running" in str(answer.get("error"))
        assert "old secret" in files


async def test_a_delete_while_the_turn_runs_is_refused_then_succeeds(swarm: Orchestrator) -> None:
    async with asyncio.timeout(30):
        turn = asyncio.ensure_future(swarm.request("slow 1", agent="beta", instance_key="k"))
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        refused = await delete(swarm, "k")
        assert refused["ok"] is False
        assert (await turn).status == "ok"
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        done = await delete(swarm, "k")
    assert done == {"ok": True, "deleted": True}
    assert not (swarm.state_dir / "agents" / "beta" / "instances" / "k").exists()


def test_a_delete_while_the_daemon_drains_is_still_carried_out_by_the_agent(
    tmp_path: Path,
) -> None:
    """SIGTERM to the daemon, then `instances delete` while a Turn of that conversation still
    runs: the daemon still answers (status shows the drain) and the agent refuses, instead of
    the CLI deleting the files under the Turn that then writes the history back."""
    # A grace period no loaded machine outruns: the CLI calls below all happen inside it.
    daemon = Daemon(tmp_path, grace=60)
    gate = tmp_path / "gate"  # the Turn runs until this file exists
    send = None
    try:
        daemon.wait_for("agent ready")
        first = run_cli("send", "beta", "old secret", "--instance", "k", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        send = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "send",
                "beta",
                f"hold {gate}",
                "--instance",
                "k",
            ],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until_processing(tmp_path, "beta")
        daemon.process.send_signal(signal.SIGTERM)
        daemon.wait_for("stopping")
        deleted = run_cli("instances", "delete", "beta", "k", cwd=tmp_path)
        status = run_cli("status", "--json", cwd=tmp_path)
        late = run_cli("send", "beta", "late", "--instance", "other", cwd=tmp_path)
        gate.touch()  # all asked while the Turn ran: let it finish
        answer, complaint = send.communicate(timeout=60)
        assert daemon.process.wait(timeout=60) == 0
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        daemon.stop()
    assert answer.strip() == "released", complaint
    files = history_on_disk(tmp_path / ".goondan", "k")
    if deleted.returncode == 0:
        assert "old secret" not in files  # reported deleted: it must not come back
    else:
        assert "queued or running" in deleted.stderr, deleted.stderr
        assert "old secret" in files
    assert status.returncode == 0, status.stderr  # the daemon answers until its agents are gone
    rows = {r["agent"]: r for r in json.loads(status.stdout)["agents"]}
    assert rows["beta"]["status"] == "draining"
    assert late.returncode == 1
    assert "the daemon is shutting down" in late.stderr


def history_on_disk(state_dir: Path, key: str) -> str:
    conversation = state_dir / "agents" / "beta" / "instances" / key / "conversation"
    return "".join(p.read_text() for p in conversation.glob("*.jsonl"))
