"""Time, as the supervisor and the router see it: read it, schedule on it, wait with a bound.

Every timeout, backoff and escalation of the Orchestrator goes through a :class:`Clock`, so the
tests drive them with :class:`orchestrator.testing.FakeClock` in milliseconds instead of waiting
for them. :class:`LoopClock`, the event loop's own clock, is the one the daemon runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    """A scheduled callback."""

    def cancel(self) -> None:
        """Do not run it (a no-op once it ran)."""


class Clock(Protocol):
    """A monotonic clock that can schedule callbacks."""

    def now(self) -> float:
        """Seconds on this clock (only differences mean anything)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        """Run ``callback(*args)`` on the loop ``delay`` seconds from now."""
        ...


class LoopClock:
    """The running event loop's clock."""

    def now(self) -> float:
        """``loop.time()``."""
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        """``loop.call_later``."""
        return asyncio.get_running_loop().call_later(delay, callback, *args)


def _expire(expired: asyncio.Future[None]) -> None:
    if not expired.done():
        expired.set_result(None)


async def wait_for(clock: Clock, awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result, or ``TimeoutError`` once ``seconds`` passed on ``clock``.

    A timeout cancels ``awaitable`` (wrap it in ``asyncio.shield`` to keep it running), like
    ``asyncio.wait_for``; the deadline is a timer of ``clock``, so a fake clock drives it.
    """
    loop = asyncio.get_running_loop()
    work = asyncio.ensure_future(awaitable)
    expired: asyncio.Future[None] = loop.create_future()
    timer = clock.call_later(seconds, _expire, expired)
    try:
        await asyncio.wait((work, expired), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        timer.cancel()
        expired.cancel()
    if work.done():
        return work.result()
    work.cancel()
    raise TimeoutError(f"no result within {seconds:g} s")
