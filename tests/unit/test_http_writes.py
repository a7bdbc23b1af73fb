"""A response's head goes out with its body's first bytes (goondan.http_writes), over real
sockets: a socket pair under the running loop's own transport, whose writes the test counts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from goondan.http_writes import HELD_BYTES, CoalescedWrites

pytestmark = pytest.mark.timeout(30)


class Counted(asyncio.Protocol):
    """The server side's protocol: nothing to read, only the transport matters."""


class Sends:
    """The loop's real transport of one end of a socket pair, each ``write`` recorded."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []
        self.eof_after: int | None = None
        original_write, original_eof = transport.write, transport.write_eof

        def write(data: Any) -> None:
            self.writes.append(bytes(data))
            original_write(data)

        def write_eof() -> None:
            self.eof_after = len(self.writes)
            original_eof()

        transport.write = write  # type: ignore[method-assign]
        transport.write_eof = write_eof  # type: ignore[method-assign]


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Sends, CoalescedWrites, socket.socket]]:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.settimeout(10)
    transport, _ = await loop.connect_accepted_socket(Counted, ours)
    sends = Sends(transport)
    coalesced = CoalescedWrites(transport, loop)
    yield sends, coalesced, theirs
    transport.abort()
    theirs.close()


async def next_turn() -> None:
    # Two turns: the flush scheduled in this one has run after the next.
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def received(peer: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = peer.recv(size - len(data))
        assert chunk, "closed early"
        data += chunk
    return data


async def test_a_head_leaves_with_the_body_in_one_send_at_once(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, peer = pair
    coalesced.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert sends.writes == []  # held for now, and counted as buffered
    assert coalesced.get_write_buffer_size() == 38
    coalesced.write(memoryview(b"ok"))
    assert sends.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    assert coalesced.get_write_buffer_size() == sends.transport.get_write_buffer_size()
    assert received(peer, 40).endswith(b"\r\n\r\nok")
    await next_turn()
    assert len(sends.writes) == 1


async def test_a_write_alone_leaves_at_the_end_of_the_turn_or_when_flushed(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, peer = pair
    coalesced.write(b"head")
    await next_turn()
    assert sends.writes == [b"head"]
    coalesced.write(b"last chunk")
    coalesced.flush()  # the answer is complete: no waiting for the turn
    assert sends.writes == [b"head", b"last chunk"]
    assert received(peer, 14) == b"headlast chunk"


async def test_a_later_turn_sends_again_so_a_stream_is_never_held_back(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, peer = pair
    coalesced.write(b"head;")
    await next_turn()
    coalesced.write(b"chunk")
    await next_turn()
    assert sends.writes == [b"head;", b"chunk"]
    assert received(peer, 10) == b"head;chunk"


async def test_closing_and_eof_send_what_is_held_first(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, peer = pair
    coalesced.write(b"answer")
    coalesced.write_eof()
    assert sends.writes == [b"answer"]
    assert sends.eof_after == 1
    assert received(peer, 6) == b"answer"
    assert await asyncio.to_thread(peer.recv, 1) == b""  # the end, after the answer


async def test_close_sends_the_held_answer_before_closing(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, peer = pair
    coalesced.write(b"408 answer")
    coalesced.close()
    assert sends.writes == [b"408 answer"]
    assert received(peer, 10) == b"408 answer"
    assert await asyncio.to_thread(peer.recv, 1) == b""
    assert coalesced.is_closing()


async def test_abort_drops_what_is_held(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, _peer = pair
    coalesced.write(b"never sent")
    coalesced.abort()
    await next_turn()
    assert sends.writes == []
    assert coalesced.get_write_buffer_size() == 0


async def test_a_large_write_is_never_held_so_flow_control_still_applies(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, _peer = pair
    coalesced.write(b"x" * HELD_BYTES)
    assert [len(sent) for sent in sends.writes] == [HELD_BYTES]
    coalesced.write(b"head")
    coalesced.write(b"y" * HELD_BYTES)
    assert [len(sent) for sent in sends.writes] == [HELD_BYTES, HELD_BYTES + 4]


async def test_nothing_is_written_to_a_transport_already_closing(
    pair: tuple[Sends, CoalescedWrites, socket.socket],
) -> None:
    sends, coalesced, _peer = pair
    coalesced.write(b"owed")
    sends.transport.close()  # the connection went while the answer was held
    await next_turn()
    assert sends.writes == []
