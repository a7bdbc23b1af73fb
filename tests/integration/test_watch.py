"""``run --watch``: a valid edit restarts only the changed agent; a broken edit changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.watch import Watcher
from tests.integration.swarm import write_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Orchestrator, Watcher, Path]]:
    path = write_swarm(tmp_path)
    orchestrator = Orchestrator(path, state_dir=tmp_path / "state")
    async with asyncio.timeout(30):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
    watcher = Watcher(orchestrator, interval=0.1)
    orchestrator.keep(asyncio.ensure_future(watcher.run()))
    yield orchestrator, watcher, path
    async with asyncio.timeout(60):
        await orchestrator.shutdown()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


async def test_an_edit_restarts_only_the_changed_agent(
    watched: tuple[Orchestrator, Watcher, Path],
) -> None:
    orchestrator, watcher, path = watched
    alpha_pid = orchestrator.supervisor.handles["alpha"].pid
    beta_pid = orchestrator.supervisor.handles["beta"].pid
    edit(path, 'reply: "beta got: {input}"', 'reply: "beta v2: {input}"')
    async with asyncio.timeout(30):
        outcome = await watcher.outcomes.get()
    assert outcome == {"valid": True, "errors": [], "restarted": ["beta"]}
    assert orchestrator.supervisor.handles["alpha"].pid == alpha_pid
    assert orchestrator.supervisor.handles["beta"].pid != beta_pid
    async with asyncio.timeout(30):
        answer = await orchestrator.request("hi", agent="beta")
    assert answer["output"] == "beta v2: hi"


async def test_a_broken_edit_keeps_the_old_configuration_running(
    watched: tuple[Orchestrator, Watcher, Path],
) -> None:
    orchestrator, watcher, path = watched
    beta_pid = orchestrator.supervisor.handles["beta"].pid
    edit(path, "kind: Swarm", "kind: Swarm\n  broken: [")
    async with asyncio.timeout(30):
        outcome = await watcher.outcomes.get()
    assert outcome["valid"] is False
    assert any("E_CONFIG_PARSE_ERROR" in e for e in outcome["errors"])
    assert orchestrator.supervisor.handles["beta"].pid == beta_pid
    async with asyncio.timeout(30):
        answer = await orchestrator.request("still?", agent="beta")
    assert answer["output"] == "beta got: still?"
