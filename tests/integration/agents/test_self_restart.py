"""``self-restart`` in real processes: the configuration on disk is read again and validated;
valid, the swarm restarts on it (every changed agent and the caller, conversations kept) with
no ``--watch``; invalid, the tool's result says why and nothing restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from orchestrator.daemon import Orchestrator
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


async def ask(swarm: Orchestrator, text: str, agent: str) -> str:
    async with asyncio.timeout(30):
        answer = await swarm.request(text, agent=agent)
    return str(answer.output)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


async def test_a_restart_adopts_the_edited_configuration_and_keeps_history(
    tmp_path: Path,
) -> None:
    async with running_swarm(tmp_path) as swarm:
        assert await ask(swarm, "before", "beta") == "beta got: before"
        alpha_pid = swarm.supervisor.handle("alpha").pid
        edit(swarm.bundle_path, 'reply: "beta got: {input}"', 'reply: "beta v2: {input}"')
        edit(swarm.bundle_path, 'reply: "alpha got: {input}"', 'reply: "alpha v2: {input}"')
        async with swarm.live.subscribe() as subscription, asyncio.timeout(60):
            assert await ask(swarm, "restart yourself", "beta") == "restarting soon"
            while True:
                event: dict[str, Any] = await subscription.queue.get()
                if event["type"] in ("process.config_applied", "process.config_rejected"):
                    break
        assert event["type"] == "process.config_applied"
        assert sorted(event["restarted"]) == ["alpha", "beta"]
        assert swarm.supervisor.handle("alpha").pid != alpha_pid
        assert await ask(swarm, "after", "beta") == "beta v2: after"
        assert await ask(swarm, "hi", "alpha") == "alpha v2: hi"
        directory = swarm.state_dir / "agents" / "beta" / "instances" / "default"
        said = [m.content for m in ConversationStore(directory / "conversation").load()]
        assert said[:2] == ["before", "beta got: before"]  # the history survived


async def test_an_invalid_configuration_refuses_the_restart_and_says_why(
    tmp_path: Path,
) -> None:
    async with running_swarm(tmp_path) as swarm:
        await ask(swarm, "hello", "beta")
        beta_pid = swarm.supervisor.handle("beta").pid
        good = swarm.bundle_path.read_text()
        edit(swarm.bundle_path, "kind: Swarm", "kind: Swarm\n  broken: [")
        answer = await ask(swarm, "restart yourself", "beta")
        assert answer.startswith("ERROR E_CONFIG_PARSE_ERROR: restart refused"), answer
        assert "the swarm keeps running" in answer
        swarm.bundle_path.write_text(good)
        # the Turn that refused asked for nothing: the same process serves on
        assert await ask(swarm, "still there?", "beta") == "beta got: still there?"
        assert swarm.supervisor.handle("beta").pid == beta_pid
        lines = (swarm.state_dir / "runtime-events.jsonl").read_text()
        assert "process.restart_requested" not in lines
