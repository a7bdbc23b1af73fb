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

import msgspec

from goondan.defaults import DEFAULT_INSTANCE_KEY
from goondan.usage import Usage
from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from ipc.questions import ApprovalDecision, DeleteInstanceResult, RestartInstanceResult
from ipc.runtime_events import RuntimeEvent
from orchestrator.operations import (
    AgentView,
    ConnectionState,
    DecisionOutcome,
    DeltaSink,
    EventListener,
    OperationRefused,
    SwarmOperations,
    SwarmProcesses,
)
from orchestrator.operations.answers import (
    AgentRow,
    ApprovalAnswer,
    ApprovalRow,
    ApprovalStatus,
    InstanceRow,
    PendingRow,
    PoolRow,
    Restarted,
    SwarmStatus,
    TraceUsage,
    UsageReport,
    UsageTally,
)
from orchestrator.operations.encoding import convert
from orchestrator.operations.live import EventHub, Subscription
from orchestrator.status import ProcessStatus
from orchestrator.supervisor import AgentHandle


def ready_handle(name: str, pid: int = 4242) -> AgentHandle:
    """A handle of an agent whose process runs and is idle."""
    handle = AgentHandle(name, None)  # type: ignore[arg-type]  # no plan: nothing reads it
    handle.worker = SimpleNamespace(pid=pid, node=None)  # no process: a pid alone
    handle.status = ProcessStatus.IDLE
    return handle


def agent_row(handle: AgentHandle) -> AgentRow:
    """``handle``'s status row, as the daemon shows an agent without conversations."""
    extra = {"instances": [], "pendingDelegates": 0, "sendsInFlight": 0, "permitsWaiting": 0}
    return convert({**handle.snapshot(0.0), **extra, "usage": None}, AgentRow)


def approval(approval_id: str, status: ApprovalStatus = "pending", **fields: object) -> ApprovalRow:
    """A parked call of ``alpha`` (``fields`` in camelCase replace its defaults)."""
    row: dict[str, object] = {
        "approvalId": approval_id,
        "toolCallId": "call-1",
        "toolName": "bash__exec",
        "arguments": {"command": "ls"},
        "agentName": "alpha",
        "instanceKey": "main",
        "traceId": "t-1",
        "turnId": "turn-1",
        "requestedAt": "2026-01-02T03:04:05.000Z",
        "expiresAt": "2100-01-01T00:00:00.000Z",
        "expiresAtUnix": 4102444800.0,
        "status": status,
        "started": False,
        "settled": False,
    }
    return convert({**row, **fields}, ApprovalRow)


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
    request_ids: list[str] = field(default_factory=list)
    """The request id of every request, in order."""
    restart_refusal: str | None = None
    running: dict[str, list[str]] = field(default_factory=dict)
    """Request or trace id → the traces :meth:`cancel` cancels."""
    pending_rows: list[PendingRow] = field(default_factory=list)
    traces: dict[str, TraceUsage] = field(default_factory=dict)
    instance_rows: list[InstanceRow] = field(default_factory=list)
    instance_refusal: str | None = None
    """Why deleting or restarting an instance is refused (``None``: it is done)."""
    approval_rows: dict[str, ApprovalRow] = field(default_factory=dict)
    decisions: list[tuple[ApprovalDecision, bool]] = field(default_factory=list)
    agent_pids: dict[int, str] = field(default_factory=dict)
    """Pids the swarm runs as agents (none may decide an approval)."""
    daemon_pid: int = field(default_factory=os.getpid)
    """The daemon's pid: this process, as when a test runs the daemon in its own loop."""
    recorded: list[tuple[RuntimeEvent, str]] = field(default_factory=list)
    live: EventHub = field(default_factory=EventHub)

    def agent_names(self) -> Collection[str]:
        return self.handles.keys()

    def agent(self, name: str) -> AgentView | None:
        handle = self.handles.get(name)
        if handle is None:
            return None
        return AgentView(name, handle.status, handle.ready_now, handle.restarts, None)

    def status(self) -> SwarmStatus:
        rows = [agent_row(handle) for handle in self.handles.values()]
        return SwarmStatus(swarm=self.name, agents=rows, connections=[])

    async def restart(self, agent: str, *, fresh: bool = False) -> Restarted:
        if self.restart_refusal is not None:
            raise OperationRefused(self.restart_refusal)
        self.asked.append({"restart": agent, "fresh": fresh})
        if fresh:
            return Restarted(agent=agent, pid=5151, deleted_instances=["default"])
        return Restarted(agent=agent, pid=5151)

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
        request_id: str = "",
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
        self.request_ids.append(request_id)
        if on_delta is not None:
            for piece in self.deltas:
                on_delta(
                    target, TextDelta("c", piece, trace_id or "t", instance_key, "turn-1", "s0")
                )
        return self.answer

    def pending(self) -> list[PendingRow]:
        return self.pending_rows

    def sends_in_flight(self) -> int:
        return 0

    def cancel(self, request_or_trace_id: str, reason: str) -> list[str]:
        return self.running.pop(request_or_trace_id, [])

    def instances(self, agent: str | None = None) -> list[InstanceRow]:
        return [r for r in self.instance_rows if agent is None or r.agent_name == agent]

    async def delete_instance(self, agent: str, key: str) -> DeleteInstanceResult:
        if self.instance_refusal is not None:
            return DeleteInstanceResult(error=self.instance_refusal)
        return DeleteInstanceResult(ok=True, deleted=True)

    async def restart_instance(self, agent: str, key: str) -> RestartInstanceResult:
        if self.instance_refusal is not None:
            return RestartInstanceResult(error=self.instance_refusal)
        return RestartInstanceResult(ok=True, loaded=True, stopped_turns=1)

    def usage_report(self, *, traces: int = 50) -> UsageReport:
        """An empty report, but for the traces it was asked for: ``traces`` of them."""
        nothing = UsageTally(input_tokens=0, output_tokens=0, total_tokens=0, cost=0, calls=0)
        rows = [
            TraceUsage(trace_id=f"t{n}", root="alpha", agents=[], started_at=None, usage=nothing)
            for n in range(traces)
        ]
        return UsageReport(total=nothing, agents=[], instances=[], traces=rows, pools=[])

    def trace_usage(self, trace_id: str) -> TraceUsage | None:
        return self.traces.get(trace_id)

    def model_usage(self) -> Mapping[str, Usage]:
        return {}

    def pools(self) -> list[PoolRow]:
        return []

    def approvals(self, *, agent: str | None, include_decided: bool) -> list[ApprovalRow]:
        return [
            row
            for row in self.approval_rows.values()
            if (agent is None or row.agent_name == agent)
            and (include_decided or row.status == "pending")
        ]

    def approval(self, approval_id: str) -> ApprovalRow | None:
        return self.approval_rows.get(approval_id)

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        self.decisions.append((decision, wait))
        row = self.approval_rows.get(decision.approval_id)
        if row is None:
            return DecisionOutcome.refused(404, "APPROVAL_NOT_FOUND", "no such approval")
        status: ApprovalStatus = "approved" if decision.decision == "approve" else "rejected"
        return DecisionOutcome(
            200, ApprovalAnswer(approval=msgspec.structs.replace(row, status=status))
        )

    def processes(self) -> SwarmProcesses:
        return SwarmProcesses(dict(self.agent_pids), {}, self.daemon_pid, os.geteuid())

    def record(self, event: RuntimeEvent, agent: str) -> None:
        self.recorded.append((event, agent))

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
