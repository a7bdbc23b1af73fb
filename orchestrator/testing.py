"""Test doubles for the Orchestrator's seams: a fake clock, a fake transport and its workers.

With them the supervisor and the router run their real code against workers that exist only in
memory and a clock that moves only when told, so a backoff of five minutes or a request timeout
of a minute is tested in microseconds::

    clock = FakeClock()
    transport = FakeTransport()
    supervisor = Supervisor(fake_plans("a"), transport, clock=clock)
    router = Router(supervisor, clock=clock)
    supervisor.on_message = Dispatcher(router, supervisor.event_handlers)

    answer = asyncio.ensure_future(router.request("a", "hi", timeout_ms=1000))
    worker = await transport.started("a")           # the fake reported ready at once
    [delegate] = worker.delegates()
    clock.advance(1.0)                               # the request times out
    assert (await answer).error.code == "AGENT_REQUEST_TIMEOUT"

A :class:`FakeWorker` records what it is sent, acknowledges a ``shutdown`` and exits (unless
told not to), and reports, answers, exits or crashes on command.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bundle.plan import AgentPlan, ModelPlan, Plan
from ipc import (
    DelegateMessage,
    EventMessage,
    IpcMessage,
    NodeAbsent,
    PeerGone,
    ShutdownMessage,
    build,
)
from ipc.codec import encode
from ipc.delegation import DelegateAnswer
from ipc.events import Ready, ShutdownAck, read_event
from ipc.payload import EventBody
from ipc.protocol import ORCHESTRATOR
from orchestrator.status import ExitInfo

BodyT = TypeVar("BodyT", bound=EventBody)


def fake_plans(*names: str) -> dict[str, AgentPlan]:
    """Plans for agents ``names`` of one swarm, enough for a supervisor over fake workers."""
    return {
        name: AgentPlan(
            swarm_name="fake",
            entry_agent=names[0],
            agents=list(names),
            agent_name=name,
            model=ModelPlan(name="none", provider="scripted", model="none"),
            state_dir="/nonexistent",
        )
        for name in names
    }


# -- the clock ------------------------------------------------------------------------------------


@dataclass(order=True)
class FakeTimer:
    """A callback scheduled on a :class:`FakeClock`."""

    deadline: float
    order: int
    callback: Callable[..., None] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False, default=())
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        """Do not run it."""
        self.cancelled = True


class FakeClock:
    """A :class:`~orchestrator.clock.Clock` that moves only when :meth:`advance` is called."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[FakeTimer] = []
        self._order = itertools.count()

    def now(self) -> float:
        """The fake time."""
        return self._now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> FakeTimer:
        """Schedule ``callback(*args)`` at ``now() + delay``."""
        timer = FakeTimer(self._now + max(delay, 0.0), next(self._order), callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, seconds: float) -> int:
        """Move time forward, running every timer that falls due on the way (in order, those
        the callbacks schedule included); returns how many ran."""
        end = self._now + seconds
        ran = 0
        while self._timers and self._timers[0].deadline <= end:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.deadline)
            timer.callback(*timer.args)
            ran += 1
        self._now = end
        return ran


# -- workers ----------------------------------------------------------------------------------------


class FakeWorker:
    """A :class:`~orchestrator.transport.Worker` that lives in memory."""

    def __init__(
        self, name: str, pid: int, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> None:
        self.name = name
        self._pid = pid
        self.plan = plan
        self._on_message = on_message
        self.exited: asyncio.Future[ExitInfo] = asyncio.get_running_loop().create_future()
        self.sent: list[IpcMessage] = []
        """Every message the Orchestrator sent it, in order."""
        self.closed = False
        self.signals: list[str] = []
        """``"SIGTERM"``/``"SIGKILL"`` in the order they were sent."""
        self.obeys_shutdown = True
        """On ``shutdown``: acknowledge and exit 0. Set ``False`` for one that hangs."""
        self.obeys_sigterm = True
        """On SIGTERM: exit by the signal. Set ``False`` for one that ignores it."""
        self._arrived = asyncio.Event()

    @property
    def pid(self) -> int | None:
        """A fake pid, while it runs."""
        return None if self.exited.done() else self._pid

    @property
    def node(self) -> None:
        """In memory, on this host."""
        return None

    # -- the Worker protocol ------------------------------------------------------------------

    def send(self, message: IpcMessage) -> None:
        """Record ``message``; raises ``PeerGone`` once the worker exited, and what
        :func:`~ipc.codec.encode` raises for a message the real transports could not send."""
        if self.exited.done() or self.closed:
            raise PeerGone(f"{self.name} is gone")
        encode(message)
        self.sent.append(message)
        self._arrived.set()
        if isinstance(message, ShutdownMessage) and self.obeys_shutdown:
            loop = asyncio.get_running_loop()
            loop.call_soon(self.report, ShutdownAck())
            loop.call_soon(self.exit, 0)

    def close(self) -> None:
        """Forget the connection."""
        self.closed = True

    def terminate(self) -> None:
        """SIGTERM: exit by it unless told to ignore it."""
        self.signals.append("SIGTERM")
        self._arrived.set()
        if self.obeys_sigterm:
            self.exit(-15)

    def kill(self) -> None:
        """SIGKILL: exit by it."""
        self.signals.append("SIGKILL")
        self._arrived.set()
        self.exit(-9)

    # -- driving it ---------------------------------------------------------------------------

    def deliver(self, message: IpcMessage) -> None:
        """Hand ``message`` to the Orchestrator as if the process wrote it."""
        self._on_message(message)

    def report(self, body: EventBody, correlation_id: str | None = None) -> None:
        """Send the Orchestrator an event."""
        self.deliver(build.event(self.name, ORCHESTRATOR, body, correlation_id))

    def ready(self) -> None:
        """Report ready."""
        self.report(Ready(self._pid))

    def answer(self, delegate: DelegateMessage, answer: DelegateAnswer | str) -> None:
        """Answer ``delegate`` (a string is an ``ok`` answer with that output)."""
        if isinstance(answer, str):
            answer = DelegateAnswer("ok", answer)
        self.deliver(
            build.delegate_result(self.name, delegate.sender, delegate.correlation_id, answer)
        )

    def exit(self, code: int) -> None:
        """End with exit code ``code`` (negative: killed by signal ``-code``)."""
        if not self.exited.done():
            self.exited.set_result(ExitInfo(code))

    def crash(self) -> None:
        """Die by SIGKILL, as if the OOM killer took it."""
        self.exit(-9)

    # -- what it was sent ----------------------------------------------------------------------

    def delegates(self) -> list[DelegateMessage]:
        """The ``delegate`` messages sent to it."""
        return [m for m in self.sent if isinstance(m, DelegateMessage)]

    def events(self, body_type: type[BodyT]) -> list[tuple[EventMessage, BodyT]]:
        """The events of one kind sent to it, with their bodies."""
        found = []
        for message in self.sent:
            if isinstance(message, EventMessage):
                body = read_event(message)
                if isinstance(body, body_type):
                    found.append((message, body))
        return found

    async def received(self, count: int = 1, seconds: float = 2.0) -> list[IpcMessage]:
        """Wait (in real time, bounded) until it was sent at least ``count`` messages."""
        async with asyncio.timeout(seconds):
            while len(self.sent) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.sent

    async def signalled(self, count: int = 1, seconds: float = 2.0) -> list[str]:
        """Wait (in real time, bounded) until it got at least ``count`` signals."""
        async with asyncio.timeout(seconds):
            while len(self.signals) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.signals


class FakeTransport:
    """A :class:`~orchestrator.transport.Transport` of :class:`FakeWorker` s.

    By default a worker reports ready as soon as it starts; ``ready_on_start = False`` leaves
    that to the test, and names in ``refuse`` make ``start`` raise (the OS refused a process).
    While ``gate`` is set to an unset event, ``start`` waits for it (a slow process start).
    """

    def __init__(self) -> None:
        self.workers: list[FakeWorker] = []
        """Every worker started, in order."""
        self.ready_on_start = True
        self.refuse: set[str] = set()
        self.absent: set[str] = set()
        """Names whose ``start`` raises :class:`~ipc.NodeAbsent` (no cluster node for them)."""
        self.gate: asyncio.Event | None = None
        self._pids = itertools.count(4000)
        self._started = asyncio.Event()

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> FakeWorker:
        """Start a fake worker of ``name``."""
        if self.gate is not None:
            await self.gate.wait()
        if name in self.refuse:
            raise OSError(f"cannot start {name}")
        if name in self.absent:
            raise NodeAbsent(f"agent {name!r} runs on node 'n1', which is not in the cluster")
        worker = FakeWorker(name, next(self._pids), plan, on_message)
        self.workers.append(worker)
        self._started.set()
        if self.ready_on_start:
            asyncio.get_running_loop().call_soon(worker.ready)
        return worker

    def of(self, name: str) -> list[FakeWorker]:
        """The workers of agent ``name``, oldest first."""
        return [w for w in self.workers if w.name == name]

    def current(self, name: str) -> FakeWorker:
        """The newest worker of ``name``."""
        workers = self.of(name)
        if not workers:
            raise LookupError(f"no worker of {name!r} was started")
        return workers[-1]

    async def started(self, name: str, count: int = 1, seconds: float = 2.0) -> FakeWorker:
        """Wait (in real time, bounded) until ``count`` workers of ``name`` were started; the
        newest."""
        async with asyncio.timeout(seconds):
            while len(self.of(name)) < count:
                self._started.clear()
                await self._started.wait()
        return self.current(name)
