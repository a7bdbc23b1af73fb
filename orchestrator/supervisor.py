"""The supervisor: one handle per agent, started on demand, restarted when it crashes.

Status per agent: ``spawning → idle ⇄ processing → draining → terminated``, plus ``crashed``
and ``crashLoopBackOff``. A child's exit is noticed through its process sentinel; the first
five consecutive crashes restart at once, then the delay doubles from 1 s up to 300 s
(:func:`~orchestrator.status.next_restart_delay`), and a successful Turn resets the count.
:meth:`Supervisor.reconcile` is idempotent: it starts whatever should run and is due, so it
also repairs anything an event missed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ipc import (
    ORCHESTRATOR,
    AgentCrashed,
    AgentNotFound,
    AgentUnavailable,
    EventMessage,
    IpcMessage,
    ShutdownMessage,
)
from ipc.scope import kill_scope
from orchestrator.status import ExitInfo, ProcessStatus, next_restart_delay
from orchestrator.transport import Transport, Worker

READY_TIMEOUT_SECONDS = 30.0
"""How long a new AgentProcess may take to report ready."""
KILL_WAIT_SECONDS = 2.0
"""After SIGTERM, how long to wait before SIGKILL."""

MessageHandler = Callable[[str, IpcMessage], None]
ExitHandler = Callable[[str, ExitInfo], None]


@dataclass(eq=False)
class AgentHandle:
    """Everything the supervisor knows about one agent."""

    name: str
    plan: dict[str, Any]
    status: ProcessStatus = ProcessStatus.TERMINATED
    worker: Worker | None = None
    wanted: bool = False
    """Started at least once and not stopped on purpose: restart it when it crashes."""
    restarts: int = 0
    crashes: int = 0
    consecutive_crashes: int = 0
    next_start_at: float = 0.0
    last_exit: ExitInfo | None = None
    boot_error: str | None = None
    started_at: float | None = None
    ready: asyncio.Future[None] | None = None
    stopping: bool = False
    shutdown_acked: asyncio.Event = field(default_factory=asyncio.Event)
    scope: str | None = None
    """The agent's process scope (``ipc.scope``), reported when it is ready."""

    @property
    def ready_now(self) -> bool:
        """Running and ready to take messages (idle or processing)."""
        return self.worker is not None and (
            self.status is ProcessStatus.IDLE or self.status is ProcessStatus.PROCESSING
        )

    @property
    def pid(self) -> int | None:
        """The worker's pid, while there is one."""
        return self.worker.pid if self.worker is not None else None

    def snapshot(self, now: float) -> dict[str, Any]:
        """A JSON row for ``status``."""
        return {
            "agent": self.name,
            "pid": self.pid,
            "status": self.status.value,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "consecutiveCrashes": self.consecutive_crashes,
            "uptimeSeconds": round(now - self.started_at, 3)
            if self.started_at and self.worker
            else None,
            "lastExit": self.last_exit.to_json() if self.last_exit else None,
            "bootError": self.boot_error,
            "nextStartInSeconds": round(max(0.0, self.next_start_at - now), 3)
            if self.status is ProcessStatus.CRASH_LOOP_BACK_OFF
            else None,
        }


class Supervisor:
    """Owns the agent processes of one swarm."""

    def __init__(
        self,
        plans: dict[str, dict[str, Any]],
        transport: Transport,
        *,
        on_message: MessageHandler,
        on_exit: ExitHandler,
        clock: Callable[[], float] = time.monotonic,
        reconcile_interval: float = 5.0,
        on_lifecycle: Callable[..., None] | None = None,
    ) -> None:
        self.handles: dict[str, AgentHandle] = {
            name: AgentHandle(name, plan) for name, plan in plans.items()
        }
        self.transport = transport
        self._on_message = on_message
        self._on_exit = on_exit
        self._clock = clock
        self._reconcile_interval = reconcile_interval
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._changed = asyncio.Event()
        self._on_lifecycle = on_lifecycle
        self.log = structlog.get_logger("goondan.supervisor")

    def _lifecycle(self, kind: str, handle: AgentHandle, **fields: Any) -> None:
        if self._on_lifecycle is not None:
            try:
                self._on_lifecycle(kind, handle.name, **fields)
            except Exception:
                self.log.exception("lifecycle listener failed", kind=kind)

    def _set_status(self, handle: AgentHandle, status: ProcessStatus) -> None:
        if handle.status is not status:
            handle.status = status
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def wait_for_status(self, name: str, *statuses: ProcessStatus) -> AgentHandle:
        """Wait (without polling) until agent ``name`` is in one of ``statuses``."""
        handle = self.handles[name]
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
        handle = self.handles.get(name)
        if handle is None:
            raise AgentNotFound(f"agent {name!r} is not part of the swarm")
        if self._closing:
            raise AgentUnavailable("the swarm is shutting down")
        if (
            handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF
            and self._clock() < handle.next_start_at
        ):
            wait = handle.next_start_at - self._clock()
            reason = f": {handle.boot_error}" if handle.boot_error else ""
            raise AgentUnavailable(
                f"agent {name!r} is in crashLoopBackOff after {handle.consecutive_crashes} "
                f"crashes; next restart in {wait:.1f} s{reason}",
                details={"retryInSeconds": round(wait, 3)},
            )
        if handle.worker is None or handle.status in (
            ProcessStatus.TERMINATED,
            ProcessStatus.CRASHED,
        ):
            if handle.status is ProcessStatus.DRAINING:
                raise AgentUnavailable(f"agent {name!r} is restarting")
            await self._start(handle)
        assert handle.ready is not None
        async with asyncio.timeout(READY_TIMEOUT_SECONDS):
            await asyncio.shield(handle.ready)
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
        try:
            worker = await self.transport.start(
                handle.name, handle.plan, lambda message: self._received(handle, message)
            )
        except Exception as exc:
            self.log.exception("failed to start agent process", agent=handle.name)
            self._set_status(handle, ProcessStatus.CRASHED)
            if not handle.ready.done():
                handle.ready.set_exception(AgentUnavailable(f"cannot start {handle.name!r}: {exc}"))
            return
        handle.worker = worker
        handle.started_at = self._clock()
        self.log.info("agent process spawned", agent=handle.name, pid=worker.pid)
        self._lifecycle("spawned", handle, pid=worker.pid)
        self._own(self._watch(handle, worker), f"watch:{handle.name}")

    def _own(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- messages from a worker ----------------------------------------------------------------

    def _received(self, handle: AgentHandle, message: IpcMessage) -> None:
        if isinstance(message, EventMessage) and self._lifecycle_event(handle, message):
            return
        try:
            self._on_message(handle.name, message)
        except Exception:
            self.log.exception("failed to route message", agent=handle.name, type=message.type)

    def _lifecycle_event(self, handle: AgentHandle, message: EventMessage) -> bool:
        kind = message.kind
        if kind == "ready":
            self._set_status(handle, ProcessStatus.IDLE)
            handle.boot_error = None
            scope = message.fields.get("scope")
            handle.scope = scope if isinstance(scope, str) and scope else None
            if handle.ready is not None and not handle.ready.done():
                handle.ready.set_result(None)
            self.log.info("agent ready", agent=handle.name, pid=handle.pid)
            self._lifecycle("ready", handle, pid=handle.pid)
        elif kind == "status":
            if handle.status in (ProcessStatus.IDLE, ProcessStatus.PROCESSING):
                reported = str(message.fields.get("status", "idle"))
                self._set_status(handle, ProcessStatus(reported))
        elif kind == "turn_completed":
            if message.fields.get("status") == "ok":
                handle.consecutive_crashes = 0  # a successful Turn proves the agent healthy
        elif kind == "boot_failed":
            handle.boot_error = str(message.fields.get("error", "boot failed"))
        elif kind == "shutdown_ack":
            handle.shutdown_acked.set()
        else:
            return False
        return True

    # -- exits -------------------------------------------------------------------------------

    async def _watch(self, handle: AgentHandle, worker: Worker) -> None:
        info = await worker.exited
        worker.channel.close()
        # Whatever its tools started and left behind dies with it, even after a SIGKILL.
        killed = kill_scope(handle.scope)
        if killed:
            self.log.info("tool programs of an exited agent killed", agent=handle.name, pids=killed)
        handle.scope = None
        if handle.worker is not worker:
            return
        handle.worker = None
        handle.last_exit = info
        expected = handle.stopping or self._closing
        # A clean exit nobody asked for (a tool's os._exit(0), say) after the agent was up is
        # no crash (upstream §11, "crash counter reset"): restart at once, counters reset. One
        # before it ever got ready still counts, or a module exiting 0 at import would spin.
        unasked_clean = not expected and info.clean and handle.status is not ProcessStatus.SPAWNING
        if expected:
            self._set_status(handle, ProcessStatus.TERMINATED)
            if info.clean:
                handle.consecutive_crashes = 0
            self.log.info("agent process exited", agent=handle.name, exit=info.describe())
        elif unasked_clean:
            handle.consecutive_crashes = 0
            handle.next_start_at = self._clock()
            self._set_status(handle, ProcessStatus.CRASHED)  # down, and due for restart now
            self.log.info("agent process exited unasked; restarting", agent=handle.name)
        else:
            handle.crashes += 1
            handle.consecutive_crashes += 1
            delay = next_restart_delay(handle.consecutive_crashes)
            if info.boot_failure:
                delay = max(delay, next_restart_delay(6))  # restarting cannot fix bad config
            handle.next_start_at = self._clock() + delay
            self._set_status(
                handle, ProcessStatus.CRASH_LOOP_BACK_OFF if delay > 0 else ProcessStatus.CRASHED
            )
            level = "error" if info.signal == 9 else "warning"
            getattr(self.log, level)(
                "agent process crashed" + (" (SIGKILL: possibly OOM)" if info.signal == 9 else ""),
                agent=handle.name,
                exit=info.describe(),
                consecutive_crashes=handle.consecutive_crashes,
                restart_in_seconds=delay,
                boot_error=handle.boot_error,
            )
        self._lifecycle(
            "exited",
            handle,
            expected=expected,
            consecutiveCrashes=handle.consecutive_crashes,
            **info.to_json(),
        )
        if handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF:
            self._lifecycle(
                "backoff", handle, delaySeconds=round(handle.next_start_at - self._clock(), 3)
            )
        if handle.ready is not None and not handle.ready.done():
            error = (
                AgentUnavailable(f"agent {handle.name!r} cannot boot: {handle.boot_error}")
                if handle.boot_error
                else AgentCrashed(
                    f"agent {handle.name!r} exited while starting ({info.describe()})"
                )
            )
            handle.ready.set_exception(error)
        self._on_exit(handle.name, info)
        self._wake.set()

    # -- reconcile -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Start every wanted agent that is down and due; idempotent."""
        if self._closing:
            return
        now = self._clock()
        for handle in self.handles.values():
            down = handle.worker is None and handle.status in (
                ProcessStatus.CRASHED,
                ProcessStatus.CRASH_LOOP_BACK_OFF,
            )
            if handle.wanted and down and now >= handle.next_start_at:
                handle.restarts += 1
                self.log.info("restarting agent", agent=handle.name, restarts=handle.restarts)
                self._lifecycle("restarting", handle, restarts=handle.restarts)
                await self._start(handle)

    def next_due(self) -> float | None:
        """Seconds until the earliest backoff ends, if any agent waits."""
        waits = [
            h.next_start_at - self._clock()
            for h in self.handles.values()
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
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self.reconcile()

    # -- stopping ------------------------------------------------------------------------------

    async def stop_agent(self, name: str, grace: float, reason: str) -> None:
        """Graceful stop: ``shutdown``, wait for the ack (Turns finish), then TERM, then KILL."""
        handle = self.handles[name]
        worker = handle.worker
        if worker is None:
            self._set_status(handle, ProcessStatus.TERMINATED)
            return
        handle.stopping = True
        self._set_status(handle, ProcessStatus.DRAINING)
        try:
            worker.send(
                ShutdownMessage(
                    sender=ORCHESTRATOR,
                    to=name,
                    payload={"gracePeriodMs": int(grace * 1000), "reason": reason},
                )
            )
            async with asyncio.timeout(grace + 1.0):
                await asyncio.shield(worker.exited)
        except TimeoutError:
            self.log.warning("agent ignored shutdown; terminating", agent=name, pid=worker.pid)
            worker.terminate()
            try:
                async with asyncio.timeout(KILL_WAIT_SECONDS):
                    await asyncio.shield(worker.exited)
            except TimeoutError:
                self.log.warning("agent ignored SIGTERM; killing", agent=name, pid=worker.pid)
                worker.kill()
                await worker.exited
        except Exception:  # the pipe is already gone: the exit is on its way
            await worker.exited
        # _watch records the exit; wait for it so the table is consistent on return
        for _ in range(10):
            if handle.worker is not worker:
                break
            await asyncio.sleep(0)

    async def restart_agent(self, name: str, grace: float) -> AgentHandle:
        """Stop ``name`` gracefully and start it again; crash counters reset."""
        await self.stop_agent(name, grace, "restart")
        handle = self.handles[name]
        handle.consecutive_crashes = 0
        handle.restarts += 1
        return await self.ensure_running(name)

    def is_down(self, name: str) -> bool:
        """Crashed or backing off, waiting to be restarted."""
        return self.handles[name].status in (
            ProcessStatus.CRASHED,
            ProcessStatus.CRASH_LOOP_BACK_OFF,
        )

    async def start_afresh(self, name: str) -> AgentHandle:
        """Start a down agent now, its crash count and backoff forgotten (its plan changed)."""
        handle = self.handles[name]
        handle.consecutive_crashes = 0
        handle.next_start_at = self._clock()
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
        """Stop every agent (in parallel), then cancel the supervisor's own tasks."""
        self._closing = True
        self._wake.set()
        await asyncio.gather(
            *(
                self.stop_agent(h.name, grace, "orchestrator_shutdown")
                for h in self.handles.values()
            ),
            return_exceptions=True,
        )
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def kill_all(self) -> None:
        """Last resort (a second Ctrl-C): SIGKILL every worker."""
        for handle in self.handles.values():
            if handle.worker is not None:
                handle.worker.kill()

    def status(self) -> list[dict[str, Any]]:
        """One row per agent."""
        now = self._clock()
        return [handle.snapshot(now) for handle in self.handles.values()]


def _consume_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
