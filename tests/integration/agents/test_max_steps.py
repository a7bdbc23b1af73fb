"""A Turn that uses up ``maxStepsPerTurn``, in real processes: by default (upstream's) it
answers with its last text, and its caller gets that answer; ``onMaxSteps: error`` fails it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from tests.support.pair import running_pair

pytestmark = pytest.mark.timeout(120)


async def ask(swarm: Orchestrator, text: str, agent: str = "lead") -> DelegateAnswer:
    async with asyncio.timeout(30):
        return await swarm.request(text, agent=agent)


async def test_out_of_steps_answers_with_the_last_text_and_the_caller_gets_it(
    tmp_path: Path,
) -> None:
    async with running_pair(tmp_path) as swarm:
        answer = await ask(swarm, "loop", agent="helper")
        assert (answer.status, answer.output, answer.error) == ("ok", "still working", None)
        assert answer.turn is not None
        assert (answer.turn["finishReason"], answer.turn["stepCount"]) == ("max_steps", 3)
        silent = await ask(swarm, "silent loop", agent="helper")
        notice = "Turn stopped: reached maxStepsPerTurn (3) without a final answer."
        assert (silent.status, silent.output) == ("ok", notice)
        # A delegating caller is not failed by it: its tool got the answer.
        delegated = await ask(swarm, "ask loop")
        assert delegated.status == "ok"
        assert str(delegated.output).startswith("still working|corr_")


async def test_on_max_steps_error_fails_the_turn_and_its_caller(tmp_path: Path) -> None:
    async with running_pair(tmp_path, policy="onMaxSteps: error") as swarm:
        answer = await ask(swarm, "loop", agent="helper")
        assert answer.status == "error"
        assert answer.error is not None
        assert answer.error.code == "E_MAX_STEPS"
        assert answer.output == "still working"
        delegated = await ask(swarm, "ask loop")
        assert str(delegated.output).startswith("ERROR E_MAX_STEPS: ")
        assert str(delegated.output).endswith("Its last text: still working")
