"""A NATS subject used as a byte stream of IPC frames, in one direction.

One publisher writes a subject, one subscriber reads it, and NATS keeps the order of one
publisher's messages on one subject: the subject carries the same byte stream as the pipe it
stands in for. Frames stay exactly as :mod:`ipc.codec` makes them (magic, length, msgpack
body), so the reader feeds what arrives to an ordinary :class:`~ipc.codec.FrameDecoder`.

Because the stream is bytes, a frame larger than the server's ``max_payload`` (1 MiB by
default) simply spans several messages: nothing is refused or truncated short of
:data:`~goondan.defaults.MAX_FRAME_BYTES`, the limit of every pipe. A message lost in transit
(the connection broke) loses the frames it carried; the decoder resynchronises at the next
frame, and the request they belonged to ends at its timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

EXIT_HEADER = "Goondan-Exit"
"""On the last message of an agent's ``out`` subject: the exit code of its process."""


class Outbox:
    """Publishes bytes to one subject in order; everything written in one pass of the event
    loop leaves together, in as few messages as the server's ``max_payload`` allows."""

    def __init__(self, nc: Any, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self._unwritten: list[bytes] = []
        self._in_order = asyncio.Lock()
        self._failed = False
        self.log = structlog.get_logger("goondan.cluster").bind(subject=subject)

    def write(self, data: bytes) -> None:
        """Queue ``data`` (never blocks)."""
        if not self._unwritten:
            self._publish_soon()
        self._unwritten.append(data)

    def finish(self, headers: dict[str, str]) -> None:
        """After everything queued, one empty message carrying ``headers`` (an exit notice)."""
        task = asyncio.ensure_future(self._publish_unwritten(headers))
        task.add_done_callback(self._published)

    def _publish_soon(self) -> None:
        # The task's first step runs after this pass of the loop, when whatever else the
        # pass writes is queued too.
        task = asyncio.ensure_future(self._publish_unwritten())
        task.add_done_callback(self._published)

    async def _publish_unwritten(self, headers: dict[str, str] | None = None) -> None:
        # A publish may wait (the client's buffer is full) after queueing its message: the
        # lock keeps the next batch from slipping in between the pieces of a large frame.
        async with self._in_order:
            if self._unwritten:
                data = b"".join(self._unwritten)
                self._unwritten.clear()
                limit = max(1024, int(self.nc.max_payload))
                for start in range(0, len(data), limit):
                    await self.nc.publish(self.subject, data[start : start + limit])
            if headers is not None:
                await self.nc.publish(self.subject, b"", headers=headers)

    def _published(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not self._failed:
            self._failed = True  # said once: the membership heartbeats tell the rest
            self.log.warning("frames not published", error=f"{type(exc).__name__}: {exc}")
