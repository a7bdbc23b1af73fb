"""Forcing journal lines to disk for many waiters at once (group commit).

Each accepted request's line must be on the disk before the request is answered ``202`` or
its Turn starts. A thread hop and an ``fdatasync`` per request cost the daemon's loop more
than the rest of the request's admission; and while one sync runs, the lines appended
meanwhile can all be covered by the next one. :class:`GroupSync` keeps one thread that
takes every waiter queued since its last sync, syncs each file they wrote to once, and
answers them all: under load, one sync serves many requests; alone, a request waits for its
own sync as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class _Waiter:
    fd: int
    """A duplicate descriptor of the file to force (the waiter's to close)."""
    key: object
    """Which file: waiters with the same key share one sync."""
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


class GroupSync:
    """``fdatasync`` on a thread of its own, one per file for all who wait at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: list[_Waiter] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    async def sync(self, fd: int, key: object) -> None:
        """Return once the file behind ``fd`` is forced to disk, with every write made to it
        before this call; raises ``OSError`` when it could not be. ``fd`` is a duplicate this
        takes and closes; ``key`` names its file (a segment's number)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(fd, key, loop.create_future(), loop)
        waiter.future.add_done_callback(_retrieved)
        with self._lock:
            if self._closed:
                os.close(fd)
                raise OSError("the request journal is closed")
            self._waiting.append(waiter)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="goondan-journal-sync", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        # Shielded: a caller that gives up does not stop the sync its line is part of.
        await asyncio.shield(waiter.future)

    def close(self) -> None:
        """Stop the thread once the waiters queued are answered."""
        with self._lock:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if not self._waiting:
                    return
                batch, self._waiting = self._waiting, []
            outcomes: dict[object, OSError | None] = {}
            for waiter in batch:
                if waiter.key not in outcomes:
                    try:
                        os.fdatasync(waiter.fd)
                        outcomes[waiter.key] = None
                    except OSError as exc:
                        outcomes[waiter.key] = exc
                os.close(waiter.fd)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Waiter, OSError | None]]] = {}
            for waiter in batch:
                by_loop.setdefault(waiter.loop, []).append((waiter, outcomes[waiter.key]))
            for loop, settled in by_loop.items():
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[_Waiter, OSError | None]]) -> None:
    for waiter, error in settled:
        if waiter.future.done():
            continue
        if error is None:
            waiter.future.set_result(None)
        else:
            waiter.future.set_exception(error)


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a failure as seen: its caller may have given up waiting for it."""
    if not future.cancelled():
        future.exception()
