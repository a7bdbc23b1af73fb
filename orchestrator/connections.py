"""The swarm's Connections: one supervised process each, their events routed in as sends.

Each Connection bound to the swarm runs its connector in a process of its own, under a
:class:`~orchestrator.supervisor.Supervisor` of its own (same statuses, crash-loop backoff,
graceful stop as agents). An event a connector emits is routed by the Connection's
``ingress.rules`` (:mod:`orchestrator.ingress`) and handed to the router as a send from
``connection:<name>``; the connector hears when it is settled, which frees its place in
flight (back-pressure). A send that cannot be delivered is kept as a ``delivery.lost`` event,
like any other. A connector whose ``run`` returns (its source is exhausted) stops the swarm
once its events are settled; one that crashes is restarted with backoff.

No accepted event is lost or run twice: the connector journals each before its sender is
answered and sends again, after any crash, those the daemon has not settled; the daemon
records each event it delivered (:mod:`orchestrator.ingress_delivered`) once its Turn started,
and settles one sent again at once. Each Connection has a health
(:mod:`orchestrator.connection_health`) fed by its connector's reports, its crashes and its
events.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from bundle import Bundle
from bundle.plan import ConnectionPlan
from bundle.spec_connector import ConnectionSpec
from goondan import crashpoints
from goondan.defaults import CONNECTIONS_DIR
from ipc import EventMessage, IpcError, build
from ipc import protocol as wire
from ipc.delegation import Handoff
from ipc.events import BootFailed, ConnectorEventReport, ConnectorEventSettled, ConnectorHealth
from ipc.protocol import CONNECTION_SENDER_PREFIX, ORCHESTRATOR, EventKind
from ipc.runtime_events import (
    ConnectionFailedEvent,
    ConnectionFinishedEvent,
    ConnectionRecoveredEvent,
    ConnectorEventEvent,
)
from orchestrator.clock import Clock
from orchestrator.connection_health import ConnectionHealth
from orchestrator.dispatch import Dispatcher, EventHandler
from orchestrator.ingress import IngressTable
from orchestrator.ingress_delivered import FILE_NAME as DELIVERED_FILE
from orchestrator.ingress_delivered import DeliveredLog
from orchestrator.status import ExitInfo, ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.tasks import TaskOwner
from orchestrator.transport import Transport

if TYPE_CHECKING:
    from orchestrator.eventlog import EventLog
    from orchestrator.router import Router


def ingress_tables(
    bundle: Bundle, plans: list[ConnectionPlan], entry_agent: str, agents: list[str]
) -> dict[str, IngressTable]:
    """The compiled ingress rules of each planned Connection; raises
    :class:`~orchestrator.ingress.UnknownIngressAgent` for a rule routing outside the swarm."""
    tables = {}
    for plan in plans:
        resource = next(r for r in bundle.of_kind("Connection") if r.name == plan.connection_name)
        spec: ConnectionSpec = resource.spec
        tables[plan.connection_name] = IngressTable.of(spec.ingress, entry_agent, agents)
    return tables


class Connections:
    """Runs the Connections of one swarm."""

    def __init__(
        self,
        plans: list[ConnectionPlan],
        ingress: dict[str, IngressTable],
        transport: Transport,
        *,
        router: Router,
        events: EventLog,
        on_finished: Callable[[str], None],
        clock: Clock,
        tasks: TaskOwner,
    ) -> None:
        self.ingress = ingress
        self.router = router
        self.events = events
        self.on_finished = on_finished
        """Told when a connector's source is exhausted (it ended cleanly, unasked)."""
        self.tasks = tasks
        self.supervisor = Supervisor(
            {plan.connection_name: plan for plan in plans},
            transport,
            on_exit=self._exited,
            on_lifecycle=lambda event, name: events.lifecycle(
                event, CONNECTION_SENDER_PREFIX + name
            ),
            clock=clock,
            tasks=tasks,
        )
        lifecycle: dict[EventKind, EventHandler] = dict(self.supervisor.event_handlers)
        boot_failed = lifecycle.pop(EventKind.BOOT_FAILED)
        self.supervisor.on_message = Dispatcher(
            None,
            lifecycle,
            {
                EventKind.BOOT_FAILED: self._boot_failed,
                EventKind.CONNECTOR_EVENT: self._event,
                EventKind.CONNECTOR_HEALTH: self._health_report,
            },
        )
        self._supervisor_boot_failed = boot_failed
        self.health: dict[str, ConnectionHealth] = {}
        """Per Connection, by name (see :mod:`orchestrator.connection_health`)."""
        self._reported: set[str] = set()
        """Connections whose running process reported a failure: its exit is not one more."""
        self._delivered: dict[str, DeliveredLog] = {}
        self.log = structlog.get_logger("goondan.connections")
        self._answers: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        """(connection, event id) → the answer of the event's Turn, until it is settled."""
        self._running = False
        """Whether the supervisor's reconcile loop runs (once there is a Connection)."""

    @property
    def read_stdin(self) -> bool:
        """Whether a connector reads the daemon's standard input (the ``cli`` connector): the
        daemon then leaves it alone (no prompt on a terminal)."""
        return any(plan.connector_name == "cli" for plan in self.plans.values())

    def start(self) -> None:
        """Start every Connection (in the background: one that cannot start backs off and
        shows why in ``status``, and holds nothing else up)."""
        if not self.plans:
            return
        self._running = True
        self.tasks.start_soon(self.supervisor.run(), "reconcile-connections")
        for name in self.plans:
            self.tasks.start_soon(self._start(name), f"start:connection:{name}")

    async def _start(self, name: str) -> None:
        try:
            await self.supervisor.ensure_running(name)
        except (IpcError, TimeoutError) as exc:
            self.log.error("connection did not start", connection=name, error=str(exc))

    @property
    def plans(self) -> dict[str, ConnectionPlan]:
        """The plan of each Connection, as its process was (or will be) started from."""
        return {
            handle.name: handle.plan
            for handle in self.supervisor.handles()
            if isinstance(handle.plan, ConnectionPlan)
        }

    async def apply(
        self, plans: list[ConnectionPlan], ingress: dict[str, IngressTable], grace: float
    ) -> list[str]:
        """Adopt an edited configuration (``run --watch``): new Connections start, changed ones
        restart with their new plan, removed ones stop; the routing tables are replaced.
        Returns the (re)started Connections as ``connection:<name>``."""
        self.ingress = ingress
        wanted = {plan.connection_name: plan for plan in plans}
        added, restarted = await self.supervisor.replace_plans(wanted, grace)
        for name in added:
            await self._start(name)
        if self.plans and not self._running:
            self._running = True
            self.tasks.start_soon(self.supervisor.run(), "reconcile-connections")
        return [CONNECTION_SENDER_PREFIX + name for name in [*added, *restarted]]

    def status(self) -> list[dict[str, Any]]:
        """One row per Connection: its process, as ``status`` shows agents."""
        rows, plans = self.supervisor.status(), self.plans
        for row in rows:
            name = row.pop("agent")
            plan = plans[name]
            row["connection"] = plan.connection_name
            row["connector"] = plan.connector_name
            handle = self.supervisor.handle(name)
            running = handle is not None and handle.ready_now
            row["health"] = self.health_of(name).to_json(running)
        return rows

    def health_of(self, name: str) -> ConnectionHealth:
        """The health of Connection ``name`` (a fresh one until something is reported)."""
        return self.health.setdefault(name, ConnectionHealth())

    def stop_restarting(self) -> None:
        """The swarm is stopping: no connector is (re)started from now on."""
        self.supervisor.stop_restarting()

    async def shutdown(self, grace: float) -> None:
        """Stop every connector (first, so no event arrives while the agents drain)."""
        await self.supervisor.shutdown(grace)

    def kill_all(self) -> None:
        """Last resort: SIGKILL every connector process."""
        self.supervisor.kill_all()

    # -- events --------------------------------------------------------------------------

    def _event(self, sender: str, message: EventMessage, body: ConnectorEventReport) -> None:
        crashpoints.point("connection.received")
        handle, table = self.supervisor.handle(sender), self.ingress.get(sender)
        if handle is None or table is None or not isinstance(handle.plan, ConnectionPlan):
            return
        plan = handle.plan
        self.health_of(sender).event_received()
        delivered = self._delivered_log(plan)
        if body.event_id in delivered:
            # Sent again by a connector restarted after its Turn had started: not twice.
            self.log.info("event delivered already", connection=sender, event_id=body.event_id)
            self._settled(sender, body.event_id, None)
            return
        properties = {
            **body.properties,
            "connection_name": plan.connection_name,
            "connector_name": plan.connector_name,
        }
        destination = table.route(body.name, properties, body.instance_key)
        handoff = Handoff(
            target=destination.agent,
            input=body.text,
            instance_key=destination.instance_key,
            trace_id=wire.new_trace_id(),
            event_type=body.name,
            metadata={"connection": plan.connection_name, "properties": properties},
            event_id=body.event_id,
        )
        routed = ConnectorEventEvent(
            agent_name=destination.agent,
            instance_key=destination.instance_key,
            trace_id=handoff.trace_id,
            connection=plan.connection_name,
            event=body.name,
            rule=destination.rule,
        )
        self.events.emit(routed)
        self.router.send(
            CONNECTION_SENDER_PREFIX + sender,
            handoff,
            on_settled=lambda error: self._settled(sender, body.event_id, error),
            on_answer=lambda answer, failure: self._answered(
                sender, body.event_id, answer, failure
            ),
            on_started=lambda: self._mark_delivered(delivered, body.event_id),
        )

    def _mark_delivered(self, delivered: DeliveredLog, event_id: str) -> None:
        self.tasks.start_soon(delivered.mark(event_id), f"delivered:{event_id}")

    def _delivered_log(self, plan: ConnectionPlan) -> DeliveredLog:
        name = plan.connection_name
        log = self._delivered.get(name)
        if log is None:
            path = Path(plan.state_dir) / CONNECTIONS_DIR / name / DELIVERED_FILE
            log = self._delivered[name] = DeliveredLog(path)
        return log

    # -- health ------------------------------------------------------------------------------

    def _health_report(self, sender: str, message: EventMessage, body: ConnectorHealth) -> None:
        if sender not in self.supervisor.names():
            return
        health = self.health_of(sender)
        if body.error is not None:
            self._failure_reported(sender, body.error)
        elif health.consecutive_failures:
            health.succeeded()
            self.log.info("connection recovered", connection=sender)
            recovered = ConnectionRecoveredEvent(agent_name=CONNECTION_SENDER_PREFIX + sender)
            self.events.emit(recovered)

    def _boot_failed(self, sender: str, message: EventMessage, body: BootFailed) -> None:
        self._supervisor_boot_failed(sender, message, body)
        self._failure_reported(sender, body.error)

    def _failure_reported(self, sender: str, error: str) -> None:
        if sender in self.supervisor.names():
            self._reported.add(sender)
            self._failed(sender, error)

    def _failed(self, name: str, error: str) -> None:
        health = self.health_of(name)
        health.failed(error)
        self.log.warning(
            "connection failing",
            connection=name,
            error=error,
            consecutive_failures=health.consecutive_failures,
        )
        failed = ConnectionFailedEvent(
            agent_name=CONNECTION_SENDER_PREFIX + name,
            error=error,
            consecutive_failures=health.consecutive_failures,
        )
        self.events.emit(failed)

    def _answered(
        self, connection: str, event_id: str, answer: str | None, failure: str | None
    ) -> None:
        """Keep the answer of an event's Turn for its settlement (which follows at once)."""
        self._answers[(connection, event_id)] = (answer, failure)

    def _settled(self, connection: str, event_id: str, error: IpcError | None) -> None:
        answer, failure = self._answers.pop((connection, event_id), (None, None))
        handle = self.supervisor.handle(connection)
        if handle is None or handle.worker is None:
            return  # it exited: its places in flight went with it
        text = None if error is None else f"{error.code}: {error.message}"
        settled = ConnectorEventSettled(event_id, text, answer, failure)
        try:
            handle.worker.send(build.event(ORCHESTRATOR, connection, settled))
        except Exception as exc:  # gone meanwhile
            self.log.info("settlement not delivered", connection=connection, error=str(exc))

    def _exited(self, name: str, info: ExitInfo) -> None:
        handle = self.supervisor.handle(name)
        if handle is None:
            return
        reported = name in self._reported
        self._reported.discard(name)
        if not info.clean and not handle.stopping and not reported:
            self._failed(name, f"its process ended: {info.describe()}")
        if info.clean and not handle.stopping and handle.status is not ProcessStatus.TERMINATED:
            # Its source is exhausted (stdin at its end, say): not a crash to restart.
            handle.wanted = False
            self.log.info("connection finished", connection=name)
            finished = ConnectionFinishedEvent(agent_name=CONNECTION_SENDER_PREFIX + name)
            self.events.emit(finished)
            self.on_finished(name)
