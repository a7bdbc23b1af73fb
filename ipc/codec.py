"""Framing and encoding of IPC messages.

A frame is ``MAGIC (2 bytes) + length (4 bytes, big-endian) + msgpack body``. The decoder is
incremental (feed it whatever the pipe delivered) and never raises: a bad frame becomes an
:class:`IpcProtocolError` naming the reason, and decoding carries on. The magic lets it
resynchronise after garbage: it drops bytes up to the next magic, so only the garbage is lost.
An oversize length is treated the same way (a legitimate sender never writes one, since
:func:`encode` refuses it), so garbage claiming a 4 GB frame cannot swallow the stream.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack
from pydantic import ValidationError

from goondan.defaults import MAX_FRAME_BYTES
from goondan.errors import DeliveryError
from ipc.messages import IpcMessage, parse_message

MAGIC = b"\xc0\xda"
HEADER = struct.Struct("!2sI")
HEADER_SIZE = HEADER.size
__all__ = ["MAX_FRAME_BYTES", "FrameDecoder", "FrameTooLarge", "IpcProtocolError", "encode"]


class FrameTooLarge(DeliveryError, ValueError):
    """The encoded message is over :data:`MAX_FRAME_BYTES`; it was not sent."""

    code = "E_RESULT_TOO_LARGE"


@dataclass(frozen=True, slots=True)
class IpcProtocolError:
    """A rejected frame: why, and the first bytes of what was dropped."""

    reason: str
    """``bad_magic``, ``frame_too_large``, ``undecodable``, ``invalid_message`` or ``truncated``."""
    raw_prefix: bytes
    detail: str = ""


def encode(message: IpcMessage) -> bytes:
    """One frame for ``message``."""
    body: bytes = msgpack.packb(message.to_wire(), use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise FrameTooLarge(f"message is {len(body)} bytes; the limit is {MAX_FRAME_BYTES}")
    return HEADER.pack(MAGIC, len(body)) + body


class FrameDecoder:
    """Turns a byte stream into messages and named rejections."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[IpcMessage | IpcProtocolError]:
        """Everything complete in the stream after appending ``data``."""
        buffer = self._buffer
        buffer += data
        out: list[IpcMessage | IpcProtocolError] = []
        offset = 0
        size = len(buffer)
        while size - offset >= HEADER_SIZE:
            if buffer[offset : offset + 2] != MAGIC:
                offset = self._resync(buffer, offset, "bad_magic", out)
                continue
            _, length = HEADER.unpack_from(buffer, offset)
            if length > self._max:
                out.append(
                    IpcProtocolError(
                        "frame_too_large",
                        bytes(buffer[offset : offset + 64]),
                        f"header claims {length} bytes",
                    )
                )
                offset = self._next_magic(buffer, offset + 2)
                continue
            end = offset + HEADER_SIZE + length
            if end > size:
                break
            out.append(self._decode(bytes(buffer[offset + HEADER_SIZE : end])))
            offset = end
        if offset:
            del buffer[:offset]
        return out

    def eof(self) -> IpcProtocolError | None:
        """Call at end of stream: a leftover partial frame is reported as ``truncated``."""
        if not self._buffer:
            return None
        leftover = bytes(self._buffer[:64])
        self._buffer.clear()
        return IpcProtocolError("truncated", leftover, "stream ended inside a frame")

    def _resync(self, buffer: bytearray, offset: int, reason: str, out: list[Any]) -> int:
        found = self._next_magic(buffer, offset + 1)
        out.append(IpcProtocolError(reason, bytes(buffer[offset : min(found, offset + 64)])))
        return found

    @staticmethod
    def _next_magic(buffer: bytearray, start: int) -> int:
        index = buffer.find(MAGIC, start)
        if index >= 0:
            return index
        # keep a trailing first magic byte: the rest of the magic may arrive next
        return len(buffer) - 1 if buffer.endswith(MAGIC[:1]) else len(buffer)

    @staticmethod
    def _decode(body: bytes) -> IpcMessage | IpcProtocolError:
        try:
            data = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types
            return IpcProtocolError("undecodable", body[:64], f"{type(exc).__name__}: {exc}")
        try:
            return parse_message(data)
        except ValidationError as exc:
            return IpcProtocolError("invalid_message", body[:64], str(exc.errors()[:2]))
