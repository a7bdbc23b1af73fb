"""The one owner of the Orchestrator's background tasks.

Like a trio nursery or an ``asyncio.TaskGroup``, every task is started through an owner that
cancels and awaits whatever is left when it closes, so none outlives the daemon or fails
unnoticed. Unlike a ``TaskGroup``, one failing task does not cancel its siblings: a daemon
keeps serving when one delivery fails; the failure is logged with the task's name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

CANCEL_AGAIN_SECONDS = 0.5
"""How long :func:`cancel_and_wait` lets a cancelled task run on before cancelling it again."""


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, whatever it raised.

    The cancellation is repeated while the task runs on, as anyio's cancel scopes deliver
    theirs again until the task leaves: on Python 3.11, ``asyncio.wait_for`` (which nats-py's
    requests await) drops a cancellation that arrives together with the result it awaited, and
    a loop that lost its one cancellation would run, and be awaited, forever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: the owner stops it and has no use for its failure


class TaskOwner:
    """Starts background tasks, logs their failures, cancels and awaits them on :meth:`aclose`."""

    def __init__(self, logger: Any = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._log = logger or structlog.get_logger("goondan.tasks")

    def start_soon(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task named ``name``; after :meth:`aclose` it is cancelled at once."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        if self._closed:
            task.cancel()
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error(
                "background task failed", task=task.get_name(), error=repr(task.exception())
            )

    def __len__(self) -> int:
        return len(self._tasks)

    async def settle(self, seconds: float) -> None:
        """Let the tasks running now finish, for at most ``seconds`` (none cancelled:
        :meth:`aclose` does that)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=seconds)

    async def aclose(self) -> None:
        """Cancel every task still running and wait until all are done."""
        self._closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
