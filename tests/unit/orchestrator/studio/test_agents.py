"""The studio after the fact: the swarm's name and each agent's restarts as the daemon showed
them, read from the event log; an agent whose call waits for an operator says so."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from goondan.state_files.approvals import Approval, write_approval
from ipc.runtime_events import read_event
from orchestrator.studio.agents import AgentRecords
from orchestrator.studio.server import Studio
from tests.support.studio_events import event


def process(kind: str, agent: str, second: int = 0, **fields: Any) -> dict[str, Any]:
    stamp = f"2026-11-23T17:58:{second:02d}.000Z"
    return {"type": f"process.{kind}", "timestamp": stamp, "agentName": agent, **fields}


def daemon_started(swarm: str) -> dict[str, Any]:
    """The mark a daemon writes when it starts (its own ``process.ready``)."""
    return process("ready", "orchestrator", pid=4242, swarm=swarm)


def records(events: list[dict[str, Any]]) -> AgentRecords:
    book = AgentRecords()
    for item in events:
        book.add(read_event(item))  # type: ignore[arg-type]
    return book


def write_log(state_dir: Path, events: list[dict[str, Any]]) -> None:
    with open(state_dir / "runtime-events.jsonl", "a") as log:
        log.writelines(json.dumps(item) + "\n" for item in events)


OPERATOR_RESTART = [
    daemon_started("default"),
    process("spawned", "worker", 1, pid=10),
    process("ready", "worker", 1, pid=10),
    process("exited", "worker", 2, expected=True, exitCode=0, signal=None, reason="exit code 0"),
    process("spawned", "worker", 2, pid=11),
    process("ready", "worker", 3, pid=11),
]  # fmt: skip
"""``restart worker``: the daemon logs an asked-for exit and a new start, and counts 1."""


def test_an_operators_restart_counts_as_the_daemon_counted_it() -> None:
    worker = records(OPERATOR_RESTART)["worker"]
    assert (worker.restarts, worker.crashes, worker.pid, worker.status) == (1, 0, 11, "idle")


def test_a_crash_restart_is_counted_once_not_by_its_exit_and_its_start_again() -> None:
    crashed = [
        daemon_started("default"),
        process("spawned", "worker", 1, pid=10),
        process("exited", "worker", 2, expected=False, signal="SIGKILL", reason="signal SIGKILL"),
        process("restarting", "worker", 2, restarts=1),
        process("spawned", "worker", 2, pid=11),
        process("exited", "worker", 3, expected=False, exitCode=1, reason="exit code 1"),
        process("restarting", "worker", 3, restarts=2),
        process("spawned", "worker", 3, pid=12),
    ]  # fmt: skip
    worker = records(crashed)["worker"]
    assert (worker.restarts, worker.crashes) == (2, 2)


def test_a_new_daemon_starts_the_counts_again_and_names_its_swarm() -> None:
    book = records(
        [
            *OPERATOR_RESTART,
            process("exited", "worker", 4, expected=True, exitCode=0, reason="exit code 0"),
            daemon_started("ledger"),  # the daemon stopped; a new one runs another swarm
            process("spawned", "worker", 5, pid=20),  # not a restart: the first start
        ]
    )
    assert book.swarm == "ledger"
    assert (book["worker"].restarts, book["worker"].pid) == (0, 20)
    assert "orchestrator" not in book  # the daemon is not one of the swarm's agents


async def test_after_the_fact_the_header_keeps_the_swarm_and_the_restarts(tmp_path: Path) -> None:
    write_log(tmp_path, OPERATOR_RESTART)
    body = await Studio(tmp_path).agents()
    assert body["mode"] == "offline"
    assert body["swarm"] == "default"
    assert [(row["agent"], row["restarts"]) for row in body["agents"]] == [("worker", 1)]


async def test_an_agent_whose_call_is_parked_awaits_approval_not_processing(
    tmp_path: Path,
) -> None:
    busy = [
        *OPERATOR_RESTART,
        event("turn.started", "04.000", "worker", "wt"),
        process("spawned", "coordinator", 4, pid=12),
        process("ready", "coordinator", 4, pid=12),
        event("turn.started", "04.500", "coordinator", "ct"),
    ]
    write_log(tmp_path, busy)
    studio = Studio(tmp_path)
    before = {row["agent"]: row for row in (await studio.agents())["agents"]}
    assert before["worker"]["status"] == "processing"
    instance = tmp_path / "agents" / "worker" / "instances" / "default"
    write_approval(
        Approval(
            approval_id="apr_1f2e3d4c5b6a7980",
            tool_call_id="call_1",
            tool_name="bash__exec",
            arguments={"command": "ls"},
            agent_name="worker",
            instance_key="default",
            trace_id="t",
            turn_id="wt",
            requested_at="2026-11-23T17:58:04.100Z",
            expires_at_unix=time.time() + 3600,
            path=instance / "approvals" / "apr_1f2e3d4c5b6a7980.json",
        )
    )
    body = await studio.agents()
    rows = {row["agent"]: row for row in body["agents"]}
    assert (rows["worker"]["status"], rows["worker"]["pendingApprovals"]) == (
        "awaitingApproval",
        1,
    )
    # The coordinator works on (its request to the worker waits; that is processing).
    assert (rows["coordinator"]["status"], rows["coordinator"]["pendingApprovals"]) == (
        "processing",
        0,
    )
    assert body["pendingApprovals"] == 1
