"""The Orchestrator: load the swarm, supervise its agents, route between them, stop cleanly."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
from collections import Counter
from collections.abc import Callable, Collection, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from bundle import Bundle, load_bundle
from bundle.plan import AgentPlan, ConnectionPlan
from bundle.prices import PriceSource, model_price
from goondan.state_files.conversation import interrupted_turn
from goondan.time import utc_timestamp
from goondan.usage import Usage
from ipc import (
    DEFAULT_INSTANCE_KEY,
    EXTERNAL_CALLER,
    ORCHESTRATOR,
    AgentUnavailable,
    EventMessage,
    IpcError,
)
from ipc import protocol as wire
from ipc.delegation import DelegateAnswer
from ipc.events import RestartRequest, RuntimeEventReport, TextDelta
from ipc.logs import log_writer
from ipc.protocol import EventKind
from ipc.questions import (
    ApprovalDecision,
    ApprovalDecisionResult,
    ConfigCheck,
    ConfigCheckResult,
    DeleteInstance,
    DeleteInstanceResult,
    RestartInstance,
    RestartInstanceResult,
)
from orchestrator.approvals import DecisionOutcome, find_approval, list_approvals, outcome_of
from orchestrator.approvals import unavailable as approval_unavailable
from orchestrator.callers import ApiToken
from orchestrator.clock import Clock, LoopClock
from orchestrator.connections import Connections, ingress_tables
from orchestrator.dispatch import Dispatcher
from orchestrator.environment import withhold
from orchestrator.eventlog import EventLog
from orchestrator.http.events_hub import END_OF_STREAM, EventHub, Subscription
from orchestrator.limits import ModelBroker
from orchestrator.limits.usage import UsageBook, usage_report
from orchestrator.operations import (
    ConnectionState,
    DeltaSink,
    EventListener,
    OperationRefused,
    SwarmProcesses,
)
from orchestrator.plans import SharedParts
from orchestrator.process_logs import ProcessOutput
from orchestrator.router import InFlightSend, Router
from orchestrator.spawns import SpawnedInstance
from orchestrator.state_dir import (
    default_state_dir,
    delete_instance_dir,
    list_instances,
    spawn_records,
)
from orchestrator.status import ExitInfo
from orchestrator.supervisor import AgentHandle, Supervisor
from orchestrator.systemd import notify
from orchestrator.tasks import TaskOwner
from orchestrator.telemetry import OtlpSettings, TelemetryUnavailable, TraceExport
from orchestrator.transport import MultiprocessingTransport, Transport
from orchestrator.watch import check_configuration, reload_configuration

if TYPE_CHECKING:
    from orchestrator.cluster.leader import ClusterTransport
    from orchestrator.cluster.settings import ClusterSettings
    from orchestrator.http.app import ApiServer
    from orchestrator.http.metrics import SwarmMetrics


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state directory private to the daemon's user (0700), tightening an older one.

    Conversations, tool workspaces and runtime events live under it; with the directory itself
    closed to others, nothing inside is readable by them whatever its own mode.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if state_dir.stat().st_uid == os.geteuid():
        state_dir.chmod(0o700)


class Orchestrator:
    """One swarm, running."""

    def __init__(
        self,
        bundle_path: Path,
        *,
        state_dir: Path | None = None,
        swarm: str | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        api_listen: str | None = None,
        api_token: str | ApiToken | None = None,
        cluster: ClusterSettings | None = None,
        otlp: OtlpSettings | None = None,
    ) -> None:
        self.bundle_path = bundle_path
        self.state_dir = (state_dir or default_state_dir(bundle_path)).resolve()
        self.bundle: Bundle = load_bundle(bundle_path, check_handlers=False)
        self.swarm_name = swarm
        self.swarm = self.bundle.swarm(swarm)
        self.entry_agent: str = self.swarm.spec.entry_agent.name
        plans = self.build_plans(self.bundle)
        self.grace: float = float(self.swarm.spec.policy.shutdown.grace_period_seconds)
        timeout_ms = int(self.swarm.spec.policy.request_timeout_seconds * 1000)
        prepare_state_dir(self.state_dir)
        self.events = EventLog(self.state_dir)
        self.output = ProcessOutput(self.state_dir)
        """``logs/<process>.<stream>.log``: each agent's and connector's output, and ours."""
        self._own_lines = log_writer().mirror = self.output.own_lines()
        self.live = EventHub()
        """Runtime events as they happen, for the HTTP API's event stream."""
        self.events.listeners.append(self.live.publish)
        self.tasks = TaskOwner()
        """Owns the tasks of supervision and routing: cancelled and awaited last at shutdown."""
        self.helpers = TaskOwner()
        """Owns the work started on an operator's or agent's behalf (config watch, restarts,
        unwaited sends): cancelled first at shutdown, so none starts anything new meanwhile."""
        clock = clock or LoopClock()
        self.log = structlog.get_logger("goondan.orchestrator").bind(swarm=self.swarm.name)
        self._own_transport: MultiprocessingTransport | ClusterTransport | None = None
        """The transport this Orchestrator made (and closes), when it was given none."""
        self.cluster: ClusterTransport | None = None
        """With ``--cluster``: the transport that starts placed agents on other hosts."""
        placement = self.bundle.placement(swarm)
        if transport is None and cluster is not None:
            from orchestrator.cluster.leader import ClusterTransport

            transport = self._own_transport = self.cluster = ClusterTransport(
                cluster.named_for(self.swarm.name),
                placement=placement,
                fingerprint=self.bundle.fingerprint(),
                on_node_joined=lambda node: self.supervisor.wake(),
                on_leadership_lost=self.request_stop,
                on_adopt=lambda name, worker: self.supervisor.adopt(name, worker),
            )
        elif transport is None:
            if placement:
                self.log.warning(
                    "Swarm.spec.placement is ignored without --cluster; every agent runs here",
                    placed=sorted(placement),
                )
            transport = self._own_transport = MultiprocessingTransport(output=self.output)
        self.supervisor = Supervisor(
            plans,
            transport,
            on_exit=self._on_exit,
            on_lifecycle=self.events.lifecycle,
            clock=clock,
            tasks=self.tasks,
        )
        self.telemetry: TraceExport | None = None
        """With an OTLP endpoint: every Turn, Step and tool call exported as a span."""
        if otlp is not None:
            self.telemetry = self._open_telemetry(otlp)
        self.router = Router(
            self.supervisor,
            default_timeout_ms=timeout_ms,
            on_delivery_lost=self._on_delivery_lost,
            clock=clock,
            tasks=self.tasks,
        )
        self._recall_spawned()
        connection_plans = self.build_connection_plans(self.bundle)
        self.connections = Connections(
            connection_plans,
            ingress_tables(
                self.bundle, connection_plans, self.entry_agent, sorted(self.supervisor.names())
            ),
            transport,
            router=self.router,
            events=self.events,
            on_finished=self._connection_finished,
            clock=clock,
            tasks=self.tasks,
        )
        self.broker = ModelBroker(
            self.bundle.model_pools(),
            usage=UsageBook(self._trace_budget_of),
            reply=self.router.answer,
            record=self.events.record,
            clock=clock,
            reports=self._reports_usage,
        )
        """Shared rate limits and trace budgets: a permit before each model call."""
        self.events.listeners.append(self.broker.observe)
        self.dispatch = Dispatcher(
            self.router,
            self.supervisor.event_handlers,
            self.broker.event_handlers,
            {
                EventKind.RUNTIME_EVENT: self._record_runtime_event,
                EventKind.RESTART_REQUEST: self._restart_requested,
                EventKind.CONFIG_CHECK: self._check_configuration,
            },
        )
        self.supervisor.on_message = self.dispatch
        self.router.on_text_delta = self._publish_text_delta
        api_policy = self.swarm.spec.policy.api
        self.api_listen = api_listen or api_policy.listen
        """``HOST:PORT`` of a TCP listener for the HTTP API, besides its Unix socket."""
        if api_token is None and api_policy.token_from is not None:
            # Resolved now, so a token variable that is not set stops the start, loudly.
            api_token = ApiToken.from_policy(api_policy.token_from)
        self.api_token = ApiToken.named(api_token)
        withhold(self.api_token.secret if self.api_token else None)  # no agent or connector gets it
        self.api: ApiServer | None = None
        self.metrics: SwarmMetrics | None = None
        self.config_lock = asyncio.Lock()
        """Held while an edited configuration is checked and adopted (``--watch``,
        ``self-restart``): one at a time."""
        self._stopped = asyncio.Event()
        self._signals = 0
        self.stopping = False
        """Shutting down: API requests that would start work are refused."""

    def _open_telemetry(self, otlp: OtlpSettings) -> TraceExport | None:
        """Span export, fed by the event log. Without the ``otel`` extra, ``--otlp-endpoint``
        stops the start (``TelemetryUnavailable``) while an endpoint from the environment,
        perhaps set for other programs, only costs a warning."""
        try:
            telemetry = TraceExport.open(otlp, swarm=self.swarm.name, model_of=self._model_of)
        except TelemetryUnavailable as exc:
            if otlp.from_flag:
                raise
            self.log.warning("spans are not exported", reason=str(exc))
            return None
        self.events.listeners.append(telemetry.observe)
        return telemetry

    def _recall_spawned(self) -> None:
        """``agents__list`` rows from the instances on disk, so a restarted daemon still lists
        what was spawned before (of agents the swarm still has)."""
        for row in spawn_records(self.state_dir):
            if row["target"] not in self.supervisor.names():
                continue
            record = SpawnedInstance(
                target=row["target"],
                instance_key=row["instanceKey"],
                owner_agent=row["ownerAgent"],
                owner_instance_key=row["ownerInstanceKey"],
                created_at=row["createdAt"],
                cwd=row["cwd"],
            )
            key = (record.owner_agent, record.owner_instance_key, record.target)
            self.router.spawned[(*key, record.instance_key)] = record

    def _agent_plan(self, agent: str) -> AgentPlan | None:
        """``agent``'s plan (``None`` for a name that is not an agent of the swarm)."""
        handle = self.supervisor.handle(agent)
        plan = handle.plan if handle is not None else None
        return plan if isinstance(plan, AgentPlan) else None

    def _reports_usage(self, agent: str) -> bool:
        """Whether ``agent`` reports each model call's usage itself (it asks permits)."""
        plan = self._agent_plan(agent)
        return plan is not None and plan.ask_permits

    def _trace_budget_of(self, agent: str) -> dict[str, float]:
        """The trace budget of requests entering the swarm at ``agent`` (figure → limit)."""
        plan = self._agent_plan(agent)
        trace = plan.budgets.trace if plan is not None else None
        return trace.limits() if trace is not None else {}

    def _model_of(self, agent: str) -> tuple[str, str] | None:
        """``(provider, model)`` of ``agent``'s plan, for the spans of its Turns and Steps."""
        plan = self._agent_plan(agent)
        return (plan.model.provider, plan.model.model) if plan is not None else None

    def _record_runtime_event(
        self, sender: str, message: EventMessage, body: RuntimeEventReport
    ) -> None:
        self.events.append(body.event)

    def _publish_text_delta(self, sender: str, delta: TextDelta) -> None:
        """Show a streamed Turn's text on the live event stream (never in the event log: it
        is the answer again, piece by piece)."""
        if len(self.live):
            self.live.publish(
                {
                    "type": "text.delta",
                    "timestamp": utc_timestamp(),
                    "agentName": sender,
                    "instanceKey": delta.instance_key,
                    "traceId": delta.trace_id,
                    "turnId": delta.turn_id,
                    "stepId": delta.step_id,
                    "text": delta.text,
                }
            )

    def _restart_requested(self, sender: str, message: EventMessage, body: RestartRequest) -> None:
        """A tool asked for a restart after its Turn (``self-restart``): the configuration on
        disk is read again and adopted as ``--watch`` adopts an edit, and the asking agent
        restarts even if its own plan did not change. An invalid one changes nothing."""
        self.log.info("agent asked for a restart", agent=sender, reason=body.reason)
        self.events.lifecycle("restart_requested", sender, reason=body.reason)
        self.start_soon(reload_configuration(self, restart=sender), f"restart:{sender}")

    def _check_configuration(self, sender: str, message: EventMessage, body: ConfigCheck) -> None:
        """``self-restart`` asks, before it promises a restart, whether the configuration on
        disk would load."""

        async def check() -> None:
            async with self.config_lock:
                checked = await check_configuration(self)
            errors = checked if isinstance(checked, list) else []
            self.router.answer(
                sender, message.correlation_id or "", ConfigCheckResult(tuple(errors))
            )

        self.start_soon(check(), f"config-check:{sender}")

    def _on_delivery_lost(self, send: InFlightSend, error: IpcError) -> None:
        self.events.record(
            "delivery.lost",
            send.target,
            instanceKey=send.handoff.instance_key,
            traceId=send.handoff.trace_id or None,
            eventId=send.event_id,
            sender=send.sender,
            senderInstanceKey=send.handoff.caller_instance_key,
            started=send.started,
            attempts=send.attempts,
            error=error.to_dict(),
        )

    def _on_exit(self, name: str, info: ExitInfo) -> None:
        self.router.on_agent_exit(name)
        self.broker.agent_exited(name)

    async def start(self) -> None:
        """Open the API socket, start supervising and the entry agent (the others start
        on first use). Raises ``DaemonAlreadyRunning`` if another daemon owns the state.
        With ``--cluster``, first lead the cluster (waiting as standby while another does)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.cluster is not None:
            # A standby waits here, serving no API until it leads: a client naming several
            # leaders finds the one that answers.
            await self.cluster.open()
        await self._start_api()
        if self.telemetry is not None:  # after the API: a daemon refused starts no exporter
            self.telemetry.start()
        self._report_unfolded()
        self._resume_approvals()
        gc.freeze()  # keep the loaded bundle out of the collector's way
        self.tasks.start_soon(self.supervisor.run(), "reconcile")
        self.log.info("orchestrator started", pid=os.getpid(), state_dir=str(self.state_dir))
        await self.supervisor.ensure_running(self.entry_agent)
        self.connections.start()
        notify("READY=1", f"STATUS=serving swarm {self.swarm.name}")

    def _connection_finished(self, name: str) -> None:
        self.log.info("a connection's source is exhausted; stopping the swarm", connection=name)
        self.request_stop()

    # -- operations (orchestrator.operations.SwarmOperations) --------------------------------

    @property
    def name(self) -> str:
        """The swarm's name."""
        return self.swarm.name

    def agent_names(self) -> Collection[str]:
        """The swarm's agents (a reload may change them)."""
        return self.supervisor.names()

    def agent(self, name: str) -> AgentHandle | None:
        """Agent ``name``'s process as the supervisor sees it (``None``: no such agent)."""
        return self.supervisor.handle(name)

    def connection_names(self) -> Collection[str]:
        """The swarm's Connections."""
        return self.connections.supervisor.names()

    def connection_states(self) -> list[ConnectionState]:
        """Each Connection's readiness and health."""
        return [
            ConnectionState(handle.name, handle.ready_now, self.connections.health_of(handle.name))
            for handle in self.connections.supervisor.handles()
        ]

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
        """Send ``text`` to ``agent`` (default: the entry agent) and wait for the answer
        (see :meth:`Router.request` for streaming)."""
        return await self.router.request(
            agent or self.entry_agent,
            text,
            instance_key=instance_key,
            timeout_ms=timeout_ms,
            trace_id=trace_id,
            on_delta=on_delta,
            relay=relay,
        )

    def pending(self) -> list[dict[str, Any]]:
        """The requests waiting for an answer (rows of ``GET /v1/requests``)."""
        return [pending.to_json() for pending in self.router.pending.values()]

    def sends_in_flight(self) -> int:
        """Agents' sends delivered but not yet done."""
        return len(self.router.sends)

    def instances(self, agent: str | None = None) -> list[dict[str, Any]]:
        """The conversation instances on disk (of ``agent``, or of every agent)."""
        return list_instances(self.state_dir, agent)

    def approvals(self, *, agent: str | None, include_decided: bool) -> list[dict[str, Any]]:
        """Tool calls parked for approval (pending ones, or every one)."""
        return list_approvals(self.state_dir, agent=agent, include_decided=include_decided)

    def approval(self, approval_id: str) -> dict[str, Any] | None:
        """One approval's record, ``None`` for an unknown id."""
        return find_approval(self.state_dir, approval_id)

    def record(self, kind: str, agent: str, **fields: Any) -> None:
        """Record a runtime event (the event log, the live stream, the metrics)."""
        self.events.record(kind, agent, **fields)

    def processes(self) -> SwarmProcesses:
        """The agent and connector processes running on this host right now."""
        pids: dict[int, str] = {}
        scopes: dict[str, str] = {}
        for kind, supervisor in (
            ("agent", self.supervisor),
            ("connection", self.connections.supervisor),
        ):
            for handle in supervisor.handles():
                label = f"{kind} {handle.name!r}"
                if handle.worker is not None and handle.worker.node is None and handle.pid:
                    pids[handle.pid] = label
                if handle.scope:
                    scopes[handle.scope] = label
        return SwarmProcesses(pids, scopes, os.getpid(), os.geteuid())

    def subscribe(self) -> AbstractAsyncContextManager[Subscription]:
        """A queue of the runtime events published during the ``async with``."""
        return self.live.subscribe()

    def watching(self, listener: EventListener) -> AbstractContextManager[None]:
        """Call ``listener`` with each runtime event published during the ``with``."""
        return self.live.watching(listener)

    def trace_usage(self, trace_id: str) -> dict[str, Any] | None:
        """One trace's usage, ``None`` when none was recorded for it."""
        entry = self.broker.usage.traces.get(trace_id)
        return entry.to_json() if entry is not None else None

    def model_usage(self) -> Mapping[str, Usage]:
        """Model calls' usage per agent since the daemon started."""
        return self.broker.usage.agents

    def pools(self) -> list[dict[str, Any]]:
        """Each rate-limit pool as it stands."""
        return self.broker.snapshot()

    def cancel(
        self, request_or_trace_id: str, reason: str = "cancelled by an operator"
    ) -> list[str]:
        """Cancel a running request by request id or trace id (see :meth:`Router.cancel`);
        each trace cancelled is recorded as a ``request.cancelled`` event. Returns the traces."""
        traces = self.router.cancel(request_or_trace_id, reason)
        for trace_id in traces:
            self.events.record("request.cancelled", ORCHESTRATOR, traceId=trace_id, reason=reason)
        return traces

    def send(self, text: str, *, agent: str, instance_key: str) -> None:
        """Deliver ``text`` to ``agent`` as a request nobody waits for: a failure is logged
        and kept as a ``delivery.lost`` event."""
        self.start_soon(self._send_unwaited(text, agent, instance_key), f"send:{agent}")

    async def _send_unwaited(self, text: str, agent: str, instance_key: str) -> None:
        answer = await self.request(text, agent=agent, instance_key=instance_key)
        if answer.ok:
            return
        error = answer.error or IpcError("the request failed")
        self.log.warning(
            "unwaited send failed",
            agent=agent,
            instance_key=instance_key,
            code=error.code,
            error=error.message,
        )
        self.events.record(
            "delivery.lost",
            agent,
            instanceKey=instance_key,
            sender=EXTERNAL_CALLER,
            error=error.to_dict(),
        )

    async def delete_instance(self, agent: str, key: str) -> dict[str, Any]:
        """Delete one conversation; never reports success while its history could come back.

        A running agent deletes it itself, on its own loop, and refuses while a Turn of the
        instance is queued or running; otherwise the files are removed here.
        """
        handle = self.supervisor.handle(agent)
        if handle is None:
            return {"ok": False, "error": f"unknown agent {agent!r}"}
        if handle.worker is None and self.cluster is not None and self.cluster.node_of(agent):
            node = self.cluster.node_of(agent)
            return {
                "ok": False,
                "error": f"agent {agent!r} runs on node {node!r}, which keeps its conversations;"
                " send it something to start it, then delete again",
            }
        if handle.worker is None:
            return {"ok": True, "deleted": delete_instance_dir(self.state_dir, agent, key)}
        try:
            answer = await self.router.ask(agent, DeleteInstance(key))
        except IpcError as exc:
            return {"ok": False, "error": f"{exc.message}; nothing was deleted, retry"}
        assert isinstance(answer, DeleteInstanceResult)
        return answer.to_wire()

    async def restart_instance(self, agent: str, key: str) -> dict[str, Any]:
        """Restart one conversation of ``agent`` in its running process (see
        :class:`~ipc.questions.RestartInstance`); the agent's other instances are untouched.
        An agent that is not running holds nothing of it: nothing to do."""
        handle = self.supervisor.handle(agent)
        if handle is None:
            return {"ok": False, "error": f"unknown agent {agent!r}"}
        if handle.worker is None:
            return {"ok": True, "loaded": False, "stoppedTurns": 0}
        try:
            answer = await self.router.ask(agent, RestartInstance(key))
        except IpcError as exc:
            return {"ok": False, "error": exc.message}
        assert isinstance(answer, RestartInstanceResult)
        return answer.to_wire()

    async def restart(self, agent: str, *, fresh: bool = False) -> dict[str, Any]:
        """Stop ``agent`` gracefully and start it again (``fresh``: its conversations deleted
        in between): ``{agent, pid[, deletedInstances]}``."""
        if fresh:
            handle, deleted = await self.restart_fresh(agent)
            return {"agent": agent, "pid": handle.pid, "deletedInstances": deleted}
        handle = await self.supervisor.restart_agent(agent, self.grace)
        return {"agent": agent, "pid": handle.pid}

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

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        """Carry out an operator's decision on a parked tool call, through the agent that owns
        it (started first if need be: it takes up its parked Turns when it boots).

        404 for an unknown id, 409 when it was decided already or expired, 400 for edited
        arguments that do not fit the tool, 503 when the agent cannot be reached. With
        ``wait``, a 200 also carries the Turn's answer (``turn``: ``{status, output, error?}``)
        once the Turn ends, or ``null`` if it does not end within the swarm's request timeout.
        """
        record = find_approval(self.state_dir, decision.approval_id)
        if record is None:
            return DecisionOutcome.refused(
                404, wire.APPROVAL_NOT_FOUND, f"no approval {decision.approval_id!r}"
            )
        if record.get("status") != "pending":
            return DecisionOutcome.refused(
                409,
                wire.APPROVAL_ALREADY_DECIDED,
                f"approval {decision.approval_id!r} is {record.get('status')} already",
            )
        agent = str(record.get("agentName"))
        log = self.log.bind(
            agent=agent,
            instance_key=record.get("instanceKey"),
            trace_id=record.get("traceId"),
            approval_id=decision.approval_id,
        )
        # Subscribed before the decision goes out, so the Turn's end cannot slip past.
        async with self.live.subscribe() as subscription:
            try:
                await self.supervisor.ensure_running(agent)
                answer = await self.router.ask(agent, decision)
            except TimeoutError:
                exc = AgentUnavailable(f"agent {agent!r} did not become ready")
                log.warning("approval decision not delivered", code=exc.code, error=exc.message)
                return approval_unavailable(exc)
            except IpcError as exc:
                log.warning("approval decision not delivered", code=exc.code, error=exc.message)
                return approval_unavailable(exc)
            assert isinstance(answer, ApprovalDecisionResult)
            outcome = outcome_of(answer)
            log.info("approval decision", decision=decision.decision, status=outcome.status)
            if wait and outcome.status == 200:
                outcome.body["turn"] = await self._turn_end(subscription.queue, record)
        return outcome

    async def _turn_end(
        self, queue: asyncio.Queue[dict[str, Any]], record: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The answer of the Turn parked on ``record`` (its ``turn.completed`` or
        ``turn.failed``), or ``None`` past the swarm's request timeout."""
        identity = {k: record.get(k) for k in ("agentName", "instanceKey", "traceId")}
        try:
            async with asyncio.timeout(self.swarm.spec.policy.request_timeout_seconds):
                while True:
                    event = await queue.get()
                    if event is END_OF_STREAM:
                        return None
                    if event.get("type") not in ("turn.completed", "turn.failed"):
                        continue
                    if all(event.get(k) == v for k, v in identity.items()):
                        break
        except TimeoutError:
            return None
        turn: dict[str, Any] = {
            "status": "ok" if event["type"] == "turn.completed" else "error",
            "output": event.get("output"),
            "turnId": event.get("turnId"),
        }
        if event.get("errorCode") is not None:
            turn["error"] = {"code": event["errorCode"], "message": event.get("errorMessage")}
        return turn

    def _resume_approvals(self) -> None:
        """Start the agents that have calls parked for approval: each takes up its parked
        Turns at boot, so their deadlines are kept even if nothing else starts them."""
        parked = {str(row.get("agentName")) for row in list_approvals(self.state_dir)}
        for agent in sorted(parked & set(self.supervisor.names())):
            self.log.info("agent has calls waiting for approval; starting it", agent=agent)
            self.start_soon(self._start_quietly(agent), f"approvals:{agent}")

    async def _start_quietly(self, agent: str) -> None:
        try:
            await self.supervisor.ensure_running(agent)
        except (
            IpcError,
            TimeoutError,
        ) as exc:  # it backs off; the reconcile loop and the next use retry
            self.log.warning("agent not started", agent=agent, error=str(exc))

    async def _start_api(self) -> None:
        """Serve the HTTP API on ``api.sock`` (and TCP when asked). Raises
        ``DaemonAlreadyRunning`` if another daemon serves the state directory."""
        from orchestrator.http.app import ApiServer
        from orchestrator.http.metrics import SwarmMetrics

        self.metrics = SwarmMetrics(self, telemetry=self.telemetry)
        self.events.listeners.append(self.metrics.observe)
        policy = self.swarm.spec.policy.api
        self.api = ApiServer(
            self,
            self.state_dir,
            listen=self.api_listen,
            token=self.api_token,
            allowed_hosts=policy.allowed_hosts,
            cors_origins=policy.cors_origins,
            metrics=self.metrics,
            tasks=self.tasks,
        )
        await self.api.start()

    def _report_unfolded(self) -> None:
        """After a crash: name the conversations whose last Turn never ended (its events not
        folded into the base; a non-empty ``events.jsonl`` alone is normal between Turns).

        They are not lost: each resumes from ``base + events`` when its agent next runs it.
        """
        for events in sorted(self.state_dir.glob("agents/*/instances/*/conversation/events.jsonl")):
            if interrupted_turn(events.parent):
                agent = events.parents[3].name
                instance = events.parents[1].name
                self.log.warning(
                    "resuming an interrupted conversation", agent=agent, instance=instance
                )
                self.events.lifecycle("resume_pending", agent, instance=instance)

    def build_plans(self, bundle: Bundle) -> dict[str, AgentPlan]:
        """The plan of every agent of the swarm (their common parts held once)."""
        swarm = bundle.swarm(self.swarm_name)
        parts = SharedParts()
        return {
            agent.name: parts.share(bundle.agent_plan(agent.name, self.state_dir, swarm.name))
            for agent in bundle.swarm_agents(swarm)
        }

    def build_connection_plans(self, bundle: Bundle) -> list[ConnectionPlan]:
        """The plan of every Connection bound to the swarm."""
        stdin = Path(f"/proc/{os.getpid()}/fd/0")
        return [
            # Connectors inherit the daemon's standard input, as any child process would.
            plan.model_copy(update={"stdin_path": str(stdin) if stdin.exists() else None})
            for plan in bundle.connection_plans(self.state_dir, self.swarm_name)
        ]

    async def apply_connections(self, bundle: Bundle) -> list[str]:
        """Adopt the Connections of ``bundle`` (see :meth:`Connections.apply`); raises
        ``UnknownIngressAgent`` (nothing applied) for a rule routing outside the swarm."""
        plans = self.build_connection_plans(bundle)
        ingress = ingress_tables(bundle, plans, self.entry_agent, sorted(self.supervisor.names()))
        return await self.connections.apply(plans, ingress, self.grace)

    async def adopt_cluster_bundle(self, bundle: Bundle, plans: dict[str, AgentPlan]) -> list[str]:
        """With ``--cluster``: take an edited bundle's fingerprint and placement (nodes must
        run the new bundle before they start agents again) and move each running agent whose
        node changed (one whose plan changed too is left to :meth:`apply_plans`, which
        restarts it anyway). Returns the agents restarted to move."""
        if self.cluster is None:
            return []
        before = self.cluster.placement
        after = bundle.placement(self.swarm_name)
        self.cluster.adopt(bundle.fingerprint(), after)
        moved = sorted(
            handle.name
            for handle in self.supervisor.handles()
            if before.get(handle.name) != after.get(handle.name)
            and handle.worker is not None
            and plans.get(handle.name) == handle.plan
        )
        for name in moved:
            rule = after.get(name)
            self.log.info(
                "agent moves to another node", agent=name, node=rule.describe() if rule else None
            )
            try:
                await self.supervisor.restart_agent(name, self.grace)
            except (IpcError, TimeoutError) as exc:  # its new node cannot start it yet
                self.log.error("agent did not start on its new node", agent=name, error=str(exc))
        return moved

    async def apply_plans(self, plans: dict[str, AgentPlan]) -> list[str]:
        """Adopt new plans: restart the running agents whose plan changed, add new agents
        (started on first use), stop removed ones. Returns the restarted agents' names."""
        _, restarted = await self.supervisor.replace_plans(plans, self.grace)
        return restarted

    def apply_limits(self, bundle: Bundle) -> None:
        """Adopt the rate-limit pools of an edited bundle (their permits and queues stay)."""
        self.broker.configure(bundle.model_pools())

    def status(self) -> dict[str, Any]:
        """The swarm, a row per agent (:meth:`agent_rows`) and per Connection, the cluster
        and the rate-limit pools when there are any."""
        body: dict[str, Any] = {
            "swarm": self.swarm.name,
            "agents": self.agent_rows(),
            "connections": self.connections.status(),
        }
        if self.cluster is not None:
            body["cluster"] = self.cluster.cluster_status()
        if self.broker.pools:
            body["pools"] = self.broker.snapshot()
        return body

    def agent_rows(self) -> list[dict[str, Any]]:
        """One row per agent: process state, instances on disk, requests waiting for its
        answer (``pendingDelegates``) and sends it has not finished (``sendsInFlight``).

        Kept to one directory read per agent and one pass over the pending requests and the
        waiting permit requests, so the table of a swarm of hundreds of agents is still there at
        once.
        """
        rows = self.supervisor.status()
        pending = Counter(p.target for p in self.router.pending.values())
        sends = Counter(s.target for s in self.router.sends.values())
        permits = self.broker.waiting_by_agent()
        agents = os.path.join(self.state_dir, "agents")
        for row in rows:
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
            if self.cluster is not None and row.get("node") is None:
                row["node"] = self.cluster.node_of(name)
        return rows

    def usage_report(self, *, traces: int = 50) -> dict[str, Any]:
        """What model calls used and what budgets are left: per agent (since the daemon
        started, with its budgets), per conversation instance (lasting, from its metadata), per
        trace (the latest ``traces``), and each rate-limit pool as it stands."""
        budgets: dict[str, dict[str, Any]] = {}
        price_sources: dict[str, PriceSource | None] = {}
        for name in sorted(self.supervisor.names()):
            plan = self._agent_plan(name)
            if plan is not None:
                budgets[name] = {k: c.limits() for k, c in plan.budgets.scopes().items()}
                price = model_price(plan.model, plan.model.base_url)
                price_sources[name] = price.source if price is not None else None
        return usage_report(
            self.broker.usage,
            budgets,
            list_instances(self.state_dir),
            traces=traces,
            pools=self.broker.snapshot(),
            price_sources=price_sources,
        )

    def start_soon(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background for an operator or an agent; shutdown cancels it
        before it stops the agents."""
        self.helpers.start_soon(coro, name)

    def install_signal_handlers(self, on_signal: Callable[[int], None] | None = None) -> None:
        """SIGINT/SIGTERM start a graceful stop; a second one forces it."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal or self.handle_signal, sig)

    def handle_signal(self, sig: int) -> None:
        """Queue a stop (or force it on the second signal)."""
        self._signals += 1
        if self._signals == 1:
            self.log.info("stopping", signal=signal.Signals(sig).name)
            self.request_stop()
        else:
            self.log.warning("second signal: killing every agent now")
            self.connections.kill_all()
            self.supervisor.kill_all()

    async def wait_stopped(self) -> None:
        """Until a signal asks the daemon to stop."""
        await self._stopped.wait()

    def request_stop(self) -> None:
        """Stop restarting anything, and ask :meth:`wait_stopped` to return (then
        :meth:`shutdown` drains)."""
        self.supervisor.stop_restarting()
        self.connections.stop_restarting()
        self._stopped.set()

    async def shutdown(self) -> None:
        """Let running Turns finish and answer (within the grace period), stop every agent,
        then fail whatever is still pending.

        The API stays open until the agents are gone: while they drain, ``status``
        shows it, ``send`` and ``restart`` are refused, and ``instances delete`` still goes
        through the agent (which refuses while a Turn of the instance runs). Closed first, it
        would let the CLI delete the files itself under a Turn that then writes them back, and
        let a second daemon start on the same state.
        """
        self.stopping = True
        notify("STOPPING=1", "STATUS=draining agents")
        await self.connections.shutdown(self.grace)  # no new events while the agents drain
        await self.helpers.aclose()
        await self.supervisor.shutdown(self.grace)
        if self._own_transport is not None:
            await self._own_transport.close()  # its spare processes end
        await self.router.close()
        self.broker.close()
        self.live.close()  # event streams end, so the HTTP server stops without waiting
        if self.api is not None:
            await self.api.close()
        await self.tasks.aclose()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if self.telemetry is not None:
            # Every agent is gone, so every span has ended: a last flush, bounded in time.
            await asyncio.to_thread(self.telemetry.close)
        self.events.close()
        self.log.info("orchestrator stopped")
        writer = log_writer()
        writer.drain()  # "stopped" reaches our own file too
        if writer.mirror == self._own_lines:
            writer.mirror = None
        self.output.close()
