"""Background tool calls in real agent processes: a completion wakes an idle conversation, a
restart answers lost work with E_TOOL_PENDING_LOST, and the model can poll a handle."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


async def ask(swarm: Orchestrator, text: str, key: str) -> str:
    async with asyncio.timeout(30):
        answer = await swarm.request(text, agent="beta", instance_key=key)
    assert answer.status == "ok", answer
    return str(answer.output)


def conversation(swarm: Orchestrator, key: str) -> str:
    directory = swarm.state_dir / "agents" / "beta" / "instances" / key / "conversation"
    return "".join(p.read_text() for p in sorted(directory.glob("*.jsonl")))


def ledger(swarm: Orchestrator, key: str) -> Path:
    return swarm.state_dir / "agents" / "beta" / "instances" / key / "pending.json"


async def test_a_completion_wakes_the_idle_conversation(swarm: Orchestrator) -> None:
    assert (await ask(swarm, "bg 0.3", "k")).startswith("started")
    assert ledger(swarm, "k").exists()  # recorded while the work runs
    assert await ask(swarm, "poll bg-0.3", "k") == "running"
    async with asyncio.timeout(20):  # nobody sends anything: the completion starts a Turn
        await swarm.supervisor.wait_until(lambda: "noticed bg done" in conversation(swarm, "k"))
    assert not ledger(swarm, "k").exists()
    assert await ask(swarm, "poll bg-0.3", "k") == "completed"
    assert await ask(swarm, "poll nothing-like-it", "k") == "unknown"


@pytest.mark.parametrize("how", ["graceful restart", "SIGKILL"])
async def test_work_lost_in_a_restart_is_answered_pending_lost(
    swarm: Orchestrator, how: str
) -> None:
    assert (await ask(swarm, "bg 60", "k2")).startswith("started")
    beta = swarm.supervisor.handle("beta")
    old_pid = beta.pid
    assert old_pid is not None
    if how == "SIGKILL":
        os.kill(old_pid, signal.SIGKILL)
        async with asyncio.timeout(20):
            await swarm.supervisor.wait_until(lambda: beta.pid not in (None, old_pid))
            await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    else:
        async with asyncio.timeout(30):
            await swarm.supervisor.restart_agent("beta", 5)
    text = conversation(swarm, "k2")
    assert "E_TOOL_PENDING_LOST" in text  # closed at boot, before any new Turn
    assert not ledger(swarm, "k2").exists()
    assert await ask(swarm, "hello", "k2") == "beta got: hello"
