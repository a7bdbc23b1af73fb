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

import msgspec

from goondan.defaults import MAX_FRAME_BYTES
from goondan.errors import DeliveryCode, DeliveryError
from ipc.messages import MESSAGE_DECODER, MESSAGE_ENCODER, IpcMessage

MAGIC = b"\xc0\xda"
HEADER = struct.Struct("!2sI")
HEADER_SIZE = HEADER.size
__all__ = [
    "MAX_FRAME_BYTES",
    "FrameDecoder",
    "FrameTooLarge",
    "IpcProtocolError",
    "Unencodable",
    "encode",
]


class FrameTooLarge(DeliveryError, ValueError):
    """The encoded message is over :data:`MAX_FRAME_BYTES`; it was not sent."""

    code = DeliveryCode.E_RESULT_TOO_LARGE


@dataclass(frozen=True, slots=True)
class IpcProtocolError:
    """A rejected frame: why, and the first bytes of what was dropped."""

    reason: str
    """``bad_magic``, ``frame_too_large``, ``undecodable``, ``invalid_message`` or ``truncated``."""
    raw_prefix: bytes
    detail: str = ""


class Unencodable(DeliveryError, ValueError):
    """The message holds a value msgpack cannot carry (a string with a lone surrogate, an
    integer outside 64 bits, nesting past the encoder's stack); it was not sent. The peer is
    as well as before: this is the message's fault, never a sign that the peer died."""

    code = DeliveryCode.IPC_MALFORMED_PAYLOAD


def encode(message: IpcMessage) -> bytes:
    """One frame for ``message``; raises :class:`Unencodable` or :class:`FrameTooLarge`."""
    frame = bytearray(HEADER_SIZE)
    try:
        MESSAGE_ENCODER.encode_into(message, frame, HEADER_SIZE)
    except (msgspec.EncodeError, ValueError, OverflowError, RecursionError, TypeError) as exc:
        raise Unencodable(f"the message cannot be encoded: {exc}") from None
    length = len(frame) - HEADER_SIZE
    if length > MAX_FRAME_BYTES:
        raise FrameTooLarge(f"message is {length} bytes; the limit is {MAX_FRAME_BYTES}")
    HEADER.pack_into(frame, 0, MAGIC, length)
    return bytes(frame)


class FrameDecoder:
    """Turns a byte stream into messages and named rejections."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes) -> list[IpcMessage | IpcProtocolError]:
        """Everything complete in the stream after appending ``data``."""
        if self._buffer:
            self._buffer += data
            out, used = self._frames(self._buffer)
            del self._buffer[:used]
            return out
        # Nothing held back (the usual case: a read ends on a frame boundary): decode straight
        # from what the pipe delivered and keep only an incomplete tail.
        out, used = self._frames(data)
        if used < len(data):
            self._buffer += memoryview(data)[used:]
        return out

    def _frames(self, buffer: bytes | bytearray) -> tuple[list[IpcMessage | IpcProtocolError], int]:
        """The complete frames at the start of ``buffer``, and how many bytes they took."""
        out: list[IpcMessage | IpcProtocolError] = []
        offset = 0
        size = len(buffer)
        with memoryview(buffer) as view:
            while size - offset >= HEADER_SIZE:
                magic, length = HEADER.unpack_from(buffer, offset)
                if magic != MAGIC:
                    offset = self._resync(buffer, offset, "bad_magic", out)
                    continue
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
                out.append(self._decode(view[offset + HEADER_SIZE : end]))
                offset = end
        return out, offset

    def eof(self) -> IpcProtocolError | None:
        """Call at end of stream: a leftover partial frame is reported as ``truncated``."""
        if not self._buffer:
            return None
        leftover = bytes(self._buffer[:64])
        self._buffer.clear()
        return IpcProtocolError("truncated", leftover, "stream ended inside a frame")

    def _resync(self, buffer: bytes | bytearray, offset: int, reason: str, out: list[Any]) -> int:
        found = self._next_magic(buffer, offset + 1)
        out.append(IpcProtocolError(reason, bytes(buffer[offset : min(found, offset + 64)])))
        return found

    @staticmethod
    def _next_magic(buffer: bytes | bytearray, start: int) -> int:
        index = buffer.find(MAGIC, start)
        if index >= 0:
            return index
        # keep a trailing first magic byte: the rest of the magic may arrive next
        return len(buffer) - 1 if buffer.endswith(MAGIC[:1]) else len(buffer)

    @staticmethod
    def _decode(body: memoryview) -> IpcMessage | IpcProtocolError:
        try:
            return MESSAGE_DECODER.decode(body)
        except msgspec.ValidationError as exc:
            return IpcProtocolError("invalid_message", bytes(body[:64]), str(exc))
        except Exception as exc:  # msgspec.DecodeError, and anything else bad bytes provoke
            return IpcProtocolError("undecodable", bytes(body[:64]), f"{type(exc).__name__}: {exc}")
