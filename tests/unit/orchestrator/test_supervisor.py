"""Every guarantee of the supervisor's docstring, against fake workers and a fake clock.

Status per agent ``notStarted → spawning → idle ⇄ processing → draining → terminated``, plus
``crashed`` and ``crashLoopBackOff``; five crashes in a row restart at once, then the delay
doubles from 1 s to 300 s; a successful Turn resets the count; reconcile starts what should run
and is due; a stop escalates from ``shutdown`` to SIGTERM to SIGKILL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from goondan.defaults import (
    CRASH_THRESHOLD,
    KILL_WAIT_SECONDS,
    QUICK_EXIT_SECONDS,
    READY_TIMEOUT_SECONDS,
)
from ipc import AgentCrashed, AgentNotFound, AgentUnavailable, ShutdownMessage
from ipc.delegation import ShutdownRequest
from ipc.events import BootFailed, StatusChanged, TurnCompleted
from ipc.runtime_events import EventType, ProcessEvent
from orchestrator.status import EXIT_BOOT_FAILURE, ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.testing import FakeClock, FakeTransport, FakeWorker, fake_plans


@dataclass
class Fleet:
    clock: FakeClock
    transport: FakeTransport
    supervisor: Supervisor
    lifecycle: list[tuple[ProcessEvent, str]] = field(default_factory=list)

    @property
    def handle(self) -> Any:
        return self.supervisor.handle("a")

    async def running(self) -> FakeWorker:
        await asyncio.wait_for(self.supervisor.ensure_running("a"), 2)
        return self.transport.current("a")

    async def exit_recorded(self, worker: FakeWorker) -> None:
        """Until the supervisor has recorded ``worker``'s exit."""
        async with asyncio.timeout(2):
            await self.supervisor.wait_until(lambda: self.handle.worker is not worker)

    async def crash(self, worker: FakeWorker, code: int = -9) -> None:
        worker.exit(code)
        await self.exit_recorded(worker)

    def kinds(self) -> list[str]:
        return [event.type for event, _ in self.lifecycle]


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    clock = FakeClock()
    transport = FakeTransport()
    record: list[tuple[ProcessEvent, str]] = []
    supervisor = Supervisor(
        fake_plans("a"),
        transport,
        clock=clock,
        on_lifecycle=lambda event, agent: record.append((event, agent)),
    )
    yield Fleet(clock, transport, supervisor, record)
    await supervisor.shutdown(0)


async def test_an_agent_starts_on_demand_and_reports_its_status(fleet: Fleet) -> None:
    assert fleet.handle.status is ProcessStatus.NOT_STARTED
    assert [r["status"] for r in fleet.supervisor.status()] == ["notStarted"]
    worker = await fleet.running()
    assert fleet.handle.status is ProcessStatus.IDLE
    assert fleet.handle.pid == worker.pid
    worker.report(StatusChanged("processing"))
    assert fleet.handle.status is ProcessStatus.PROCESSING
    worker.report(StatusChanged("idle"))
    assert fleet.handle.status is ProcessStatus.IDLE
    assert fleet.kinds() == [EventType.PROCESS_SPAWNED, EventType.PROCESS_READY]
    assert [r["status"] for r in fleet.supervisor.status()] == ["idle"]


async def test_ensure_running_twice_starts_one_process(fleet: Fleet) -> None:
    fleet.transport.ready_on_start = False
    first = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    second = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    worker = await fleet.transport.started("a")
    worker.ready()
    await asyncio.wait_for(asyncio.gather(first, second), 2)
    assert len(fleet.transport.workers) == 1


async def test_an_unknown_agent_is_not_found(fleet: Fleet) -> None:
    with pytest.raises(AgentNotFound):
        await fleet.supervisor.ensure_running("nobody")


async def test_an_agent_that_never_reports_ready_times_out(fleet: Fleet) -> None:
    fleet.transport.ready_on_start = False
    starting = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    await fleet.transport.started("a")
    fleet.clock.advance(READY_TIMEOUT_SECONDS - 0.1)
    assert not starting.done()
    fleet.clock.advance(0.2)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(starting, 2)


async def test_a_process_that_cannot_be_started_is_unavailable(fleet: Fleet) -> None:
    fleet.transport.refuse.add("a")
    with pytest.raises(AgentUnavailable):
        await fleet.supervisor.ensure_running("a")
    assert fleet.handle.status is ProcessStatus.CRASHED


async def test_an_exit_while_starting_fails_the_waiters(fleet: Fleet) -> None:
    fleet.transport.ready_on_start = False
    starting = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    worker = await fleet.transport.started("a")
    worker.exit(1)
    with pytest.raises(AgentCrashed):
        await asyncio.wait_for(starting, 2)


# -- crashes, backoff, reconcile ------------------------------------------------------------------------

# crash n → delay before the restart: five at once, then min(1 s · 2^(n−6), 300 s)
BACKOFF = [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 1), (7, 2), (8, 4), (9, 8)]


async def test_crashes_restart_at_once_then_back_off_on_schedule(fleet: Fleet) -> None:
    worker = await fleet.running()
    for crashes, delay in BACKOFF:
        await fleet.crash(worker)
        handle = fleet.handle
        assert handle.consecutive_crashes == crashes
        assert handle.last_exit.signal == 9
        expected = ProcessStatus.CRASH_LOOP_BACK_OFF if delay else ProcessStatus.CRASHED
        assert handle.status is expected
        assert handle.next_start_at - fleet.clock.now() == delay
        if delay:
            fleet.clock.advance(delay - 0.01)
            await fleet.supervisor.reconcile()
            assert handle.worker is None  # not before it is due
            with pytest.raises(AgentUnavailable) as refused:
                await fleet.supervisor.ensure_running("a")
            assert "crashLoopBackOff" in refused.value.message
            fleet.clock.advance(0.01)
        await fleet.supervisor.reconcile()
        worker = await fleet.running()
        assert len(fleet.transport.workers) == crashes + 1
    assert fleet.handle.restarts == len(BACKOFF)
    assert fleet.handle.crashes == len(BACKOFF)


async def test_a_successful_turn_resets_the_crash_count(fleet: Fleet) -> None:
    worker = await fleet.running()
    for _ in range(3):
        await fleet.crash(worker)
        await fleet.supervisor.reconcile()
        worker = await fleet.running()
    assert fleet.handle.consecutive_crashes == 3
    worker.report(TurnCompleted("default", "error"))
    assert fleet.handle.consecutive_crashes == 3
    worker.report(TurnCompleted("default", "ok"))
    assert fleet.handle.consecutive_crashes == 0
    assert fleet.handle.crashes == 3


async def test_a_boot_failure_backs_off_at_once_and_says_why(fleet: Fleet) -> None:
    fleet.transport.ready_on_start = False
    starting = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    worker = await fleet.transport.started("a")
    worker.report(BootFailed("tool module x failed to import"))
    worker.exit(EXIT_BOOT_FAILURE)
    with pytest.raises(AgentUnavailable) as failed:
        await asyncio.wait_for(starting, 2)
    assert "tool module x failed to import" in failed.value.message
    assert fleet.handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF
    assert fleet.handle.next_start_at - fleet.clock.now() == 1.0
    assert fleet.supervisor.status()[0]["lastExit"]["reason"] == "exit code 78 (cannot boot)"


async def test_a_clean_exit_nobody_asked_for_restarts_at_once_without_counting(
    fleet: Fleet,
) -> None:
    worker = await fleet.running()
    await fleet.crash(worker)  # one real crash first
    await fleet.supervisor.reconcile()
    worker = await fleet.running()
    await fleet.crash(worker, code=0)
    assert fleet.handle.status is ProcessStatus.CRASHED
    assert fleet.handle.consecutive_crashes == 0
    assert fleet.handle.crashes == 1
    await fleet.supervisor.reconcile()
    assert fleet.handle.worker is not None


async def test_clean_exits_right_after_every_start_back_off_after_five(fleet: Fleet) -> None:
    for _ in range(CRASH_THRESHOLD):  # each restarted at once, counted nowhere
        await fleet.crash(await fleet.running(), code=0)
        assert fleet.handle.status is ProcessStatus.CRASHED
        await fleet.supervisor.reconcile()
    await fleet.crash(await fleet.running(), code=0)  # the sixth in a row, each within 10 s
    assert fleet.handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF
    assert fleet.handle.next_start_at - fleet.clock.now() == 1.0
    fleet.clock.advance(QUICK_EXIT_SECONDS + 1)  # back after its backoff, up for a while
    await fleet.supervisor.reconcile()
    worker = await fleet.running()
    fleet.clock.advance(QUICK_EXIT_SECONDS + 1)
    await fleet.crash(worker, code=0)  # an exit long after ready restarts at once again
    assert fleet.handle.status is ProcessStatus.CRASHED


async def test_a_clean_exit_before_ready_counts_as_a_crash(fleet: Fleet) -> None:
    fleet.transport.ready_on_start = False
    starting = asyncio.ensure_future(fleet.supervisor.ensure_running("a"))
    worker = await fleet.transport.started("a")
    worker.exit(0)
    with pytest.raises(AgentCrashed):
        await asyncio.wait_for(starting, 2)
    assert fleet.handle.consecutive_crashes == 1


async def test_reconcile_is_idempotent_and_leaves_unwanted_agents_alone(fleet: Fleet) -> None:
    await fleet.supervisor.reconcile()
    assert fleet.transport.workers == []  # never started: not wanted
    worker = await fleet.running()
    await fleet.crash(worker)
    await fleet.supervisor.reconcile()
    await fleet.supervisor.reconcile()
    assert len(fleet.transport.workers) == 2


async def test_the_run_loop_restarts_a_crashed_agent_when_its_backoff_ends(fleet: Fleet) -> None:
    fleet.handle.consecutive_crashes = 5  # the next crash backs off 1 s
    worker = await fleet.running()
    loop = asyncio.ensure_future(fleet.supervisor.run())
    await fleet.crash(worker)
    assert fleet.supervisor.next_due() == 1.0
    fleet.clock.advance(1.0)
    await fleet.transport.started("a", count=2)
    fleet.supervisor.stop_restarting()
    await asyncio.wait_for(loop, 2)


async def test_nothing_restarts_once_the_swarm_is_stopping(fleet: Fleet) -> None:
    worker = await fleet.running()
    fleet.supervisor.stop_restarting()
    await fleet.crash(worker)
    assert fleet.handle.status is ProcessStatus.TERMINATED  # an expected exit
    await fleet.supervisor.reconcile()
    assert len(fleet.transport.workers) == 1
    with pytest.raises(AgentUnavailable):
        await fleet.supervisor.ensure_running("a")


# -- stopping ---------------------------------------------------------------------------------------


async def test_a_stop_sends_shutdown_with_the_grace_and_waits_for_the_exit(fleet: Fleet) -> None:
    worker = await fleet.running()
    await asyncio.wait_for(fleet.supervisor.stop_agent("a", 7.5, "restart"), 2)
    [shutdown] = [m for m in worker.sent if isinstance(m, ShutdownMessage)]
    request = ShutdownRequest.from_wire(shutdown.payload, 0)
    assert (request.grace_ms, request.reason) == (7500, "restart")
    assert fleet.handle.status is ProcessStatus.TERMINATED
    assert fleet.handle.worker is None
    assert fleet.handle.shutdown_acked.is_set()
    assert worker.signals == []
    assert worker.closed


async def test_a_stop_escalates_to_sigterm_then_sigkill(fleet: Fleet) -> None:
    worker = await fleet.running()
    worker.obeys_shutdown = worker.obeys_sigterm = False
    stopping = asyncio.ensure_future(fleet.supervisor.stop_agent("a", 5.0, "restart"))
    await worker.received(1)
    assert fleet.handle.status is ProcessStatus.DRAINING
    fleet.clock.advance(5.9)  # grace + 1 s
    assert worker.signals == []
    fleet.clock.advance(0.2)
    assert await worker.signalled(1) == ["SIGTERM"]
    fleet.clock.advance(KILL_WAIT_SECONDS - 0.1)
    assert worker.signals == ["SIGTERM"]
    fleet.clock.advance(0.2)
    await asyncio.wait_for(stopping, 2)
    assert worker.signals == ["SIGTERM", "SIGKILL"]
    assert fleet.handle.last_exit.signal == 9
    assert fleet.handle.status is ProcessStatus.TERMINATED
    assert fleet.handle.crashes == 0  # asked for: no crash


async def test_a_restart_starts_a_new_process_with_counters_reset(fleet: Fleet) -> None:
    worker = await fleet.running()
    await fleet.crash(worker)
    await fleet.supervisor.reconcile()
    await fleet.running()
    handle = await asyncio.wait_for(fleet.supervisor.restart_agent("a", 1.0), 2)
    assert handle.consecutive_crashes == 0
    assert len(fleet.transport.workers) == 3
    assert handle.status is ProcessStatus.IDLE


async def test_a_new_plan_restarts_a_running_agent_with_it(fleet: Fleet) -> None:
    old = await fleet.running()
    new_plan = fake_plans("a", "b")["b"]
    assert await asyncio.wait_for(fleet.supervisor.adopt_plan("a", new_plan, 1.0), 2)
    assert old.exited.done()
    assert fleet.transport.current("a").plan is new_plan
    assert fleet.handle.status is ProcessStatus.IDLE


async def test_a_new_plan_leaves_an_agent_never_started_to_start_on_first_use(
    fleet: Fleet,
) -> None:
    new_plan = fake_plans("a", "b")["b"]
    assert not await fleet.supervisor.adopt_plan("a", new_plan, 1.0)
    assert fleet.transport.workers == []
    await fleet.running()
    assert fleet.transport.current("a").plan is new_plan


async def test_a_new_plan_starts_a_backing_off_agent_afresh(fleet: Fleet) -> None:
    worker = await fleet.running()
    worker.report(BootFailed("boom at register"))
    await fleet.crash(worker, EXIT_BOOT_FAILURE)
    assert fleet.handle.status is ProcessStatus.CRASH_LOOP_BACK_OFF
    new_plan = fake_plans("a", "b")["b"]
    assert await asyncio.wait_for(fleet.supervisor.adopt_plan("a", new_plan, 1.0), 2)
    assert fleet.handle.status is ProcessStatus.IDLE
    assert fleet.handle.consecutive_crashes == 0
    assert fleet.transport.current("a").plan is new_plan


async def test_a_new_plan_during_a_process_start_restarts_the_process_started_with_the_old(
    fleet: Fleet,
) -> None:
    # The backoff ends and reconcile is starting the agent with the old plan when the new
    # one arrives: the agent must end up running the new plan, and say it was restarted.
    worker = await fleet.running()
    await fleet.crash(worker)
    fleet.transport.gate = asyncio.Event()
    reconciling = asyncio.create_task(fleet.supervisor.reconcile())
    async with asyncio.timeout(2):
        await fleet.supervisor.wait_until(lambda: fleet.handle.status is ProcessStatus.SPAWNING)
    new_plan = fake_plans("a", "b")["b"]
    adopting = asyncio.create_task(fleet.supervisor.adopt_plan("a", new_plan, 1.0))
    await asyncio.sleep(0)  # let it see the start under way
    assert not adopting.done()
    fleet.transport.gate.set()
    async with asyncio.timeout(2):
        assert await adopting
        await reconciling
    workers = fleet.transport.of("a")
    assert len(workers) == 3
    assert workers[1].plan is not new_plan
    assert workers[1].exited.done()
    assert workers[2].plan is new_plan
    assert fleet.handle.worker is workers[2]
    assert fleet.handle.status is ProcessStatus.IDLE


async def test_an_agent_never_started_stays_not_started_through_a_stop(fleet: Fleet) -> None:
    # Nothing ran, so nothing terminated: a stop (a shutdown, a removed agent) leaves it as is.
    await asyncio.wait_for(fleet.supervisor.stop_agent("a", 1.0, "config_change"), 2)
    assert fleet.handle.status is ProcessStatus.NOT_STARTED
    worker = await fleet.running()
    await asyncio.wait_for(fleet.supervisor.stop_agent("a", 1.0, "config_change"), 2)
    assert worker.exited.done()
    assert fleet.handle.status is ProcessStatus.TERMINATED
    await fleet.running()  # a stopped agent starts again when asked
    assert fleet.handle.status is ProcessStatus.IDLE


async def test_shutdown_stops_every_agent(fleet: Fleet) -> None:
    worker = await fleet.running()
    await asyncio.wait_for(fleet.supervisor.shutdown(1.0), 2)
    assert worker.exited.done()
    assert fleet.handle.status is ProcessStatus.TERMINATED


async def test_its_handles_are_read_through_accessors_that_follow_a_reload(fleet: Fleet) -> None:
    supervisor = fleet.supervisor
    names = supervisor.names()
    before = supervisor.handles()
    assert (list(names), [h.name for h in before]) == (["a"], ["a"])
    assert supervisor.handle("nobody") is None
    added, _ = await supervisor.replace_plans(fake_plans("b"), 0)
    assert added == ["b"]
    assert list(names) == ["b"]  # a live view: "a" was removed, "b" added
    assert supervisor.handle("a") is None
    assert [h.name for h in before] == ["a"]  # a list of its own, kept as it was
    b = supervisor.handle("b")
    assert b is not None
    assert b.status is ProcessStatus.NOT_STARTED
