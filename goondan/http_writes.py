"""One ``send`` per answer: a response's head goes out with the first bytes of its body.

uvicorn writes an answer's head and its body separately, so every answer costs two ``send``
calls, and the client wakes up twice: once for the head, once for the body. On a loopback or
Unix socket the first ``send`` runs the peer's receive path and wakes it, which makes it the
costliest line of the whole request (nginx corks its sockets for the same reason).
:class:`CoalescedWrites` holds a write made while nothing is held, and sends it with the next
one, at once: the head of every JSON answer leaves with its body, a stream's with its first
chunk. Nothing waits longer than the current turn of the event loop: a held write goes out at
its end, or before the connection is closed or half-closed, or when the answer is complete.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HELD_BYTES", "CoalescedWrites"]

HELD_BYTES = 64 * 1024
"""A write this large goes out at once: holding it saves nothing worth its memory, and the
transport's flow control (its high-water mark) sees it as it is written."""


class CoalescedWrites(asyncio.Transport):
    """``transport``, a write held until the next (see the module docstring); ``loop`` sends
    it at the end of its turn.

    Closing, ``write_eof`` and asking for the buffer size see what is held as written: it goes
    out first (or, on :meth:`abort`, is dropped with the rest).
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._flush_scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` with what is held, at once; with nothing held, hold it until the next
        write or the end of this turn of the loop (a large write is never held)."""
        if not data:
            return
        if self._held:
            held, self._held, self._held_bytes = self._held, [], 0
            self._send(b"".join((*held, data)))
            return
        if len(data) >= HELD_BYTES:
            self._send(data)
            return
        self._held.append(bytes(data))
        self._held_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is held now."""
        if not self._held:
            return
        held, self._held, self._held_bytes = self._held, [], 0
        self._send(held[0] if len(held) == 1 else b"".join(held))

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport.is_closing():  # gone: what it was owed goes nowhere, as it would
            return
        self.transport.write(data)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def can_write_eof(self) -> bool:
        return self.transport.can_write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._held, self._held_bytes = [], 0
        self.transport.abort()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.transport.get_protocol()

    def is_reading(self) -> bool:
        return self.transport.is_reading()

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + self._held_bytes

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.transport.get_write_buffer_limits()
