"""The supervisor: one handle per agent, started on demand, restarted when it crashes.

Status per agent: ``notStarted → spawning → idle ⇄ processing → draining → terminated``, plus
``crashed`` and ``crashLoopBackOff``. A child's exit is noticed through its process sentinel;
the first five consecutive crashes restart at once, then the delay doubles from 1 s up to
300 s (:func:`~orchestrator.status.next_restart_delay`), and a successful Turn resets the
count.
:meth:`Supervisor.reconcile` is idempotent: it starts whatever should run and is due, so it
also repairs anything an event missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, KeysView, Mapping
from typing import Any

import structlog

from bundle.plan import Plan
from goondan.defaults import (
    CRASH_THRESHOLD,
    KILL_WAIT_SECONDS,
    QUICK_EXIT_SECONDS,
    READY_TIMEOUT_SECONDS,
    RECONCILE_INTERVAL_SECONDS,
)
from ipc import (
    AgentCrashed,
    AgentNotFound,
    AgentUnavailable,
    EventMessage,
    IpcError,
    IpcMessage,
    NodeAbsent,
    build,
)
from ipc.delegation import ShutdownRequest
from ipc.events import BootFailed, Ready, ShutdownAck, StatusChanged, TurnCompleted
from ipc.protocol import EventKind
from ipc.runtime_events import (
    UNSET,
    ProcessAdoptedEvent,
    ProcessBackoffEvent,
    ProcessEvent,
    ProcessReadyEvent,
    ProcessRestartingEvent,
    ProcessSpawnedEvent,
)
from ipc.scope import kill_scope
from orchestrator.agent_handle import AgentHandle as AgentHandle
from orchestrator.clock import Clock, LoopClock, wait_for
from orchestrator.dispatch import Dispatcher, EventHandler
from orchestrator.status import ExitInfo, ProcessStatus, next_restart_delay
from orchestrator.tasks import TaskOwner
from orchestrator.transport import Transport, Worker

MessageHandler = Callable[[str, IpcMessage], None]
ExitHandler = Callable[[str, ExitInfo], None]
LifecycleListener = Callable[[ProcessEvent, str], None]
"""``(event, process name)``: told of every spawn, ready, exit, backoff and restart."""


class Supervisor:
    """Owns the agent processes of one swarm.

    Messages from workers go to :attr:`on_message`, the Orchestrator's dispatch table, which
    sends the lifecycle kinds of :attr:`event_handlers` back here.
    """

    def __init__(
        self,
        plans: Mapping[str, Plan],
        transport: Transport,
        *,
        on_message: MessageHandler | None = None,
        on_exit: ExitHandler | None = None,
        on_lifecycle: LifecycleListener | None = None,
        clock: Clock | None = None,
        tasks: TaskOwner | None = None,
        reconcile_interval: float = RECONCILE_INTERVAL_SECONDS,
    ) -> None:
        # Keyword-only past the transport: each is one seam (listeners, clock, task owner).
        self._handles: dict[str, AgentHandle] = {
            name: AgentHandle(name, plan) for name, plan in plans.items()
        }
        self.transport = transport
        self.on_message: MessageHandler = on_message or Dispatcher(None, self.event_handlers)
        """Where every message from a worker goes: the Orchestrator's dispatch table (by
        default, one with only the supervisor's own lifecycle kinds)."""
        self.on_exit = on_exit
        self.clock: Clock = clock or LoopClock()
        self.tasks = tasks or TaskOwner()
        self._owns_tasks = tasks is None
        self._reconcile_interval = reconcile_interval
        self._wake = asyncio.Event()
        self._closing = False
        self._changed = asyncio.Event()
        self._on_lifecycle = on_lifecycle
        self.log = structlog.get_logger("goondan.supervisor")

    @property
    def stopping(self) -> bool:
        """The swarm is stopping: nothing is (re)started any more."""
        return self._closing

    def handle(self, name: str) -> AgentHandle | None:
        """The handle of process ``name`` (``None`` for a name the swarm does not have)."""
        return self._handles.get(name)

    def names(self) -> KeysView[str]:
        """The names of the processes supervised, live (a reload may add or remove some)."""
        return self._handles.keys()

    def handles(self) -> list[AgentHandle]:
        """Every handle, as of now (a list of its own: a reload may change the set)."""
        return list(self._handles.values())

    @property
    def event_handlers(self) -> dict[EventKind, EventHandler]:
        """The lifecycle event kinds, for the Orchestrator's dispatch table."""
        return {
            EventKind.READY: self._ready,
            EventKind.BOOT_FAILED: self._boot_failed,
            EventKind.STATUS: self._status_changed,
            EventKind.TURN_COMPLETED: self._turn_completed,
            EventKind.SHUTDOWN_ACK: self._shutdown_acked,
        }

    def _lifecycle(self, event: ProcessEvent, handle: AgentHandle) -> None:
        if self._on_lifecycle is not None:
            try:
                self._on_lifecycle(event, handle.name)
            except Exception:
                self.log.exception("lifecycle listener failed", kind=event.type)

    def _set_status(self, handle: AgentHandle, status: ProcessStatus) -> None:
        if handle.status is not status:
            handle.status = status
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def wait_for_status(self, name: str, *statuses: ProcessStatus) -> AgentHandle:
        """Wait (without polling) until agent ``name`` is in one of ``statuses``."""
        handle = self._handles[name]
        await self.wait_until(lambda: handle.status in statuses)
        return handle

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (without polling) until ``condition()`` holds, checked at every status change."""
        while not condition():
            await self._changed.wait()

    # -- starting --------------------------------------------------------------------------

    async def ensure_running(self, name: str) -> AgentHandle:
        """Start ``name`` if needed and wait until it is ready.

        Raises ``AgentNotFound`` for a name outside the swarm, ``AgentUnavailable`` while it
        backs off after crashes (or cannot boot), ``AgentCrashed`` if it dies while starting.
        """
        handle = self._handles.get(name)
        if handle is None:
            raise AgentNotFound(f"agent {name!r} is not part of the swarm")
        if self._closing:
            raise AgentUnavailable("the swarm is shutting down")
        if (
            handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF
            and self.clock.now() < handle.next_start_at
        ):
            wait = handle.next_start_at - self.clock.now()
            reason = f": {handle.boot_error}" if handle.boot_error else ""
            raise AgentUnavailable(
                f"agent {name!r} is in crashLoopBackOff after {handle.consecutive_crashes} "
                f"crashes; next restart in {wait:.1f} s{reason}",
                details={"retryInSeconds": round(wait, 3)},
            )
        if handle.worker is None or handle.status in (
            ProcessStatus.NOT_STARTED,
            ProcessStatus.TERMINATED,
            ProcessStatus.CRASHED,
        ):
            if handle.status is ProcessStatus.DRAINING:
                raise AgentUnavailable(f"agent {name!r} is restarting")
            if handle.status is ProcessStatus.CRASHED:  # a restart, whoever asks for it first
                self._count_restart(handle)
            await self._start(handle)
        assert handle.ready is not None
        await wait_for(self.clock, asyncio.shield(handle.ready), READY_TIMEOUT_SECONDS)
        return handle

    async def _start(self, handle: AgentHandle) -> None:
        if handle.status is ProcessStatus.SPAWNING and handle.ready is not None:
            return
        handle.wanted = True
        self._set_status(handle, ProcessStatus.SPAWNING)
        handle.ready = asyncio.get_running_loop().create_future()
        handle.ready.add_done_callback(_consume_exception)
        handle.shutdown_acked = asyncio.Event()
        handle.stopping = False
        spawning = handle.spawning = asyncio.get_running_loop().create_future()
        try:
            worker = await self.transport.start(
                handle.name, handle.plan, lambda message: self._received(handle, message)
            )
        except Exception as exc:
            if isinstance(exc, IpcError):  # a known refusal (its cluster node is away, say)
                self.log.warning("agent not started", agent=handle.name, error=exc.message)
            else:
                self.log.exception("failed to start agent process", agent=handle.name)
            self._set_status(handle, ProcessStatus.CRASHED)
            if not handle.ready.done():
                # A cluster node away keeps its kind: the router waits a little for it.
                refusal = NodeAbsent if isinstance(exc, NodeAbsent) else AgentUnavailable
                details = exc.details if isinstance(exc, IpcError) else {}
                error = refusal(f"cannot start {handle.name!r}: {exc}", details=details)
                handle.ready.set_exception(error)
            return
        finally:
            spawning.set_result(None)
            handle.spawning = None
        handle.worker = worker
        handle.started_at = self.clock.now()
        where = {"node": worker.node} if worker.node is not None else {}
        self.log.info("agent process spawned", agent=handle.name, pid=worker.pid, **where)
        node = worker.node if worker.node is not None else UNSET
        self._lifecycle(ProcessSpawnedEvent(pid=worker.pid, node=node), handle)
        handle.watcher = self.tasks.start_soon(self._watch(handle, worker), f"watch:{handle.name}")

    def adopt(self, name: str, worker: Worker) -> Callable[[IpcMessage], None] | None:
        """Take over ``worker``, an agent process that is up and ready though this supervisor
        did not start it (a cluster's new leader finds what the previous one started). Returns
        where its messages go; ``None`` when ``name`` is unknown or has a process already."""
        handle = self._handles.get(name)
        if handle is None or handle.worker is not None or handle.spawning is not None:
            return None
        handle.wanted = True
        handle.worker = worker
        handle.started_at = self.clock.now()
        handle.stopping = False
        handle.shutdown_acked = asyncio.Event()
        handle.ready = asyncio.get_running_loop().create_future()
        handle.ready.add_done_callback(_consume_exception)
        handle.ready.set_result(None)
        self._set_status(handle, ProcessStatus.IDLE)
        where = {"node": worker.node} if worker.node is not None else {}
        self.log.info("agent process adopted", agent=name, pid=worker.pid, **where)
        node = worker.node if worker.node is not None else UNSET
        self._lifecycle(ProcessAdoptedEvent(pid=worker.pid, node=node), handle)
        handle.watcher = self.tasks.start_soon(self._watch(handle, worker), f"watch:{name}")
        return lambda message: self._received(handle, message)

    # -- messages from a worker ----------------------------------------------------------------

    def _received(self, handle: AgentHandle, message: IpcMessage) -> None:
        try:
            self.on_message(handle.name, message)
        except Exception:
            self.log.exception("failed to route message", agent=handle.name, type=message.type)

    def _ready(self, agent: str, message: EventMessage, body: Ready) -> None:
        handle = self._handles.get(agent)
        if handle is None:
            return
        self._set_status(handle, ProcessStatus.IDLE)
        handle.boot_error = None
        handle.scope = body.scope
        if handle.ready is not None and not handle.ready.done():
            handle.ready.set_result(None)
        self.log.info("agent ready", agent=agent, pid=handle.pid)
        self._lifecycle(ProcessReadyEvent(pid=handle.pid), handle)

    def _status_changed(self, agent: str, message: EventMessage, body: StatusChanged) -> None:
        handle = self._handles.get(agent)
        if handle is not None and handle.status in (ProcessStatus.IDLE, ProcessStatus.PROCESSING):
            self._set_status(handle, ProcessStatus(body.status))

    def _turn_completed(self, agent: str, message: EventMessage, body: TurnCompleted) -> None:
        handle = self._handles.get(agent)
        if handle is not None and body.ok:
            handle.consecutive_crashes = 0  # a successful Turn proves the agent healthy
            handle.quick_clean_exits = 0

    def _boot_failed(self, agent: str, message: EventMessage, body: BootFailed) -> None:
        handle = self._handles.get(agent)
        if handle is not None:
            handle.boot_error = body.error

    def _shutdown_acked(self, agent: str, message: EventMessage, body: ShutdownAck) -> None:
        handle = self._handles.get(agent)
        if handle is not None:
            handle.shutdown_acked.set()

    # -- exits -------------------------------------------------------------------------------

    async def _watch(self, handle: AgentHandle, worker: Worker) -> None:
        """Wait for ``worker``'s exit, then record it: status, counters, backoff, waiters."""
        info = await worker.exited
        worker.close()
        # Whatever its tools started and left behind dies with it, even after a SIGKILL. The
        # other agents are not searched: none carries this agent's scope. (A cluster node does
        # this for the agents it runs.)
        if worker.node is None:
            killed = kill_scope(handle.scope, skip=self._running_pids())
            if killed:
                self.log.info(
                    "tool programs of an exited agent killed", agent=handle.name, pids=killed
                )
        handle.scope = None
        if handle.worker is not worker:
            return
        handle.worker = None
        handle.last_exit = info
        expected = handle.stopping or self._closing
        self._classify_exit(handle, info, expected)
        self._lifecycle(info.event(expected, handle.consecutive_crashes), handle)
        if handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF:
            delay = round(handle.next_start_at - self.clock.now(), 3)
            self._lifecycle(ProcessBackoffEvent(delay_seconds=delay), handle)
        if handle.ready is not None and not handle.ready.done():
            error = (
                AgentUnavailable(f"agent {handle.name!r} cannot boot: {handle.boot_error}")
                if handle.boot_error
                else AgentCrashed(
                    f"agent {handle.name!r} exited while starting ({info.describe()})"
                )
            )
            handle.ready.set_exception(error)
        if self.on_exit is not None:
            self.on_exit(handle.name, info)
        self._wake.set()

    def _classify_exit(self, handle: AgentHandle, info: ExitInfo, expected: bool) -> None:
        """An expected exit terminates; an unasked clean one restarts at once; a crash counts
        and backs off."""
        # A clean exit nobody asked for (a tool's os._exit(0), say) after the agent was up is
        # no crash: restart at once, counters reset. One before it ever got ready still
        # counts, or a module exiting 0 at import would spin.
        unasked_clean = not expected and info.clean and handle.status is not ProcessStatus.SPAWNING
        if unasked_clean:
            up = self.clock.now() - (handle.started_at or self.clock.now())
            handle.quick_clean_exits = (
                handle.quick_clean_exits + 1 if up < QUICK_EXIT_SECONDS else 0
            )
            if handle.quick_clean_exits > CRASH_THRESHOLD:
                # One exiting 0 right after every start would restart at full speed forever:
                # back off as for as many crashes in a row.
                unasked_clean = False
                handle.consecutive_crashes = max(
                    handle.consecutive_crashes, handle.quick_clean_exits - 1
                )
        if expected:
            self._set_status(handle, ProcessStatus.TERMINATED)
            if info.clean:
                handle.consecutive_crashes = 0
            self.log.info("agent process exited", agent=handle.name, exit=info.describe())
            return
        if unasked_clean:
            handle.consecutive_crashes = 0
            handle.next_start_at = self.clock.now()
            self._set_status(handle, ProcessStatus.CRASHED)  # down, and due for restart now
            self.log.info("agent process exited unasked; restarting", agent=handle.name)
            return
        handle.crashes += 1
        handle.consecutive_crashes += 1
        delay = next_restart_delay(handle.consecutive_crashes)
        if info.boot_failure:  # restarting cannot fix bad config: back off at once
            delay = max(delay, next_restart_delay(CRASH_THRESHOLD + 1))
        handle.next_start_at = self.clock.now() + delay
        self._set_status(
            handle, ProcessStatus.CRASH_LOOP_BACK_OFF if delay > 0 else ProcessStatus.CRASHED
        )
        killed = info.signal == signal.SIGKILL
        (self.log.error if killed else self.log.warning)(
            "agent process crashed" + (" (SIGKILL: possibly OOM)" if killed else ""),
            agent=handle.name,
            exit=info.describe(),
            consecutive_crashes=handle.consecutive_crashes,
            restart_in_seconds=delay,
            boot_error=handle.boot_error,
        )

    # -- reconcile -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Start every wanted agent that is down and due; idempotent."""
        if self._closing:
            return
        now = self.clock.now()
        for handle in self._handles.values():
            down = handle.worker is None and handle.status in (
                ProcessStatus.CRASHED,
                ProcessStatus.CRASH_LOOP_BACK_OFF,
            )
            if handle.wanted and down and now >= handle.next_start_at:
                self._count_restart(handle)
                await self._start(handle)

    def _count_restart(self, handle: AgentHandle) -> None:
        handle.restarts += 1
        self.log.info("restarting agent", agent=handle.name, restarts=handle.restarts)
        self._lifecycle(ProcessRestartingEvent(restarts=handle.restarts), handle)

    def next_due(self) -> float | None:
        """Seconds until the earliest backoff ends, if any agent waits."""
        waits = [
            h.next_start_at - self.clock.now()
            for h in self._handles.values()
            if h.wanted and h.worker is None and h.status is ProcessStatus.CRASH_LOOP_BACK_OFF
        ]
        return max(0.0, min(waits)) if waits else None

    async def run(self) -> None:
        """Reconcile on every exit, when a backoff ends, and every ``reconcile_interval``."""
        while not self._closing:
            due = self.next_due()
            timeout = (
                self._reconcile_interval if due is None else min(due, self._reconcile_interval)
            )
            with contextlib.suppress(TimeoutError):
                await wait_for(self.clock, self._wake.wait(), timeout)
            self._wake.clear()
            await self.reconcile()

    # -- stopping ------------------------------------------------------------------------------

    async def stop_agent(self, name: str, grace: float, reason: str) -> None:
        """Graceful stop: ``shutdown``, wait for the exit (Turns finish within ``grace``), then
        SIGTERM, then SIGKILL. Returns once the exit is recorded."""
        handle = self._handles[name]
        worker, watcher = handle.worker, handle.watcher
        if worker is None:
            if handle.status is not ProcessStatus.NOT_STARTED:  # nothing ran: nothing ended
                self._set_status(handle, ProcessStatus.TERMINATED)
            return
        handle.stopping = True
        self._set_status(handle, ProcessStatus.DRAINING)
        exited = asyncio.shield(worker.exited)
        try:
            worker.send(build.shutdown(name, ShutdownRequest(int(grace * 1000), reason)))
            await wait_for(self.clock, exited, grace + 1.0)
        except TimeoutError:
            self.log.warning("agent ignored shutdown; terminating", agent=name, pid=worker.pid)
            worker.terminate()
            try:
                await wait_for(self.clock, asyncio.shield(worker.exited), KILL_WAIT_SECONDS)
            except TimeoutError:
                self.log.warning("agent ignored SIGTERM; killing", agent=name, pid=worker.pid)
                worker.kill()
                await worker.exited
        except Exception:  # the pipe is already gone: the exit is on its way
            await worker.exited
        if watcher is not None:  # the status table is consistent on return
            await asyncio.shield(watcher)

    async def restart_agent(self, name: str, grace: float) -> AgentHandle:
        """Stop ``name`` gracefully and start it again; crash counters reset."""
        await self.stop_agent(name, grace, "restart")
        handle = self._handles[name]
        handle.consecutive_crashes = 0
        handle.restarts += 1
        return await self.ensure_running(name)

    async def adopt_plan(self, name: str, plan: Plan, grace: float) -> bool:
        """Give ``name`` a new plan. A running agent restarts gracefully with it, a down one
        starts afresh, one not running starts with it on first use. Returns whether the agent
        was (re)started; a start that fails backs off like any boot failure."""
        handle = self._handles[name]
        handle.plan = plan
        if handle.spawning is not None:  # a process is being started with the old plan
            await asyncio.shield(handle.spawning)
        if handle.worker is not None:
            start = self.restart_agent(name, grace)
        elif handle.wanted and self.is_down(name):
            # Backing off (a boot failure, say): a new configuration is a new chance.
            start = self.start_afresh(name)
        else:
            return False
        try:
            await start
        except (IpcError, TimeoutError) as exc:
            self.log.error(
                "agent did not start with the new configuration", agent=name, error=str(exc)
            )
        return True

    async def replace_plans(
        self, plans: Mapping[str, Plan], grace: float
    ) -> tuple[list[str], list[str]]:
        """Adopt a whole new set of plans (an edited configuration): a new name gets a handle
        (not started), a changed plan is adopted (:meth:`adopt_plan`), a name no longer there
        is stopped and forgotten. Returns ``(added, restarted)``."""
        added, restarted = [], []
        for name, plan in plans.items():
            handle = self._handles.get(name)
            if handle is None:
                self._handles[name] = AgentHandle(name, plan)
                added.append(name)
            elif handle.plan != plan and await self.adopt_plan(name, plan, grace):
                restarted.append(name)
        for name in [n for n in self._handles if n not in plans]:
            await self.stop_agent(name, grace, "config_change")
            del self._handles[name]
        return added, restarted

    def is_down(self, name: str) -> bool:
        """Crashed or backing off, waiting to be restarted."""
        return self._handles[name].status in (
            ProcessStatus.CRASHED,
            ProcessStatus.CRASH_LOOP_BACK_OFF,
        )

    async def start_afresh(self, name: str) -> AgentHandle:
        """Start a down agent now, its crash count and backoff forgotten (its plan changed)."""
        handle = self._handles[name]
        handle.consecutive_crashes = 0
        handle.next_start_at = self.clock.now()
        handle.boot_error = None
        handle.restarts += 1
        self._set_status(handle, ProcessStatus.TERMINATED)
        return await self.ensure_running(name)

    def stop_restarting(self) -> None:
        """The swarm is stopping: from now on an exit is expected and nothing is (re)started.

        Called on the first stop signal, before :meth:`shutdown`: agents signalled along with
        the daemon (Ctrl-C, ``systemctl stop``) drain and exit by themselves meanwhile, and
        must not be restarted for it.
        """
        self._closing = True
        self._wake.set()

    async def shutdown(self, grace: float) -> None:
        """Stop every agent (in parallel), then cancel the supervisor's tasks if it owns them."""
        self._closing = True
        self._wake.set()
        await asyncio.gather(
            *(
                self.stop_agent(h.name, grace, "orchestrator_shutdown")
                for h in self._handles.values()
            ),
            return_exceptions=True,
        )
        if self._owns_tasks:
            await self.tasks.aclose()

    def kill_all(self) -> None:
        """Last resort (a second Ctrl-C): SIGKILL every worker."""
        for handle in self._handles.values():
            if handle.worker is not None:
                handle.worker.kill()

    def _running_pids(self) -> set[int]:
        return {
            pid
            for h in self._handles.values()
            if h.worker is not None and h.worker.node is None and (pid := h.pid)
        }

    def wake(self) -> None:
        """Reconcile now: something it waits for (a cluster node coming back) happened."""
        self._wake.set()

    def status(self) -> list[dict[str, Any]]:
        """One row per agent."""
        now = self.clock.now()
        return [handle.snapshot(now) for handle in self._handles.values()]


def _consume_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
