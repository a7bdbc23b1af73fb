"""A wait to join a cluster ends as soon as a stop is asked, its own cleanup run."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.cluster.stopping import unless_stopped


class Join:
    """A join that waits until released, and says whether its cleanup ran."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.began = asyncio.Event()
        self.cleaned = False

    async def __call__(self, fail: bool = False) -> None:
        self.began.set()
        try:
            await self.release.wait()
            if fail:
                raise ConnectionError("refused")
        finally:
            self.cleaned = True


def test_a_stop_ends_the_wait_and_the_join_cleans_up() -> None:
    async def main() -> None:
        join, stopped = Join(), asyncio.Event()
        waiting = asyncio.ensure_future(unless_stopped(join(), stopped))
        await join.began.wait()
        stopped.set()
        assert await asyncio.wait_for(waiting, 10) is False
        assert join.cleaned

    asyncio.run(main())


def test_a_stop_asked_before_is_honoured_at_once() -> None:
    async def main() -> None:
        join, stopped = Join(), asyncio.Event()
        stopped.set()
        assert await asyncio.wait_for(unless_stopped(join(), stopped), 10) is False
        assert not join.release.is_set()

    asyncio.run(main())


def test_a_join_that_ends_or_fails_first_is_its_own_outcome() -> None:
    async def main() -> None:
        join, stopped = Join(), asyncio.Event()
        join.release.set()
        assert await unless_stopped(join(), stopped) is True
        failing = Join()
        failing.release.set()
        with pytest.raises(ConnectionError, match="refused"):
            await unless_stopped(failing(fail=True), stopped)

    asyncio.run(main())


def test_cancelling_the_waiter_cancels_the_join() -> None:
    async def main() -> None:
        join, stopped = Join(), asyncio.Event()
        waiting = asyncio.ensure_future(unless_stopped(join(), stopped))
        await join.began.wait()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert join.cleaned  # before the waiter's cancellation went on

    asyncio.run(main())
