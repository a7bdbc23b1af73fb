"""Stopping background tasks: a loop that lost its cancellation still ends."""

from __future__ import annotations

import asyncio
import gc

import pytest

from orchestrator.tasks import cancel_and_wait

pytestmark = pytest.mark.timeout(30)


async def test_a_loop_that_drops_its_first_cancellation_is_cancelled_again() -> None:
    # What Python 3.11's ``asyncio.wait_for`` does when the cancellation arrives together
    # with the result it awaited: the loop runs on as if it had never been cancelled.
    rounds = 0
    dropped = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal rounds
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            dropped.set()
        while True:
            rounds += 1
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 10)
    assert dropped.is_set()
    assert task.cancelled()
    assert rounds >= 1  # it did run on between the two cancellations


async def test_a_task_that_failed_is_waited_for_and_its_failure_kept_from_the_loop() -> None:
    reported: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))

    async def fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.ensure_future(fails())
    await asyncio.wait({task})
    await cancel_and_wait(task)
    del task
    gc.collect()
    assert reported == []  # retrieved: no "exception was never retrieved" report


async def test_the_caller_cancelled_meanwhile_is_cancelled_and_the_task_still_stops() -> None:
    stopped = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.05)
            stopped.set()

    task = asyncio.ensure_future(slow_to_stop())
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(cancel_and_wait(task))
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await asyncio.wait_for(stopped.wait(), 10)
