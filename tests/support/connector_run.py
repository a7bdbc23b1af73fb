"""Run a connector's ``run(ctx)`` as a task of the test's loop, and stop it within a bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tests.support.connector_harness import RecordingContext

STOP_SECONDS = 2.0
"""How long a cancelled connector may take to return: "promptly"."""


@contextlib.asynccontextmanager
async def running(
    run: Callable[[Any], Awaitable[None]], ctx: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """``run(ctx)`` in a task; on exit it is cancelled and must end within ``STOP_SECONDS``.

    An exception the connector raised (other than the cancellation) propagates.
    """

    async def main() -> None:
        await run(ctx)

    task = asyncio.create_task(main())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)
        assert task.done(), f"the connector did not stop within {STOP_SECONDS} s of cancel()"
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


class LoggedEvent(dict[str, Any]):
    """One log call: ``event`` and ``log_level`` plus its fields (like ``capture_logs``)."""


class WaitableLogger:
    """A connector logger that records every call and lets a test await one."""

    def __init__(self) -> None:
        self.entries: list[LoggedEvent] = []
        self._changed = asyncio.Event()

    def _log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        self.entries.append(LoggedEvent(event=event, log_level=level, **fields))
        self._changed.set()

    def debug(self, event: str, /, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, /, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, /, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, /, **fields: Any) -> None:
        self._log("error", event, fields)

    def named(self, event: str) -> list[LoggedEvent]:
        return [e for e in self.entries if e["event"] == event]

    async def wait_for(self, event: str, count: int = 1, seconds: float = 10.0) -> None:
        """Until ``event`` was logged ``count`` times, waiting at most ``seconds``."""
        async with asyncio.timeout(seconds):
            while len(self.named(event)) < count:
                self._changed.clear()
                await self._changed.wait()


class LoggingContext(RecordingContext):
    """A :class:`RecordingContext` whose logger is a :class:`WaitableLogger`."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.log = WaitableLogger()

    @property
    def logger(self) -> Any:
        return self.log
