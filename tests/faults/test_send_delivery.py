"""Fire-and-forget sends lost to a crash are redelivered, carried or reported, never dropped.

The real Orchestrator with real agent processes: ``alpha`` sends to ``beta`` with
``agents__send``, and ``beta`` dies at chosen moments.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from ipc import IpcError
from orchestrator.daemon import Orchestrator
from orchestrator.router import InFlightSend, Router
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm, write_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


def conversation(swarm: Orchestrator, agent: str) -> list[Any]:
    directory = swarm.state_dir / "agents" / agent / "instances" / "default" / "conversation"
    return ConversationStore(directory).load()


def runtime_events(swarm: Orchestrator, kind: str) -> list[dict[str, Any]]:
    path = swarm.state_dir / "runtime-events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("type") == kind]


async def sends_settled(router: Router, within: float = 20) -> None:
    """Wait until the router tracks no send (each was finished, redelivered or reported)."""
    settled = asyncio.Event()
    finish = router._finish_send

    def finishing(send: InFlightSend, error: IpcError | None = None) -> None:
        finish(send, error)
        if not router.sends:
            settled.set()

    router._finish_send = finishing  # type: ignore[method-assign]
    try:
        if router.sends:
            async with asyncio.timeout(within):
                await settled.wait()
    finally:
        del router._finish_send


async def test_a_send_whose_turn_crashes_past_its_attempts_is_reported_to_the_sender(
    swarm: Orchestrator,
) -> None:
    """The test swarm allows one attempt per Turn (``maxTurnAttempts: 1``): the send is not
    carried over the restart (that is tests/faults/test_resume_after_kill.py's) but reported."""
    async with asyncio.timeout(30):
        told = await swarm.request("tell beta crash")
    assert told.status == "ok"
    await sends_settled(swarm.router)
    [lost] = runtime_events(swarm, "delivery.lost")
    assert (lost["sender"], lost["agentName"], lost["started"]) == ("alpha", "beta", True)
    assert lost["error"]["code"] == "AGENT_CRASHED"
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        await swarm.request("pid")  # alpha's next Turn takes the report from its inbox
    reports = [
        json.loads(m.content)
        for m in conversation(swarm, "alpha")
        if m.metadata.get("__goondanInbox") == "send_failed"
    ]
    assert len(reports) == 1
    assert reports[0]["eventId"] == lost["eventId"]
    assert (reports[0]["target"], reports[0]["error"]["code"]) == ("beta", "AGENT_CRASHED")


async def test_a_queued_send_of_a_killed_agent_is_delivered_once_after_the_restart(
    swarm: Orchestrator,
) -> None:
    async with asyncio.timeout(30):
        await swarm.supervisor.ensure_running("beta")
    busy = asyncio.ensure_future(swarm.request("slow 30", agent="beta"))
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        assert (await swarm.request("tell beta queued behind")).status == "ok"
    [send] = swarm.router.sends.values()
    assert not send.started  # beta's only instance is busy with the slow Turn
    pid = swarm.supervisor.handle("beta").pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    async with asyncio.timeout(30):
        crashed = await busy
    assert crashed.error.code == "AGENT_CRASHED"
    await sends_settled(swarm.router)
    assert runtime_events(swarm, "delivery.lost") == []
    users = [m.content for m in conversation(swarm, "beta") if m.role == "user"]
    assert users.count("queued behind") == 1
    assert swarm.supervisor.handle("beta").pid != pid


async def test_a_send_to_an_agent_that_cannot_start_is_reported(tmp_path: Path) -> None:
    path = write_swarm(tmp_path)
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        # A beta that can never boot: its model provider is unknown.
        handle = orchestrator.supervisor.handle("beta")
        nowhere = handle.plan.model.model_copy(update={"provider": "nowhere"})
        handle.plan = handle.plan.model_copy(update={"model": nowhere})
        async with asyncio.timeout(30):
            assert (await orchestrator.request("tell beta hello")).status == "ok"
        await sends_settled(orchestrator.router, within=30)
        [lost] = runtime_events(orchestrator, "delivery.lost")
        assert lost["error"]["code"] in ("AGENT_UNAVAILABLE", "AGENT_CRASHED")
        assert lost["started"] is False
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()
