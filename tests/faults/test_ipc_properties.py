"""Property tests of the wire: random messages round-trip, random bytes never break a reader.

The channel cases write raw bytes into one end of a real ``multiprocessing`` pipe and read
the other end with :class:`ipc.Channel`, as an AgentProcess or the Orchestrator would.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipc import (
    Channel,
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    FrameDecoder,
    IpcMessage,
    IpcProtocolError,
    ShutdownMessage,
    encode,
)
from ipc.codec import MAGIC

pytestmark = pytest.mark.timeout(120)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE_TYPES = (DelegateMessage, DelegateResultMessage, EventMessage, ShutdownMessage)
payloads = st.dictionaries(st.text(max_size=10), json_values, max_size=5)


@st.composite
def messages(draw: st.DrawFn) -> IpcMessage:
    kind = draw(st.sampled_from(["delegate", "delegate_result", "event", "shutdown"]))
    sender, to, payload = draw(names), draw(names), draw(payloads)
    correlation = draw(names)
    if kind == "delegate":
        return DelegateMessage(sender=sender, to=to, correlation_id=correlation, payload=payload)
    if kind == "delegate_result":
        return DelegateResultMessage(
            sender=sender, to=to, correlation_id=correlation, payload=payload
        )
    if kind == "event":
        return EventMessage(sender=sender, to=to, payload={**payload, "kind": draw(names)})
    return ShutdownMessage(sender=sender, to=to, payload=payload)


# garbage that cannot begin a frame: no first magic byte, so it never swallows a real frame
clean_garbage = st.binary(max_size=64).map(lambda b: b.replace(MAGIC[:1], b""))


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


@settings(max_examples=150, deadline=None)
@given(st.lists(messages(), max_size=8), st.lists(st.integers(min_value=0), max_size=20))
def test_messages_round_trip_in_any_chunking(batch: list[IpcMessage], cuts: list[int]) -> None:
    data = b"".join(encode(m) for m in batch)
    decoder = FrameDecoder()
    out: list[Any] = []
    for chunk in chunked(data, cuts):
        out.extend(decoder.feed(chunk))
    assert decoder.eof() is None
    assert out == batch


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(clean_garbage, messages()), max_size=6),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_every_frame_after_garbage_is_recovered_in_order(
    pairs: list[tuple[bytes, IpcMessage]], cuts: list[int]
) -> None:
    data = b"".join(garbage + encode(message) for garbage, message in pairs)
    decoder = FrameDecoder()
    out: list[Any] = []
    for chunk in chunked(data, cuts):
        out.extend(decoder.feed(chunk))
    tail = decoder.eof()
    assert tail is None or isinstance(tail, IpcProtocolError)
    assert [o for o in out if not isinstance(o, IpcProtocolError)] == [m for _, m in pairs]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512), st.lists(st.integers(min_value=0), max_size=10))
def test_any_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder()
    for chunk in chunked(MAGIC + data, cuts):
        for item in decoder.feed(chunk):
            assert isinstance(item, (*MESSAGE_TYPES, IpcProtocolError))
    decoder.eof()


async def _through_a_pipe(data: bytes) -> tuple[list[IpcMessage], Channel]:
    reader_end, writer_end = multiprocessing.Pipe()
    received: list[IpcMessage] = []
    closed = asyncio.Event()
    channel = await Channel.open(
        reader_end, "peer", on_message=received.append, on_close=closed.set
    )
    writer = socket.socket(fileno=os.dup(writer_end.fileno()))
    writer_end.close()
    writer.sendall(data)
    writer.close()  # the peer goes away: the channel must end, not hang
    async with asyncio.timeout(10):
        await closed.wait()
        await channel.wait_closed()
    return received, channel


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(clean_garbage, messages()), max_size=6))
def test_a_channel_delivers_every_valid_frame_and_survives_garbage(
    pairs: list[tuple[bytes, IpcMessage]],
) -> None:
    data = b"".join(garbage + encode(message) for garbage, message in pairs)
    received, channel = asyncio.run(_through_a_pipe(data))
    assert received == [m for _, m in pairs]
    dropped = sum(channel.statistics().dropped.values())
    assert dropped <= sum(1 for garbage, _ in pairs if garbage)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_a_channel_fed_random_bytes_never_raises_and_ends_cleanly(data: bytes) -> None:
    received, _ = asyncio.run(_through_a_pipe(MAGIC + data))
    assert all(isinstance(m, MESSAGE_TYPES) for m in received)
