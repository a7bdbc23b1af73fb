"""Channels over real pipes to real child processes."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvloop
from structlog.testing import capture_logs

from ipc import Channel, ChannelClosed, EventMessage, PeerGone
from tests.support import echo_child


def message(kind: str, **fields: object) -> EventMessage:
    """A test event of any kind (the channel does not read payloads)."""
    return EventMessage(sender="parent", to="child", payload={"kind": kind, **fields})


CONTEXT = multiprocessing.get_context("forkserver")


async def start(target: Callable[..., None]) -> tuple[Channel, Any]:
    parent, child = CONTEXT.Pipe()
    process = CONTEXT.Process(target=target, args=(child,), daemon=True)
    process.start()
    child.close()
    return await Channel.open(parent, "child"), process


@pytest.fixture
async def echo() -> AsyncIterator[tuple[Channel, Any]]:
    channel, process = await start(echo_child.echo)
    yield channel, process
    await stop(channel, process)


async def stop(channel: Channel, process: Any) -> None:
    channel.close()
    async with asyncio.timeout(10):
        await channel.wait_closed()
    await asyncio.to_thread(process.join, 5)
    if process.is_alive():
        process.kill()
        process.join()


async def test_round_trip(echo: tuple[Channel, Any]) -> None:
    channel, _ = echo
    await channel.send(message("ping", n=1))
    async with asyncio.timeout(10):
        reply = await channel.receive()
    assert reply.payload == {"kind": "ping", "n": 1}


async def test_a_thousand_messages_in_flight(echo: tuple[Channel, Any]) -> None:
    channel, _ = echo
    for n in range(1000):
        channel.send_nowait(message("n", n=n))
    async with asyncio.timeout(20):
        got = [(await channel.receive()).payload["n"] for _ in range(1000)]
    assert got == list(range(1000))
    stats = channel.statistics()
    assert (stats.frames_out, stats.frames_in, stats.dropped) == (1000, 1000, {})


async def test_a_dead_peer_ends_the_channel_promptly(echo: tuple[Channel, Any]) -> None:
    channel, process = echo
    await channel.send(message("die"))
    async with asyncio.timeout(10):
        with pytest.raises(PeerGone):
            await channel.receive()
        received = [m async for m in channel]
    assert received == []
    process.join(timeout=5)
    assert process.exitcode == 1
    with pytest.raises(PeerGone):
        channel.send_nowait(message("late"))


async def test_garbage_from_the_peer_is_logged_and_dropped() -> None:
    channel, process = await start(echo_child.garbage_then_echo)
    try:
        with capture_logs() as logs:
            await channel.send(message("after"))
            async with asyncio.timeout(10):
                reply = await channel.receive()
        assert reply.payload["kind"] == "after"
        assert channel.statistics().dropped.get("bad_magic", 0) >= 1
        dropped = [e for e in logs if e["event"] == "dropped malformed ipc frame"]
        assert dropped
        assert dropped[0]["peer"] == "child"
    finally:
        await stop(channel, process)


async def test_closing_our_side(echo: tuple[Channel, Any]) -> None:
    channel, process = echo
    channel.close()
    with pytest.raises(ChannelClosed):
        channel.send_nowait(message("x"))
    async with asyncio.timeout(10):
        await channel.wait_closed()
    await asyncio.to_thread(process.join, 10)
    assert process.exitcode == 0  # the child saw end of stream and finished


async def test_a_slow_reader_does_not_block_the_sender(echo: tuple[Channel, Any]) -> None:
    channel, _ = echo
    await channel.send(message("hold", seconds=0.3))
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(ticker())
    blob = "x" * 4096
    for n in range(2000):  # ~8 MB: far more than the pipe buffers while the child holds
        channel.send_nowait(message("n", n=n, blob=blob))
    await asyncio.sleep(0)
    assert ticks > 0
    async with asyncio.timeout(30):
        first = await channel.receive()
        got = [(await channel.receive()).payload["n"] for _ in range(2000)]
    stop.set()
    await task
    assert first.payload["kind"] == "hold"
    assert got == list(range(2000))


def test_round_trips_and_peer_death_under_uvloop() -> None:
    """The daemon runs on uvloop: its transports must behave the same."""

    async def scenario() -> None:
        channel, process = await start(echo_child.echo)
        for n in range(200):
            channel.send_nowait(message("n", n=n))
        async with asyncio.timeout(10):
            got = [(await channel.receive()).payload["n"] for _ in range(200)]
        assert got == list(range(200))
        await channel.send(message("die"))
        async with asyncio.timeout(10):
            with pytest.raises(PeerGone):
                await channel.receive()
        process.join(timeout=5)
        assert process.exitcode == 1

    uvloop.run(scenario())


async def _open_with_raw_peer() -> tuple[Channel, Any]:
    """A channel whose peer end is a plain non-blocking socket, read by the test itself."""
    import os
    import socket

    ours, theirs = CONTEXT.Pipe()
    peer = socket.socket(fileno=os.dup(theirs.fileno()))
    theirs.close()
    peer.setblocking(False)
    return await Channel.open(ours, "peer"), peer


def _frames_readable(peer: Any) -> int:
    from ipc import FrameDecoder

    try:
        data = peer.recv(1 << 16)
    except BlockingIOError:
        return 0
    return len(FrameDecoder().feed(data))


async def test_frames_sent_in_one_pass_of_the_loop_leave_together_in_order() -> None:
    channel, peer = await _open_with_raw_peer()
    try:
        for n in range(3):
            channel.send_nowait(message("burst", n=n))
        assert _frames_readable(peer) == 0  # still ours until the pass ends
        async with asyncio.timeout(5):
            while not (data := await asyncio.get_running_loop().sock_recv(peer, 1 << 16)):
                pass
        from ipc import FrameDecoder

        received = FrameDecoder().feed(data)  # one read holds the whole burst
        assert [m.payload["n"] for m in received] == [0, 1, 2]  # type: ignore[union-attr]
    finally:
        channel.close()
        peer.close()


async def test_write_now_hands_the_frames_to_the_os_before_the_loop_goes_on() -> None:
    channel, peer = await _open_with_raw_peer()
    try:
        channel.send_nowait(message("started"))
        channel.write_now()  # what a tool that blocks the loop or ends the process relies on
        assert _frames_readable(peer) == 1
    finally:
        channel.close()
        peer.close()
