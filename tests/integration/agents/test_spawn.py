"""agents__spawn in real processes: a relative cwd is the caller's, an escape is refused, the
workdir survives a SIGKILL, and ``spawned`` is false for any existing instance."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


def is_directory(path: str) -> bool:
    return os.path.isdir(path)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


async def ask(swarm: Orchestrator, text: str, agent: str = "alpha", key: str = "default") -> str:
    async with asyncio.timeout(30):
        answer = await swarm.request(text, agent=agent, instance_key=key)
    assert answer.status == "ok", answer
    return str(answer.output)


async def test_spawn_workdirs_stay_in_the_state_and_survive_restarts(
    swarm: Orchestrator, tmp_path: Path
) -> None:
    caller_workdir = swarm.state_dir / "agents" / "alpha" / "instances" / "default" / "workspace"
    spawned = json.loads(await ask(swarm, "spawn beta job-a cwd=jobs/a"))
    assert spawned["spawned"] is True
    assert spawned["cwd"] == str((caller_workdir / "jobs" / "a").resolve())
    assert is_directory(spawned["cwd"])
    assert await ask(swarm, "workdir", agent="beta", key="job-a") == spawned["cwd"]

    for escape in ("../../../../../../../../etc/goondan-test", "/etc/goondan-test"):
        refused = await ask(swarm, f"spawn beta job-x cwd={escape}")
        assert refused.startswith("ERROR E_SPAWN_CWD_REFUSED"), refused
    assert not is_directory("/etc/goondan-test")

    # another caller (another alpha conversation) asking for the same instance: not spawned
    again = json.loads(await ask(swarm, "spawn beta job-a", key="other"))
    assert (again["spawned"], again["cwd"]) == (False, spawned["cwd"])

    beta = swarm.supervisor.handle("beta")
    assert beta.pid is not None
    os.kill(beta.pid, signal.SIGKILL)
    async with asyncio.timeout(20):
        await swarm.supervisor.wait_until(lambda: beta.last_exit is not None)
    assert await ask(swarm, "workdir", agent="beta", key="job-a") == spawned["cwd"]
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    after = json.loads(await ask(swarm, "spawn beta job-a"))
    assert after["spawned"] is False
    metadata = json.loads(
        (swarm.state_dir / "agents" / "beta" / "instances" / "job-a" / "metadata.json").read_text()
    )
    assert metadata["workdir"] == spawned["cwd"]
    assert metadata["spawnedBy"]["agent"] == "alpha"


async def test_the_list_of_spawned_instances_survives_a_daemon_restart(tmp_path: Path) -> None:
    async with running_swarm(tmp_path) as first:
        spawned = json.loads(await ask(first, "spawn beta job-a cwd=jobs/a"))
        json.loads(await ask(first, "spawn beta job-b"))
        before = json.loads(await ask(first, "list"))
    assert [row["instanceKey"] for row in before["agents"]] == ["job-a", "job-b"]
    async with running_swarm(tmp_path) as second:  # a new daemon on the same state
        after = json.loads(await ask(second, "list"))
        assert json.loads(await ask(second, "list", key="other"))["agents"] == []
    # the same rows, in the same order (the time is the instance's own, a moment apart)
    assert [{**r, "createdAt": None} for r in after["agents"]] == [
        {**r, "createdAt": None} for r in before["agents"]
    ]
    assert after["agents"][0]["cwd"] == spawned["cwd"]
    assert (after["count"], after["agents"][0]["ownerAgent"]) == (2, "alpha")
