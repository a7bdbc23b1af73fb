"""The Orchestrator for real: child processes, pipes, crashes, signals, timeouts, cycles.

The Orchestrator runs in the test's event loop; every agent is a real process started through
the forkserver transport. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm, write_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


async def ask(
    swarm: Orchestrator, text: str, agent: str | None = None, wait: float = 30
) -> DelegateAnswer:
    async with asyncio.timeout(wait):
        return await swarm.request(text, agent=agent)


def pid_of(swarm: Orchestrator, name: str) -> int | None:
    return swarm.supervisor.handle(name).pid


async def test_agents_run_in_distinct_processes_and_b_spawns_on_first_delegate(
    swarm: Orchestrator,
) -> None:
    assert pid_of(swarm, "beta") is None  # on demand: not started yet
    alpha_pid = int((await ask(swarm, "pid")).output)
    beta_pid = int((await ask(swarm, "ask beta pid")).output)
    assert alpha_pid == pid_of(swarm, "alpha")
    assert beta_pid == pid_of(swarm, "beta")
    assert len({alpha_pid, beta_pid, os.getpid()}) == 3


async def test_a_request_returns_the_targets_answer_with_one_trace(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "ask beta hello there")
    assert answer.status == "ok"
    assert answer.output == "beta got: hello there"
    assert len(answer.turn["traceId"]) == 32


async def test_a_crash_mid_request_answers_at_once_and_the_agent_comes_back(
    swarm: Orchestrator,
) -> None:
    first_pid = int((await ask(swarm, "ask beta pid")).output)
    answer = await ask(swarm, "ask beta crash", wait=10)  # far below the 60 s request timeout
    assert answer.output.startswith("ERROR AGENT_CRASHED")
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert (await ask(swarm, "ask beta hello")).output == "beta got: hello"
    second_pid = pid_of(swarm, "beta")
    assert second_pid is not None
    assert second_pid != first_pid
    handle = swarm.supervisor.handle("beta")
    assert handle.last_exit is not None
    assert handle.last_exit.exitcode == 1


async def test_a_good_turn_of_a_restarted_agent_resets_its_crash_count(
    swarm: Orchestrator,
) -> None:
    """What only a real process shows: its crashes are counted and its successful Turn
    reports back. The backoff schedule itself is tested against the fake transport
    (tests/unit/orchestrator/test_supervisor.py)."""
    handle = swarm.supervisor.handle("beta")
    for crash in range(1, 3):
        answer = await ask(swarm, "crash", agent="beta", wait=20)
        assert answer.error.code == "AGENT_CRASHED", (crash, answer)
        async with asyncio.timeout(10):
            await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert handle.consecutive_crashes == 2
    assert (await ask(swarm, "hello", agent="beta")).output == "beta got: hello"
    assert handle.consecutive_crashes == 0
    assert handle.crashes == 2


async def test_clean_exits_nobody_asked_for_restart_without_backoff(swarm: Orchestrator) -> None:
    """A process that exits 0 unasked is restarted at once and not counted as a crash."""
    handle = swarm.supervisor.handle("beta")
    assert (await ask(swarm, "crash", agent="beta", wait=20)).error.code == "AGENT_CRASHED"
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert handle.consecutive_crashes == 1
    pids = set()
    for _ in range(2):
        answer = await ask(swarm, "quit", agent="beta", wait=20)
        assert answer.error.code == "AGENT_CRASHED"  # it left before answering
        async with asyncio.timeout(10):
            await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        assert handle.status is not ProcessStatus.CRASH_LOOP_BACK_OFF
        assert handle.consecutive_crashes == 0
        pids.add(handle.pid)
    assert len(pids) == 2  # restarted each time, at once
    assert handle.crashes == 1  # clean exits are not counted as crashes
    assert handle.last_exit is not None
    assert handle.last_exit.exitcode == 0
    assert (await ask(swarm, "hello", agent="beta")).output == "beta got: hello"


async def test_a_request_past_its_timeout_gets_the_timeout_error(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "ask beta timeout=300 slow 1")
    assert answer.output.startswith("ERROR AGENT_REQUEST_TIMEOUT")


async def test_an_unknown_agent_gets_its_error(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "ask nobody hi")
    assert answer.output.startswith("ERROR AGENT_NOT_FOUND")


async def test_a_cycle_is_refused_fast(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "ask beta ask alpha hi", wait=10)
    # beta's call back to alpha@default is refused; beta reports it, alpha passes it on
    assert (
        answer.output.startswith("ERROR AGENT_TURN_FAILED")
        or "CIRCULAR_CALL_DETECTED" in answer.output
    )
    assert "CIRCULAR_CALL_DETECTED" in answer.output
    assert "alpha@default -> beta@default -> alpha@default" in answer.output


async def test_garbage_in_a_pipe_does_not_stop_the_orchestrator(swarm: Orchestrator) -> None:
    assert (await ask(swarm, "ask beta garbage")).output == "garbage written"
    assert (await ask(swarm, "ask beta still there?")).output == "beta got: still there?"
    assert swarm.supervisor.handle("beta").status is ProcessStatus.IDLE


async def test_graceful_shutdown_lets_an_in_flight_turn_finish(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path, grace=10), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
        request = asyncio.ensure_future(orchestrator.request("slow 0.5", agent="beta"))
        await orchestrator.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        await orchestrator.shutdown()
        answer = await request
    assert answer.status == "ok"
    assert answer.output == "slow done"
    beta = orchestrator.supervisor.handle("beta")
    assert beta.status is ProcessStatus.TERMINATED
    assert beta.last_exit is not None
    assert beta.last_exit.exitcode == 0


async def test_a_turn_that_ignores_shutdown_is_killed_after_the_grace_period(
    tmp_path: Path,
) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path, grace=0.5), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
        request = asyncio.ensure_future(orchestrator.request("block 60", agent="beta"))
        await orchestrator.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
        # Bounded by the timeout above, half the Turn's 60 s: only the grace period ends it.
        await orchestrator.shutdown()
        answer = await request
    beta = orchestrator.supervisor.handle("beta")
    assert beta.status is ProcessStatus.TERMINATED
    assert beta.last_exit is not None
    assert beta.last_exit.signal is not None  # SIGTERM (or SIGKILL): it did not exit by itself
    assert answer.status == "error"
    assert answer.error.code in ("AGENT_CRASHED", "SHUTTING_DOWN")


async def test_catalog_spawn_list_and_send(swarm: Orchestrator, tmp_path: Path) -> None:
    import json

    catalog = json.loads((await ask(swarm, "catalog")).output)
    assert catalog["selfAgent"] == "alpha"
    assert catalog["availableAgents"] == ["alpha", "beta"]
    assert catalog["callableAgents"] == ["beta"]
    spawned = json.loads((await ask(swarm, "spawn beta job-1")).output)
    assert (spawned["target"], spawned["instanceKey"], spawned["spawned"]) == (
        "beta",
        "job-1",
        True,
    )
    again = json.loads((await ask(swarm, "spawn beta job-1")).output)
    assert again["spawned"] is False
    listed = json.loads((await ask(swarm, "list")).output)
    assert [(a["target"], a["instanceKey"], a["ownerAgent"]) for a in listed["agents"]] == [
        ("beta", "job-1", "alpha")
    ]
    sent = json.loads((await ask(swarm, "tell beta remember the milk")).output)
    assert sent["accepted"] is True
    # the instance queue is FIFO: a request after the send runs after the sent Turn
    assert (await ask(swarm, "ask beta hello")).output == "beta got: hello"
    conversation = tmp_path / "state" / "agents" / "beta" / "instances" / "default" / "conversation"
    text = (conversation / "base.jsonl").read_text()
    assert "remember the milk" in text


async def test_a_child_whose_pipe_closes_is_treated_as_exited(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "ask beta closepipe", wait=15)
    assert answer.output.startswith("ERROR AGENT_CRASHED")
    beta = swarm.supervisor.handle("beta")
    assert beta.last_exit is not None
    assert beta.last_exit.signal_name == "SIGKILL"
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert (await ask(swarm, "ask beta back?")).output == "beta got: back?"


async def test_self_restart_restarts_the_agent_after_its_turn(swarm: Orchestrator) -> None:
    answer = await ask(swarm, "restart yourself", agent="beta")
    assert answer.output == "restarting soon"  # the Turn finished and answered first
    beta = swarm.supervisor.handle("beta")
    old_pid = beta.pid
    async with asyncio.timeout(20):
        await swarm.supervisor.wait_for_status(
            "beta", ProcessStatus.DRAINING, ProcessStatus.TERMINATED, ProcessStatus.SPAWNING
        )
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert beta.pid != old_pid
    assert beta.last_exit is not None
    assert beta.last_exit.exitcode == 0
    assert (await ask(swarm, "hello", agent="beta")).output == "beta got: hello"
    lines = (swarm.state_dir / "runtime-events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    [requested] = [e for e in events if e["type"] == "process.restart_requested"]
    assert requested["reason"] == "upgrade"


async def test_a_restart_after_a_crash_reports_and_resumes_unfolded_conversations(
    tmp_path: Path,
) -> None:
    """Events written mid-Turn by a killed process are reported at start and resumed."""
    from agent_process.conversation import ConversationStore
    from tools_base import Message

    conversation = tmp_path / "state" / "agents" / "beta" / "instances" / "default" / "conversation"
    store = ConversationStore(conversation)
    store.load()
    store.append(Message(id="m-before-crash", role="user", content="written before the crash"))
    assert (conversation / "events.jsonl").stat().st_size > 0  # never folded: the "crash"
    orchestrator = Orchestrator.from_bundle(write_swarm(tmp_path), state_dir=tmp_path / "state")
    async with asyncio.timeout(30):
        await orchestrator.start()
        try:
            answer = await orchestrator.request("hello", agent="beta")
        finally:
            await orchestrator.shutdown()
    assert answer.output == "beta got: hello"
    events = (tmp_path / "state" / "runtime-events.jsonl").read_text()
    assert '"process.resume_pending"' in events
    contents = [m.content for m in ConversationStore(conversation).load()]
    assert contents[:2] == ["written before the crash", "hello"]


async def test_a_kill_between_tool_calls_leaves_a_resumable_conversation(
    swarm: Orchestrator,
) -> None:
    """The first call's result was on disk before the kill; the unfinished call is closed."""
    import json

    from agent_process.conversation import ConversationStore

    crashed = await ask(swarm, "twostep", agent="beta", wait=20)
    assert crashed.error.code == "AGENT_CRASHED"
    async with asyncio.timeout(10):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert (await ask(swarm, "after", agent="beta")).output == "beta got: after"
    conversation = swarm.state_dir / "agents" / "beta" / "instances" / "default" / "conversation"
    messages = ConversationStore(conversation).load()
    roles = [m.role for m in messages]
    assert roles[:4] == ["user", "assistant", "tool", "tool"]
    first, second = (m.tool_result or {} for m in messages[2:4])
    assert first["status"] == "ok"  # fault__pid ran and its result survived the kill
    assert (second["toolName"], second["status"], second["error"]["code"]) == (
        "fault__crash",
        "error",
        "E_TOOL_INTERRUPTED",
    )
    assert [m.content for m in messages if m.role == "user"] == ["twostep", "after"]
    json.dumps([m.to_json() for m in messages])  # the whole conversation is still valid JSON
