"""Joining a cluster can wait indefinitely (a standby for its leader, a node for the bucket a
leader makes); a stop asked meanwhile must end that wait at once, not after it.

``systemctl stop`` sends SIGTERM and SIGKILLs after ``TimeoutStopSec``: a member that only
looks at its stop once it has joined hangs the whole time, and a standby would even take the
cluster over when its leader stops, just to stop right after.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def unless_stopped(joining: Coroutine[Any, Any, None], stopped: asyncio.Event) -> bool:
    """Await ``joining`` unless ``stopped`` is set first: ``True`` once it finished, ``False``
    when the stop came first (``joining`` is then cancelled and awaited, so whatever it
    opened is closed by its own cleanup). Its errors are raised as they are."""
    task = asyncio.ensure_future(joining)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we are cancelled ourselves: so is the join, cleaned up first
        task.cancel()
        await asyncio.wait({task})
        raise
    finally:
        stop.cancel()
    if task in done:
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task  # its cleanup runs; an error it met meanwhile is raised
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise asyncio.CancelledError  # cancelled while the join cleaned up: do not swallow it
    return False
