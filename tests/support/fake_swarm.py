"""A swarm the HTTP API can be served from in-process: it implements
:class:`~orchestrator.operations.SwarmOperations` with answers the test sets, and records what
it was asked."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from goondan.defaults import DEFAULT_INSTANCE_KEY
from goondan.usage import Usage
from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from ipc.questions import ApprovalDecision
from orchestrator.approvals import DecisionOutcome
from orchestrator.operations import (
    ConnectionState,
    DeltaSink,
    EventListener,
    OperationRefused,
    SwarmOperations,
    SwarmProcesses,
)
from orchestrator.operations.live import EventHub, Subscription
from orchestrator.status import ProcessStatus
from orchestrator.supervisor import AgentHandle


def ready_handle(name: str, pid: int = 4242) -> AgentHandle:
    """A handle of an agent whose process runs and is idle."""
    handle = AgentHandle(name, None)  # type: ignore[arg-type]  # no plan: nothing reads it
    handle.worker = SimpleNamespace(pid=pid, node=None)  # no process: a pid alone
    handle.status = ProcessStatus.IDLE
    return handle


@dataclass
class FakeSwarm:
    """Agents ``alpha`` (the entry agent, ready) and ``beta`` (not started)."""

    name: str = "demo"
    entry_agent: str = "alpha"
    stopping: bool = False
    handles: dict[str, AgentHandle] = field(
        default_factory=lambda: {"alpha": ready_handle("alpha"), "beta": AgentHandle("beta", None)}  # type: ignore[arg-type]
    )
    answer: DelegateAnswer = field(default_factory=lambda: DelegateAnswer("ok", "done"))
    """What every request answers."""
    deltas: list[str] = field(default_factory=list)
    """Text a request streams to its ``on_delta`` before it answers."""
    asked: list[dict[str, Any]] = field(default_factory=list)
    """Every request and send, with its options."""
    restart_refusal: str | None = None
    running: dict[str, list[str]] = field(default_factory=dict)
    """Request or trace id → the traces :meth:`cancel` cancels."""
    pending_rows: list[dict[str, Any]] = field(default_factory=list)
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)
    instance_rows: list[dict[str, Any]] = field(default_factory=list)
    instance_answer: dict[str, Any] = field(default_factory=lambda: {"ok": True, "deleted": True})
    approval_rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: list[tuple[ApprovalDecision, bool]] = field(default_factory=list)
    agent_pids: dict[int, str] = field(default_factory=dict)
    """Pids the swarm runs as agents (none may decide an approval)."""
    daemon_pid: int = field(default_factory=os.getpid)
    """The daemon's pid: this process, as when a test runs the daemon in its own loop."""
    recorded: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    live: EventHub = field(default_factory=EventHub)

    def agent_names(self) -> Collection[str]:
        return self.handles.keys()

    def agent(self, name: str) -> AgentHandle | None:
        return self.handles.get(name)

    def status(self) -> dict[str, Any]:
        rows = [handle.snapshot(0.0) for handle in self.handles.values()]
        return {"swarm": self.name, "agents": rows, "connections": []}

    async def restart(self, agent: str, *, fresh: bool = False) -> dict[str, Any]:
        if self.restart_refusal is not None:
            raise OperationRefused(self.restart_refusal)
        self.asked.append({"restart": agent, "fresh": fresh})
        body: dict[str, Any] = {"agent": agent, "pid": 5151}
        return {**body, "deletedInstances": ["default"]} if fresh else body

    async def request(
        self,
        text: str,
        *,
        agent: str | None = None,
        instance_key: str = DEFAULT_INSTANCE_KEY,
        timeout_ms: int | None = None,
        trace_id: str | None = None,
        on_delta: DeltaSink | None = None,
        relay: bool = False,
    ) -> DelegateAnswer:
        target = agent or self.entry_agent
        self.asked.append(
            {
                "text": text,
                "agent": target,
                "instanceKey": instance_key,
                "timeoutMs": timeout_ms,
                "relay": relay,
                "streamed": on_delta is not None,
            }
        )
        if on_delta is not None:
            for piece in self.deltas:
                on_delta(
                    target, TextDelta("c", piece, trace_id or "t", instance_key, "turn-1", "s0")
                )
        return self.answer

    def send(self, text: str, *, agent: str, instance_key: str) -> None:
        self.asked.append({"send": text, "agent": agent, "instanceKey": instance_key})

    def pending(self) -> list[dict[str, Any]]:
        return self.pending_rows

    def sends_in_flight(self) -> int:
        return 0

    def cancel(self, request_or_trace_id: str, reason: str) -> list[str]:
        return self.running.pop(request_or_trace_id, [])

    def instances(self, agent: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.instance_rows if agent is None or r["agentName"] == agent]

    async def delete_instance(self, agent: str, key: str) -> dict[str, Any]:
        return self.instance_answer

    async def restart_instance(self, agent: str, key: str) -> dict[str, Any]:
        return self.instance_answer

    def usage_report(self, *, traces: int = 50) -> dict[str, Any]:
        return {"traces": traces}

    def trace_usage(self, trace_id: str) -> dict[str, Any] | None:
        return self.traces.get(trace_id)

    def model_usage(self) -> Mapping[str, Usage]:
        return {}

    def pools(self) -> list[dict[str, Any]]:
        return []

    def approvals(self, *, agent: str | None, include_decided: bool) -> list[dict[str, Any]]:
        return [
            row
            for row in self.approval_rows.values()
            if (agent is None or row["agentName"] == agent)
            and (include_decided or row["status"] == "pending")
        ]

    def approval(self, approval_id: str) -> dict[str, Any] | None:
        return self.approval_rows.get(approval_id)

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        self.decisions.append((decision, wait))
        row = self.approval_rows.get(decision.approval_id)
        if row is None:
            return DecisionOutcome.refused(404, "APPROVAL_NOT_FOUND", "no such approval")
        status = "approved" if decision.decision == "approve" else "rejected"
        return DecisionOutcome(200, {"approval": {**row, "status": status}})

    def processes(self) -> SwarmProcesses:
        return SwarmProcesses(dict(self.agent_pids), {}, self.daemon_pid, os.geteuid())

    def record(self, kind: str, agent: str, **fields: Any) -> None:
        self.recorded.append((kind, agent, fields))

    def connection_names(self) -> Collection[str]:
        return ()

    def connection_states(self) -> list[ConnectionState]:
        return []

    def subscribe(self) -> AbstractAsyncContextManager[Subscription]:
        return self.live.subscribe()

    def watching(self, listener: EventListener) -> AbstractContextManager[None]:
        return self.live.watching(listener)


def _conforms(swarm: FakeSwarm) -> SwarmOperations:
    return swarm  # the type checker holds the fake to the protocol
