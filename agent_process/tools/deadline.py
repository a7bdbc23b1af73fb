"""A tool handler's deadline, counting its own running time, and whether its output is awaited.

:func:`with_deadline` is on the path of every tool call: a plain coroutine function (no
wrapper object per call) that steps a coroutine once by hand, so a handler that finishes
without suspending costs no timer at all.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeGuard


class HandlerTimeout(Exception):
    """The handler's deadline passed."""


_PLAIN_OUTPUTS = frozenset({dict, list, str, int, float, bool, type(None)})


def may_await(output: object) -> TypeGuard[Awaitable[Any]]:
    """Whether a sync handler handed back a coroutine or future to await, not a value."""
    # The plain types first: asyncio.iscoroutine of a dict is an ABC check, slow per call.
    if type(output) in _PLAIN_OUTPUTS:
        return False
    return asyncio.iscoroutine(output) or isinstance(output, asyncio.Future)


class _Deadline:
    """Cancels the awaiting task when the deadline fires, and remembers that it did."""

    __slots__ = ("expired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()


async def with_deadline(awaitable: Awaitable[Any], seconds: float) -> Any:
    """Await ``awaitable``, raising :class:`HandlerTimeout` ``seconds`` after the call.

    A coroutine is stepped once by hand first: one that finishes without suspending (most
    quick handlers) never needs its deadline, and a timer could not have fired before it
    finished anyway, since it held the loop throughout. One that suspends arms its deadline
    then, at the instant it would have been armed up front, and is awaited on as usual.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    if type(awaitable) is types.CoroutineType:
        try:
            suspended_on = awaitable.send(None)
        except StopIteration as finished:
            return finished.value
        awaitable = _resume(awaitable, suspended_on)
    task = asyncio.current_task()
    assert task is not None
    deadline = _Deadline(task)
    handle = loop.call_at(started + seconds, deadline.expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if deadline.expired and task.uncancel() == 0:
            raise HandlerTimeout from None
        raise
    finally:
        handle.cancel()


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], suspended_on: Any) -> Generator[Any, Any, Any]:
    """Await the rest of ``coro``, already stepped once and suspended on ``suspended_on``.

    ``await coro`` itself (``yield from``), minus the first step: what the task sends or
    throws goes on to ``coro``, what ``coro`` yields goes up to the task.
    """
    yielded = suspended_on
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # the task's cancellation, passed on like any other
            try:
                yielded = coro.throw(exc)
            except StopIteration as finished:
                return finished.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as finished:
                return finished.value
