"""An agent process SIGKILLed mid-Turn: the caller keeps waiting and gets the Turn's one answer.

The real Orchestrator and real agent processes; the ledger tool (``tests/support/ledger.py``)
kills its own agent right after its effect, so each test knows exactly where the Turn died and
counts effects to prove no non-idempotent one is doubled.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_process.conversation import ConversationStore
from ipc import IpcError
from ipc.delegation import DelegateAnswer, Handoff
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.ledger import effects, ledger_swarm, runtime_events

pytestmark = pytest.mark.timeout(120)


def roles(orchestrator: Orchestrator, agent: str) -> list[str]:
    directory = orchestrator.state_dir / "agents" / agent / "instances" / "default"
    return [m.role for m in ConversationStore(directory / "conversation").load()]


async def ask(orchestrator: Orchestrator, text: str, agent: str = "front") -> DelegateAnswer:
    async with asyncio.timeout(60):
        return await orchestrator.request(text, agent=agent)


async def test_a_kill_in_a_non_idempotent_tool_is_answered_once_without_a_second_effect(
    tmp_path: Path,
) -> None:
    async with ledger_swarm(tmp_path) as swarm:
        pid = swarm.supervisor.handle("front").pid
        answer = await ask(swarm, "append k1")
        assert (answer.status, answer.output) == ("ok", "unsure E_TOOL_INTERRUPTED")
        assert swarm.supervisor.handle("front").pid != pid  # it did die
        assert effects(tmp_path) == ["append_die k1"]  # never run twice
        # One model answer asked the call, one answered its result: none asked again.
        assert roles(swarm, "front") == ["user", "assistant", "tool", "assistant"]
        [resumed] = runtime_events(swarm, "turn.resumed")
        assert (resumed["attempt"], resumed["replayed"]) == (2, False)
        assert resumed["traceId"] == answer.turn["traceId"]
        [first] = [
            e
            for e in runtime_events(swarm, "turn.started")
            if e["traceId"] == resumed["traceId"] and e["spanId"] != resumed["spanId"]
        ]
        assert resumed["resumedSpanId"] == first["spanId"]


async def test_a_kill_in_an_idempotent_tool_runs_the_call_again(tmp_path: Path) -> None:
    async with ledger_swarm(tmp_path) as swarm:
        answer = await ask(swarm, "note k2")
        assert (answer.status, answer.output) == ("ok", "done 2")
        assert effects(tmp_path) == ["note_die k2", "note_die k2"]
        assert roles(swarm, "front") == ["user", "assistant", "tool", "assistant"]


async def test_a_delegate_whose_target_dies_is_carried_through_its_restart(
    tmp_path: Path,
) -> None:
    async with ledger_swarm(tmp_path) as swarm:
        answer = await ask(swarm, "ask k3")
        assert (answer.status, answer.output) == ("ok", "front<unsure E_TOOL_INTERRUPTED>")
        assert effects(tmp_path) == ["append_die k3"]
        assert swarm.supervisor.handle("back").crashes == 1
        assert swarm.supervisor.handle("front").crashes == 0
        assert roles(swarm, "back") == ["user", "assistant", "tool", "assistant"]


async def test_a_turn_that_keeps_killing_its_agent_is_answered_agent_crashed(
    tmp_path: Path,
) -> None:
    async with ledger_swarm(tmp_path, attempts=2) as swarm:
        answer = await ask(swarm, "poison k4")
        assert answer.status == "error"
        assert answer.error.code == "AGENT_CRASHED"
        assert "2 times" in answer.error.message
        assert "maxTurnAttempts" in answer.error.message
        assert effects(tmp_path) == ["poison k4", "poison k4"]
        # The agent serves its other work again.
        async with asyncio.timeout(30):
            await swarm.supervisor.wait_for_status("front", ProcessStatus.IDLE)
        assert (await ask(swarm, "work k5")).output == "done 1"


async def test_an_agents_own_limit_overrides_the_swarms(tmp_path: Path) -> None:
    async with ledger_swarm(tmp_path, attempts=3, back_attempts=1) as swarm:
        answer = await ask(swarm, "poison k6", agent="back")
        assert answer.error.code == "AGENT_CRASHED"
        assert "once" in answer.error.message
        assert effects(tmp_path) == ["poison k6"]


async def test_a_send_whose_turn_dies_is_carried_not_reported(tmp_path: Path) -> None:
    async with ledger_swarm(tmp_path) as swarm:
        settled: asyncio.Future[IpcError | None] = asyncio.get_running_loop().create_future()
        handoff = Handoff(target="back", input="append k7", event_type="user.input")
        swarm.router.send("user", handoff, on_settled=settled.set_result)
        async with asyncio.timeout(60):
            assert await settled is None  # its Turn ended: nothing to report
        assert runtime_events(swarm, "delivery.lost") == []
        assert effects(tmp_path) == ["append_die k7"]
        directory = swarm.state_dir / "agents" / "back" / "instances" / "default"
        messages = ConversationStore(directory / "conversation").load()
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[-1].content == "unsure E_TOOL_INTERRUPTED"
