"""A tool that exits or is interrupted gives the model an error result; its agent stays up."""

from __future__ import annotations

import asyncio
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


async def ask(swarm: Orchestrator, text: str) -> str:
    async with asyncio.timeout(30):
        answer = await swarm.request(text, agent="beta")
    assert answer.status == "ok", answer
    return str(answer.output)


@pytest.mark.parametrize(
    ("how", "name"),
    [("sys.exit", "SystemExit"), ("raise", "SystemExit"), ("interrupt", "KeyboardInterrupt")],
)
async def test_a_tool_that_exits_is_an_error_result_and_the_agent_stays_up(
    swarm: Orchestrator, how: str, name: str
) -> None:
    pid = int(await ask(swarm, "pid"))
    for _ in range(3):  # a model that retries must not crash-loop the agent
        answer = await ask(swarm, f"exit {how}")
        assert answer.startswith("ERROR E_TOOL:"), answer
    handle = swarm.supervisor.handle("beta")
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert handle.pid == pid
    assert handle.restarts == 0
    assert await ask(swarm, "hello") == "beta got: hello"
    events = (swarm.state_dir / "runtime-events.jsonl").read_text()
    assert name in events  # the tool.failed event names the exception type


async def test_a_delegate_whose_payload_is_not_an_object_is_refused_at_once(
    swarm: Orchestrator,
) -> None:
    assert await ask(swarm, "odd delegate") == "IPC_MALFORMED_PAYLOAD"
    assert swarm.router.pending == {}
    assert await ask(swarm, "hello") == "beta got: hello"


@pytest.mark.parametrize("fd", [0, 1, 2])
async def test_an_agent_whose_standard_fds_a_tool_closed_restarts_clean(
    swarm: Orchestrator, fd: int
) -> None:
    beta = swarm.supervisor.handle("beta")
    pid = int(await ask(swarm, "pid"))
    assert await ask(swarm, f"closefd {fd}") == "closed"  # the Turn still answers
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_until(lambda: beta.pid not in (None, pid))
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert beta.last_exit is not None
    assert beta.last_exit.exitcode == 71  # EX_OSERR: broken standard descriptors
    assert await ask(swarm, "hello") == "beta got: hello"
