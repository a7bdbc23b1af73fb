"""Limits that protect the daemon: an overflow is a structured error, and the agent stays up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc import MAX_FRAME_BYTES
from orchestrator.daemon import Orchestrator
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


async def test_an_answer_over_the_frame_limit_becomes_an_error_for_its_caller(
    swarm: Orchestrator,
) -> None:
    async with asyncio.timeout(60):
        answer = await swarm.request("big", agent="beta")
        assert answer.status == "error"
        assert answer.error.code == "E_RESULT_TOO_LARGE"
        assert str(MAX_FRAME_BYTES) in answer.error.message
        # the agent is still the same process, and still answers
        pid = swarm.supervisor.handle("beta").pid
        assert (await swarm.request("hello", agent="beta")).output == "beta got: hello"
        assert swarm.supervisor.handle("beta").pid == pid


async def test_a_delegated_answer_over_the_limit_reaches_the_calling_agent_as_a_tool_error(
    swarm: Orchestrator,
) -> None:
    async with asyncio.timeout(60):
        answer = await swarm.request("ask beta big")
    assert answer.status == "ok"
    assert answer.output.startswith("ERROR E_RESULT_TOO_LARGE:")
