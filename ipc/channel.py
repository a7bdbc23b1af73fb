"""An asyncio channel over one end of a ``multiprocessing.Pipe()``.

The pipe's socket is wrapped in an asyncio transport: writes are buffered and never block the
loop (a slow reader only grows the buffer, and :meth:`Channel.send` waits for it to drain),
reads are fed to an incremental :class:`~ipc.codec.FrameDecoder`. Frames sent during one pass
of the event loop leave in one write when the pass ends (or at :meth:`Channel.write_now`): a
Turn sends several events at once (a step's end, a tool call, a status change), and each write
would wake the peer. Malformed frames are logged
with the peer's name and dropped; nothing a peer writes can raise past the channel.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

import structlog

from goondan.errors import DeliveryError
from ipc.codec import FrameDecoder, IpcProtocolError, encode
from ipc.messages import IpcMessage

FLUSH_SECONDS = 2.0
"""How long :meth:`Channel.flush` waits for a peer that stopped reading."""


class ChannelClosed(DeliveryError):
    """We closed this channel."""


class PeerGone(DeliveryError):
    """The peer closed the pipe or died; ``__cause__`` holds the OS error, if any."""


@dataclass(frozen=True, slots=True)
class ChannelStatistics:
    """Counters of one channel."""

    frames_in: int
    frames_out: int
    bytes_in: int
    bytes_out: int
    dropped: dict[str, int]


_EOF = object()


class _Protocol(asyncio.Protocol):
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.channel._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.channel._on_data(data)

    def eof_received(self) -> bool | None:
        self.channel._on_eof(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.channel._on_eof(exc)
        self.channel._lost.set()

    def pause_writing(self) -> None:
        self.channel._can_write.clear()

    def resume_writing(self) -> None:
        self.channel._can_write.set()


class Channel:
    """Send and receive :class:`~ipc.messages.IpcMessage` s over a pipe."""

    def __init__(
        self,
        peer_name: str,
        logger: Any = None,
        on_message: Callable[[IpcMessage], None] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.peer_name = peer_name
        self._on_message = on_message
        self._on_close = on_close
        self._log = (logger or structlog.get_logger("goondan.ipc")).bind(peer=peer_name)
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._lost = asyncio.Event()
        self._closed = False
        self._gone: BaseException | None = None
        self._peer_gone = False
        self._frames_in = self._frames_out = self._bytes_in = self._bytes_out = 0
        self._dropped: Counter[str] = Counter()
        self._unwritten: list[bytes] = []
        """Frames sent during this pass of the loop, written together when it ends."""

    @classmethod
    async def open(
        cls,
        conn: Connection,
        peer_name: str,
        *,
        logger: Any = None,
        on_message: Callable[[IpcMessage], None] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> Channel:
        """Wrap ``conn`` (which is closed: the channel owns a duplicate of its socket).

        With ``on_message``, each message is handed to it as soon as it is decoded, on the
        loop, without a queue or a task switch (the Orchestrator's routing path); otherwise
        messages wait for :meth:`receive`. ``on_close`` is called once when the peer closes
        the pipe or the connection breaks.
        """
        channel = cls(peer_name, logger, on_message, on_close)
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        conn.close()
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: _Protocol(channel), sock)
        return channel

    # -- sending ---------------------------------------------------------------------------

    def send_nowait(self, message: IpcMessage) -> None:
        """Queue ``message`` for writing; never blocks."""
        if self._closed:
            raise ChannelClosed(f"channel to {self.peer_name} is closed")
        transport = self._transport
        if self._peer_gone or transport is None or transport.is_closing():
            raise PeerGone(f"{self.peer_name} is gone") from self._gone
        frame = encode(message)
        if not self._unwritten:
            asyncio.get_running_loop().call_soon(self._write_unwritten)
        self._unwritten.append(frame)
        self._frames_out += 1
        self._bytes_out += len(frame)

    def write_now(self) -> None:
        """Write the frames sent so far now instead of when this pass of the loop ends: before
        something that may block the loop or end the process (a tool call), so that what was
        said before it is not lost."""
        self._write_unwritten()

    def _write_unwritten(self) -> None:
        if not self._unwritten:
            return
        frames, self._unwritten = self._unwritten, []
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    async def send(self, message: IpcMessage) -> None:
        """Queue ``message``, then wait while the peer is too slow to take more."""
        self.send_nowait(message)
        if not self._can_write.is_set():
            await self._can_write.wait()

    async def flush(self) -> None:
        """Wait until every queued frame is handed to the OS (or the peer is gone, or
        :data:`FLUSH_SECONDS` passed): what a process says right before it exits must not be
        lost."""
        self._write_unwritten()
        transport = self._transport
        if transport is None or transport.is_closing() or self._peer_gone:
            return
        if transport.get_write_buffer_size() == 0:
            return
        low, high = transport.get_write_buffer_limits()
        # With both limits at 0 the transport pauses us now and resumes us once its buffer is
        # empty: a wake-up at exactly "all written", with no polling.
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            async with asyncio.timeout(FLUSH_SECONDS):
                while transport.get_write_buffer_size() and not self._peer_gone:
                    await self._can_write.wait()
        except TimeoutError:
            unwritten = transport.get_write_buffer_size()
            self._log.warning("frames still unwritten at exit", bytes=unwritten)
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    # -- receiving -------------------------------------------------------------------------

    async def receive(self) -> IpcMessage:
        """The next message; raises :class:`PeerGone` at end of stream."""
        if self._closed and self._inbox.empty():
            raise ChannelClosed(f"channel to {self.peer_name} is closed")
        item = await self._inbox.get()
        if item is _EOF:
            self._inbox.put_nowait(_EOF)  # every later receive() sees the end too
            raise PeerGone(f"{self.peer_name} closed the pipe") from self._gone
        return cast(IpcMessage, item)

    def __aiter__(self) -> AsyncIterator[IpcMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[IpcMessage]:
        while True:
            try:
                yield await self.receive()
            except (PeerGone, ChannelClosed):
                return

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close our end; the peer sees end of stream."""
        if self._closed:
            return
        self._write_unwritten()
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        self._inbox.put_nowait(_EOF)

    async def wait_closed(self) -> None:
        """Wait until the underlying socket is closed (after :meth:`close` or peer loss)."""
        if self._transport is not None:
            await self._lost.wait()

    @property
    def closed(self) -> bool:
        """Whether either side ended the channel."""
        return self._closed or self._peer_gone

    def statistics(self) -> ChannelStatistics:
        """Frames and bytes in and out, and dropped frames by reason."""
        return ChannelStatistics(
            frames_in=self._frames_in,
            frames_out=self._frames_out,
            bytes_in=self._bytes_in,
            bytes_out=self._bytes_out,
            dropped=dict(self._dropped),
        )

    # -- protocol callbacks ----------------------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        self._bytes_in += len(data)
        for item in self._decoder.feed(data):
            if isinstance(item, IpcProtocolError):
                self._drop(item)
            else:
                self._frames_in += 1
                if self._on_message is None:
                    self._inbox.put_nowait(item)
                    continue
                try:
                    self._on_message(item)
                except Exception:  # a handler bug must not break the stream
                    self._log.exception("message handler failed", type=item.type)

    def _on_eof(self, exc: Exception | None) -> None:
        if self._peer_gone:
            return
        self._peer_gone = True
        self._gone = exc
        leftover = self._decoder.eof()
        if leftover is not None:
            self._drop(leftover)
        self._can_write.set()
        self._inbox.put_nowait(_EOF)
        if self._on_close is not None and not self._closed:
            try:
                self._on_close()
            except Exception:
                self._log.exception("close handler failed")

    def _drop(self, error: IpcProtocolError) -> None:
        self._dropped[error.reason] += 1
        self._log.warning(
            "dropped malformed ipc frame",
            reason=error.reason,
            detail=error.detail[:200],
            raw_prefix=error.raw_prefix.hex(),
        )
