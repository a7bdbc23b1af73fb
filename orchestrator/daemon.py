"""The Orchestrator: load the swarm, supervise its agents, route between them, stop cleanly."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import structlog

from bundle import Bundle
from bundle.plan import AgentPlan, ConnectionPlan
from goondan import reserve
from goondan.state_files.conversation import interrupted_turn
from goondan.time import utc_timestamp
from ipc import EventMessage, IpcError
from ipc.delegation import DelegateAnswer
from ipc.events import RestartRequest, RuntimeEventReport, TextDelta
from ipc.logs import log_writer
from ipc.protocol import ORCHESTRATOR, EventKind
from ipc.questions import (
    ConfigCheck,
    ConfigCheckResult,
)
from ipc.runtime_events import (
    DeliveryLostEvent,
    ProcessReadyEvent,
    ProcessRestartRequestedEvent,
    ProcessResumePendingEvent,
    TextDeltaEvent,
)
from orchestrator.assembly import (
    SwarmOptions,
    SwarmParts,
    agent_plans,
    assemble,
    connection_plans,
)
from orchestrator.connections import ingress_tables
from orchestrator.deciding import ApprovalDesk
from orchestrator.dispatch import Dispatcher
from orchestrator.environment import withhold
from orchestrator.operations.service import SwarmService
from orchestrator.remote_agents import RemoteTarget, remote_targets
from orchestrator.requests import RequestDesk, RequestStore, SharedRequests
from orchestrator.requests.store import retention_from_env
from orchestrator.router import InFlightSend
from orchestrator.status import ExitInfo
from orchestrator.systemd import notify
from orchestrator.watch import check_configuration, reload_configuration

if TYPE_CHECKING:
    from orchestrator.http.app import ApiServer
    from orchestrator.http.metrics import SwarmMetrics
    from orchestrator.operations.protocol import RequestOptions


class Orchestrator:
    """One swarm, running."""

    def __init__(self, parts: SwarmParts) -> None:
        """Run the swarm of ``parts`` (see :meth:`from_bundle`): its collaborators are taken
        as they are, and linked to this Orchestrator where they report to it."""
        self.bundle_path = parts.bundle_path
        self.bundle = parts.bundle
        self.swarm_choice = parts.swarm_choice
        self.state_dir = parts.state_dir
        self.swarm = self.bundle.swarm(self.swarm_choice)
        self.entry_agent: str = self.swarm.spec.entry_agent.name
        self.grace: float = float(self.swarm.spec.policy.shutdown.grace_period_seconds)
        self.events, self.output, self.live = parts.events, parts.output, parts.live
        self._own_lines = parts.own_lines
        self.tasks = parts.tasks
        """Owns the tasks of supervision and routing: cancelled and awaited last at shutdown."""
        self.helpers = parts.helpers
        """Owns the work started on an operator's or agent's behalf (config watch, restarts,
        unwaited sends): cancelled first at shutdown, so none starts anything new meanwhile."""
        self.log = structlog.get_logger("goondan.orchestrator").bind(swarm=self.swarm.name)
        self._own_transport = parts.own_transport
        self.cluster = parts.cluster
        """With ``--cluster``: the transport that starts placed agents on other hosts."""
        self.supervisor, self.router = parts.supervisor, parts.router
        self.connections, self.broker = parts.connections, parts.broker
        self.telemetry = parts.telemetry
        """With an OTLP endpoint: every Turn, Step and tool call exported as a span."""
        self.api_listen = parts.api_listen
        """``HOST:PORT`` of a TCP listener for the HTTP API, besides its Unix socket."""
        self.api_token = parts.api_token
        self.api: ApiServer | None = None
        self.metrics: SwarmMetrics | None = None
        self.config_lock = asyncio.Lock()
        """Held while an edited configuration is checked and adopted (``--watch``,
        ``self-restart``): one at a time."""
        self._stopped = asyncio.Event()
        self._signals = 0
        self.supervisor.on_exit = self._on_exit
        self.router.on_delivery_lost = self._on_delivery_lost
        self.router.on_text_delta = self._publish_text_delta
        self.connections.on_finished = self._connection_finished
        if self.cluster is not None:
            self.cluster.on_leadership_lost = self.request_stop
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
        self.desk = ApprovalDesk(
            self.state_dir,
            self.supervisor,
            self.connections.supervisor,
            self.router,
            self.live,
            float(self.swarm.spec.policy.request_timeout_seconds),
            self.log,
        )
        """Operators' decisions on parked tool calls."""
        service = SwarmService
        if self.cluster is not None:  # a leader journals requests for the next one
            from orchestrator.cluster.journaled import JournaledService

            service = JournaledService
        self.operations = service(
            name=self.swarm.name,
            entry_agent=self.entry_agent,
            grace=self.grace,
            state_dir=self.state_dir,
            supervisor=self.supervisor,
            router=self.router,
            broker=self.broker,
            connections=self.connections,
            events=self.events,
            live=self.live,
            desk=self.desk,
            helpers=self.helpers,
            cluster=self.cluster,
            log=self.log,
        )
        """What the faces may ask of the swarm (the HTTP API, its metrics)."""
        store = RequestStore(self.state_dir / "requests", retention=retention_from_env())
        shared = self.operations if isinstance(self.operations, SharedRequests) else None
        self.requests = RequestDesk(self.operations, store, shared)
        """The accepted external requests, recorded in ``<state>/requests/`` (read once the
        API owns the state directory; those still running are routed again on start)."""

    @classmethod
    def from_bundle(cls, bundle_path: Path, **options: Unpack[SwarmOptions]) -> Orchestrator:
        """Load the bundle at ``bundle_path`` and get its swarm (``swarm``, or the only or
        default one) ready to :meth:`start`: its state under ``state_dir`` (default: beside
        the bundle), its agents started through ``transport`` (default: processes here, or
        on the cluster's nodes with ``cluster``), its HTTP API on ``api.sock`` and on
        ``api_listen`` with ``api_token``, its spans exported with ``otlp``. Raises
        ``BundleError`` for an invalid bundle."""
        return cls(assemble(bundle_path, **options))

    def _record_runtime_event(
        self, sender: str, message: EventMessage, body: RuntimeEventReport
    ) -> None:
        self.events.append(body.event)

    def _publish_text_delta(self, sender: str, delta: TextDelta) -> None:
        """Show a streamed Turn's text on the live event stream (never in the event log: it
        is the answer again, piece by piece)."""
        if len(self.live):
            self.live.publish(
                TextDeltaEvent(
                    timestamp=utc_timestamp(),
                    agent_name=sender,
                    instance_key=delta.instance_key,
                    trace_id=delta.trace_id,
                    turn_id=delta.turn_id,
                    step_id=delta.step_id,
                    text=delta.text,
                )
            )

    def _restart_requested(self, sender: str, message: EventMessage, body: RestartRequest) -> None:
        """A tool asked for a restart after its Turn (``self-restart``): the configuration on
        disk is read again and adopted as ``--watch`` adopts an edit, and the asking agent
        restarts even if its own plan did not change. An invalid one changes nothing."""
        self.log.info("agent asked for a restart", agent=sender, reason=body.reason)
        self.events.lifecycle(ProcessRestartRequestedEvent(reason=body.reason), sender)
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
        lost = DeliveryLostEvent(
            agent_name=send.target,
            instance_key=send.handoff.instance_key,
            trace_id=send.handoff.trace_id or None,
            event_id=send.event_id,
            sender=send.sender,
            sender_instance_key=send.handoff.caller_instance_key,
            started=send.started,
            attempts=send.attempts,
            error=error.to_dict(),
        )
        self.events.emit(lost)

    def _on_exit(self, name: str, info: ExitInfo) -> None:
        self.router.on_agent_exit(name)
        self.broker.agent_exited(name)

    async def start(self) -> bool:
        """Open the API socket, start supervising and the entry agent (the others start
        on first use). Raises ``DaemonAlreadyRunning`` if another daemon owns the state.
        With ``--cluster``, first lead the cluster (waiting as standby while another does).

        ``False`` when a stop was asked for before this process led its cluster: nothing was
        started, and there is nothing to serve (:meth:`shutdown` still ends it)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.cluster is not None:
            from orchestrator.cluster.stopping import unless_stopped

            # A standby waits here, serving no API until it leads: a client naming several
            # leaders finds the one that answers. A stop ends the wait (SIGTERM on a standby).
            if not await unless_stopped(self.cluster.open(), self._stopped):
                self.log.info("standby stopped before leading")
                return False
            from orchestrator.cluster.journaled import open_journal

            timeout_ms = int(self.swarm.spec.policy.request_timeout_seconds * 1000)
            await open_journal(self.operations, self.cluster, timeout_ms)
        await self._start_api()
        # Only now, the API socket ours: another daemon's records are never touched.
        unanswered = await self.requests.open()
        if self.telemetry is not None:  # after the API: a daemon refused starts no exporter
            self.telemetry.start()
        self._report_unfolded()
        self.desk.resume(self.start_soon)
        gc.freeze()  # keep the loaded bundle out of the collector's way
        self.tasks.start_soon(self.supervisor.run(), "reconcile")
        self.tasks.start_soon(reserve.keep(self.state_dir, log=self.log), "state-reserve")
        self.log.info("orchestrator started", pid=os.getpid(), state_dir=str(self.state_dir))
        # Marks in the event log where this daemon's life (and its counts) begins, and which
        # swarm it runs: what the studio shows after the fact.
        self.events.lifecycle(
            ProcessReadyEvent(pid=os.getpid(), swarm=self.swarm.name), ORCHESTRATOR
        )
        await self.supervisor.ensure_running(self.entry_agent)
        self.connections.start()
        self.requests.resume(unanswered)
        if self.cluster is not None:  # what a dead leader accepted, finished here
            from orchestrator.cluster.journaled import finish_unanswered

            self.start_soon(finish_unanswered(self.operations), "finish-unanswered")
        notify("READY=1", f"STATUS=serving swarm {self.swarm.name}")
        return True

    def _connection_finished(self, name: str) -> None:
        self.log.info("a connection's source is exhausted; stopping the swarm", connection=name)
        self.request_stop()

    # -- operations (orchestrator.operations.service.SwarmService) ---------------------------

    async def request(self, text: str, **options: Unpack[RequestOptions]) -> DelegateAnswer:
        """Send ``text`` to ``options["agent"]`` (default: the entry agent) and wait for the
        answer: the operations' :meth:`~SwarmService.request`, for callers in this process
        (``run --input``, the terminal)."""
        return await self.operations.request(text, **options)

    async def _start_api(self) -> None:
        """Serve the HTTP API on ``api.sock`` (and TCP when asked). Raises
        ``DaemonAlreadyRunning`` if another daemon serves the state directory."""
        from orchestrator.http.app import ApiServer
        from orchestrator.http.metrics import SwarmMetrics

        self.metrics = SwarmMetrics(self.operations, telemetry=self.telemetry)
        self.events.listeners.append(self.metrics.observe)
        policy = self.swarm.spec.policy.api
        self.api = ApiServer(
            self.operations,
            self.state_dir,
            listen=self.api_listen,
            token=self.api_token,
            allowed_hosts=policy.allowed_hosts,
            cors_origins=policy.cors_origins,
            metrics=self.metrics,
            tasks=self.tasks,
            desk=self.requests,
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
                self.events.lifecycle(ProcessResumePendingEvent(resumed_instance=instance), agent)

    def build_plans(self, bundle: Bundle) -> dict[str, AgentPlan]:
        """The plan of every agent of the swarm (their common parts held once)."""
        return agent_plans(bundle, self.swarm_choice, self.state_dir)

    def build_connection_plans(self, bundle: Bundle) -> list[ConnectionPlan]:
        """The plan of every Connection bound to the swarm."""
        return connection_plans(bundle, self.swarm_choice, self.state_dir)

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
        after = bundle.placement(self.swarm_choice)
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

    def build_remote_agents(self, bundle: Bundle) -> dict[str, RemoteTarget]:
        """The RemoteAgents of the swarm under ``bundle``, their tokens resolved (raises
        ``SecretUnavailable`` for one that is not set)."""
        return remote_targets(bundle, bundle.swarm(self.swarm_choice))

    def apply_remote_agents(self, targets: dict[str, RemoteTarget]) -> None:
        """Adopt the RemoteAgents of an edited bundle (calls under way end as they began)."""
        for target in targets.values():
            if target.token is not None:
                withhold(target.token.reveal())
        self.router.remote.targets = dict(targets)

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
        self.operations.stopping = True
        notify("STOPPING=1", "STATUS=draining agents")
        await self.connections.shutdown(self.grace)  # no new events while the agents drain
        await self.helpers.aclose()
        await self.supervisor.shutdown(self.grace)
        if self._own_transport is not None:
            await self._own_transport.close()  # its spare processes end
        await self.router.close()
        await self.requests.close()  # those unanswered stay running on disk for the next start
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
