"""Deadlocks across separate requests: a@k waits for b@k while b@k's running Turn asks a@k.
The Orchestrator sees the wait-for cycle when the closing request is admitted and refuses it
at once, instead of letting both wait for their timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


async def cross(swarm: Orchestrator, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """beta@key starts a Turn that asks alpha@key after 2 s; meanwhile alpha@key asks beta@key."""
    closing = asyncio.ensure_future(
        swarm.request("slowask alpha hello", agent="beta", instance_key=key)
    )
    await swarm.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
    waiting = asyncio.ensure_future(swarm.request("ask beta hi", agent="alpha", instance_key=key))
    return await closing, await waiting


async def test_a_crossing_request_is_refused_at_once(swarm: Orchestrator) -> None:
    async with asyncio.timeout(20):  # the default request timeout is 60 s
        closing, waiting = await cross(swarm, "k")
    assert closing.output.startswith("ERROR CIRCULAR_CALL_DETECTED"), closing
    assert "beta@k -> alpha@k -> beta@k" in closing.output
    assert waiting.output == "beta got: hi"  # answered once beta's Turn ended


async def test_many_crossings_all_answer_without_timeouts(swarm: Orchestrator) -> None:
    keys = [f"k{n}" for n in range(8)]
    async with asyncio.timeout(30):
        await swarm.request("hello", agent="beta")  # both agents up
        closing = [
            asyncio.ensure_future(swarm.request("slowask alpha x", agent="beta", instance_key=k))
            for k in keys
        ]
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        waiting = [
            asyncio.ensure_future(swarm.request("ask beta hi", agent="alpha", instance_key=k))
            for k in keys
        ]
        results = await asyncio.gather(*closing, *waiting)
    outputs = [str(r.output) for r in results]
    assert not [o for o in outputs if "TIMEOUT" in o]
    assert sum("CIRCULAR_CALL_DETECTED" in o for o in outputs) == len(keys)
    assert outputs[len(keys) :] == ["beta got: hi"] * len(keys)
