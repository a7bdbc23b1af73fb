"""Deleting a conversation races nothing: it is refused while a Turn of it is queued or running,
and a history reported deleted never comes back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.integration.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


def history(swarm: Orchestrator, key: str) -> str:
    conversation = swarm.state_dir / "agents" / "beta" / "instances" / key / "conversation"
    return "".join(p.read_text() for p in conversation.glob("*.jsonl"))


async def delete(swarm: Orchestrator, key: str) -> dict[str, object]:
    return await swarm.control.handle(
        {"cmd": "delete_instance", "agent": "beta", "instanceKey": key}
    )


@pytest.mark.parametrize("delay_steps", [0, 1, 3, 10, 30])
async def test_a_delete_racing_a_send_never_reports_a_history_that_comes_back(
    swarm: Orchestrator, delay_steps: int
) -> None:
    key = f"race{delay_steps}"
    async with asyncio.timeout(30):
        assert (await swarm.request("old secret", agent="beta", instance_key=key))["status"] == "ok"
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
        assert (await turn)["status"] == "ok"
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        done = await delete(swarm, "k")
    assert done == {"ok": True, "deleted": True}
    assert not (swarm.state_dir / "agents" / "beta" / "instances" / "k").exists()
