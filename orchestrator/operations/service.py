"""The swarm's operations, as the daemon carries them out: :class:`SwarmService` implements
:class:`~orchestrator.operations.protocol.SwarmOperations` over the daemon's collaborators (the
supervisor, the router, the model broker, the Connections, the event log, the live event hub,
the approval desk and the task owner), never over the Orchestrator itself, which only composes
it, starts it and stops it.

Every answer is a struct of :mod:`orchestrator.operations.answers`; rows the collaborators
still build as JSON objects (a process's, a pool's, the cluster's, the usage book's, an
instance's ``metadata.json``) are checked into their struct once, here.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Collection, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import structlog

from bundle.prices import PriceSource, model_price
from ipc import ORCHESTRATOR, IpcError
from ipc.delegation import DelegateAnswer
from ipc.questions import (
    ApprovalDecision,
    DeleteInstance,
    DeleteInstanceResult,
    RestartInstance,
    RestartInstanceResult,
)
from ipc.runtime_events import RequestCancelledEvent, RuntimeEvent
from orchestrator.approvals import find_approval, list_approvals
from orchestrator.assembly import agent_plan
from orchestrator.limits.usage import usage_report
from orchestrator.operations.answers import (
    AgentRow,
    ApprovalRow,
    Cluster,
    ConnectionRow,
    InstanceRow,
    PendingRow,
    PoolRow,
    Restarted,
    SwarmStatus,
    TraceUsage,
    UsageReport,
)
from orchestrator.operations.encoding import convert
from orchestrator.operations.protocol import (
    AgentView,
    ConnectionState,
    DecisionOutcome,
    EventListener,
    OperationRefused,
    SwarmProcesses,
    TurnOptions,
)
from orchestrator.state_dir import delete_instance_dir, list_instances

if TYPE_CHECKING:
    from goondan.usage import Usage
    from orchestrator.cluster.leader import ClusterTransport
    from orchestrator.connections import Connections
    from orchestrator.deciding import ApprovalDesk
    from orchestrator.eventlog import EventLog
    from orchestrator.limits import ModelBroker
    from orchestrator.operations.live import EventHub, Subscription
    from orchestrator.router import Router
    from orchestrator.supervisor import AgentHandle, Supervisor
    from orchestrator.tasks import TaskOwner


@dataclass(eq=False)
class SwarmService:
    """The operations of one running swarm (see the module's docstring)."""

    name: str
    """The swarm's name."""
    entry_agent: str
    """The agent a request goes to when it names none."""
    grace: float
    """Seconds an agent has to stop gracefully."""
    state_dir: Path
    supervisor: Supervisor
    router: Router
    broker: ModelBroker
    connections: Connections
    events: EventLog
    live: EventHub
    desk: ApprovalDesk
    helpers: TaskOwner
    """Owns the work started on an operator's behalf (restarts): the daemon
    cancels it first at shutdown."""
    cluster: ClusterTransport | None = None
    """With ``--cluster``: where placed agents run, and keep their conversations."""
    stopping: bool = False
    """Shutting down: requests that would start work are refused."""
    log: structlog.typing.FilteringBoundLogger = field(
        default_factory=lambda: structlog.get_logger("goondan.orchestrator")
    )

    # -- agents ------------------------------------------------------------------------------

    def agent_names(self) -> Collection[str]:
        """The swarm's agents (a reload may change them)."""
        return self.supervisor.names()

    def agent(self, name: str) -> AgentView | None:
        """Agent ``name``'s process as it stands (``None``: no such agent)."""
        handle = self.supervisor.handle(name)
        if handle is None:
            return None
        plan = agent_plan(self.supervisor, name)
        return AgentView(name, handle.status, handle.ready_now, handle.restarts, plan)

    def status(self) -> SwarmStatus:
        """The swarm, a row per agent (:meth:`agent_rows`) and per Connection, the cluster
        and the rate-limit pools when there are any."""
        status = SwarmStatus(
            swarm=self.name,
            agents=self.agent_rows(),
            connections=convert(self.connections.status(), list[ConnectionRow]),
        )
        if self.cluster is not None:
            status.cluster = convert(self.cluster.cluster_status(), Cluster)
        if self.broker.pools:
            status.pools = self.pools()
        return status

    def agent_rows(self) -> list[AgentRow]:
        """One row per agent: process state, instances on disk, requests waiting for its
        answer (``pendingDelegates``) and sends it has not finished (``sendsInFlight``).

        Kept to one directory read per agent and one pass over the pending requests and the
        waiting permit requests, so the table of a swarm of hundreds of agents is still there at
        once.
        """
        pending = Counter(p.target for p in self.router.pending.values())
        sends = Counter(s.target for s in self.router.sends.values())
        permits = self.broker.waiting_by_agent()
        agents = os.path.join(self.state_dir, "agents")
        rows = []
        for row in self.supervisor.status():
            name = row["agent"]
            try:
                row["instances"] = sorted(os.listdir(os.path.join(agents, name, "instances")))
            except (FileNotFoundError, NotADirectoryError):
                row["instances"] = []
            row["pendingDelegates"] = pending[name]
            row["sendsInFlight"] = sends[name]
            row["permitsWaiting"] = permits[name]
            used = self.broker.usage.agents.get(name)
            row["usage"] = used.to_json() if used is not None else None
            if self.cluster is not None:  # a node's agent keeps its conversations in JetStream
                stored = self.cluster.instances_of(name)
                if stored:
                    row["instances"] = sorted({*row["instances"], *stored})
            if self.cluster is not None and row.get("node") is None:
                row["node"] = self.cluster.node_of(name)
            rows.append(convert(row, AgentRow))
        return rows

    async def restart(self, agent: str, *, fresh: bool = False) -> Restarted:
        """Stop ``agent`` gracefully and start it again (``fresh``: its conversations deleted
        in between)."""
        if fresh:
            handle, deleted = await self.restart_fresh(agent)
            return Restarted(agent=agent, pid=handle.pid, deleted_instances=deleted)
        handle = await self.supervisor.restart_agent(agent, self.grace)
        return Restarted(agent=agent, pid=handle.pid)

    async def restart_fresh(self, agent: str) -> tuple[AgentHandle, list[str]]:
        """Stop ``agent`` gracefully, delete every conversation of it, start it again;
        returns its handle and the instance keys deleted. An agent on a cluster node keeps
        its conversations there: refused (:class:`OperationRefused`)."""
        node = self.cluster.node_of(agent) if self.cluster is not None else None
        if node:
            raise OperationRefused(
                f"agent {agent!r} runs on node {node!r}, which keeps "
                "its conversations: restart it without --fresh, or clear them there"
            )
        await self.supervisor.stop_agent(agent, self.grace, "restart")
        deleted = []
        for row in list_instances(self.state_dir, agent):
            key = row.get("instanceKey")
            if isinstance(key, str):  # not one in a format newer than this runtime reads
                shutil.rmtree(row["directory"], ignore_errors=True)
                deleted.append(key)
        self.log.info(
            "agent conversations deleted for a fresh start", agent=agent, count=len(deleted)
        )
        return await self.supervisor.restart_agent(agent, self.grace), deleted

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self, text: str, *, agent: str | None = None, **options: Unpack[TurnOptions]
    ) -> DelegateAnswer:
        """Send ``text`` to ``agent`` (default: the entry agent) and wait for the answer
        (see :meth:`Router.request` for streaming)."""
        return await self.router.request(agent or self.entry_agent, text, **options)

    def pending(self) -> list[PendingRow]:
        """The requests waiting for an answer (rows of ``GET /v1/requests``)."""
        return [convert(pending.to_json(), PendingRow) for pending in self.router.pending.values()]

    def sends_in_flight(self) -> int:
        """Agents' sends delivered but not yet done."""
        return len(self.router.sends)

    def cancel(
        self, request_or_trace_id: str, reason: str = "cancelled by an operator"
    ) -> list[str]:
        """Cancel a running request by request id or trace id (see :meth:`Router.cancel`);
        each trace cancelled is recorded as a ``request.cancelled`` event. Returns the traces."""
        traces = self.router.cancel(request_or_trace_id, reason)
        for trace_id in traces:
            cancelled = RequestCancelledEvent(
                agent_name=ORCHESTRATOR, trace_id=trace_id, reason=reason
            )
            self.events.emit(cancelled)
        return traces

    def start_soon(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background for an operator or an agent; shutdown cancels it
        before it stops the agents."""
        self.helpers.start_soon(coro, name)

    # -- conversations and usage -------------------------------------------------------------

    def instances(self, agent: str | None = None) -> list[InstanceRow]:
        """The conversation instances on disk (of ``agent``, or of every agent)."""
        return convert(list_instances(self.state_dir, agent), list[InstanceRow])

    async def delete_instance(self, agent: str, key: str) -> DeleteInstanceResult:
        """Delete one conversation; never reports success while its history could come back.

        A running agent deletes it itself, on its own loop, and refuses while a Turn of the
        instance is queued or running; otherwise the files are removed here.
        """
        handle = self.supervisor.handle(agent)
        if handle is None:
            return DeleteInstanceResult(error=f"unknown agent {agent!r}")
        node = self.cluster.node_of(agent) if self.cluster is not None else None
        if handle.worker is None and node:
            return DeleteInstanceResult(
                error=f"agent {agent!r} runs on node {node!r}, which keeps its conversations;"
                " send it something to start it, then delete again"
            )
        if handle.worker is None:
            deleted = delete_instance_dir(self.state_dir, agent, key)
            return DeleteInstanceResult(ok=True, deleted=deleted)
        try:
            answer = await self.router.ask(agent, DeleteInstance(key))
        except IpcError as exc:
            return DeleteInstanceResult(error=f"{exc.message}; nothing was deleted, retry")
        assert isinstance(answer, DeleteInstanceResult)
        return answer

    async def restart_instance(self, agent: str, key: str) -> RestartInstanceResult:
        """Restart one conversation of ``agent`` in its running process (see
        :class:`~ipc.questions.RestartInstance`); the agent's other instances are untouched.
        An agent that is not running holds nothing of it: nothing to do."""
        handle = self.supervisor.handle(agent)
        if handle is None:
            return RestartInstanceResult(error=f"unknown agent {agent!r}")
        if handle.worker is None:
            return RestartInstanceResult(ok=True)
        try:
            answer = await self.router.ask(agent, RestartInstance(key))
        except IpcError as exc:
            return RestartInstanceResult(error=exc.message)
        assert isinstance(answer, RestartInstanceResult)
        return answer

    def usage_report(self, *, traces: int = 50) -> UsageReport:
        """What model calls used and what budgets are left: per agent (since the daemon
        started, with its budgets), per conversation instance (lasting, from its metadata), per
        trace (the latest ``traces``), and each rate-limit pool as it stands."""
        budgets: dict[str, dict[str, Mapping[str, float]]] = {}
        price_sources: dict[str, PriceSource | None] = {}
        for name in sorted(self.supervisor.names()):
            plan = agent_plan(self.supervisor, name)
            if plan is not None:
                budgets[name] = {k: c.limits() for k, c in plan.budgets.scopes().items()}
                price = model_price(plan.model, plan.model.base_url)
                price_sources[name] = price.source if price is not None else None
        report = usage_report(
            self.broker.usage,
            budgets,
            list_instances(self.state_dir),
            traces=traces,
            pools=self.broker.snapshot(),
            price_sources=price_sources,
        )
        return convert(report, UsageReport)

    def trace_usage(self, trace_id: str) -> TraceUsage | None:
        """One trace's usage, ``None`` when none was recorded for it."""
        entry = self.broker.usage.traces.get(trace_id)
        return convert(entry.to_json(), TraceUsage) if entry is not None else None

    def model_usage(self) -> Mapping[str, Usage]:
        """Model calls' usage per agent since the daemon started."""
        return self.broker.usage.agents

    def pools(self) -> list[PoolRow]:
        """Each rate-limit pool as it stands."""
        return convert(self.broker.snapshot(), list[PoolRow])

    # -- approvals ---------------------------------------------------------------------------

    def approvals(self, *, agent: str | None, include_decided: bool) -> list[ApprovalRow]:
        """Tool calls parked for approval (pending ones, or every one)."""
        return list_approvals(self.state_dir, agent=agent, include_decided=include_decided)

    def approval(self, approval_id: str) -> ApprovalRow | None:
        """One approval's record, ``None`` for an unknown id."""
        return find_approval(self.state_dir, approval_id)

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        """Carry out an operator's decision on a parked tool call (see
        :meth:`ApprovalDesk.decide`)."""
        return await self.desk.decide(decision, wait=wait)

    def processes(self) -> SwarmProcesses:
        """The agent and connector processes running on this host right now."""
        return self.desk.processes()

    def record(self, event: RuntimeEvent, agent: str) -> None:
        """Record a runtime event about ``agent``, stamped now (the event log, the live
        stream, the metrics)."""
        self.events.record(event, agent)

    # -- Connections and live events ---------------------------------------------------------

    def connection_names(self) -> Collection[str]:
        """The swarm's Connections."""
        return self.connections.supervisor.names()

    def connection_states(self) -> list[ConnectionState]:
        """Each Connection's readiness and health."""
        return [
            ConnectionState(handle.name, handle.ready_now, self.connections.health_of(handle.name))
            for handle in self.connections.supervisor.handles()
        ]

    def subscribe(self) -> AbstractAsyncContextManager[Subscription]:
        """A queue of the runtime events published during the ``async with``."""
        return self.live.subscribe()

    def watching(self, listener: EventListener) -> AbstractContextManager[None]:
        """Call ``listener`` with each runtime event published during the ``with``."""
        return self.live.watching(listener)
