"""Bare baselines for ``benchmarks/ipc.py``: no goondan code on the message path.

(1) a raw ``multiprocessing.Pipe`` round trip between two bare processes, and
(2) a bare asyncio broker relaying A → broker → B → broker → A, both with a ~200-byte msgpack
message encoded and decoded at every end, as in the reference measurements. Every end uses the
fastest msgpack codec (``msgspec``, the one the runtime uses), so the baselines are the floor of
the design, not of a slower library.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import struct
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import Any, cast

import msgspec

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode
_ANSWER_SECONDS = 30.0  # a lost frame ends the run with an error instead of a hang

MESSAGE: dict[str, Any] = {
    "type": "delegate",
    "from": "coordinator",
    "to": "worker",
    "correlationId": "corr-0123456789abcdef",
    "payload": {
        "target": "worker",
        "input": "summarise the latest build log please",
        "instanceKey": "default",
        "timeoutMs": 60000,
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "callChain": ["coordinator"],
    },
}


def _echo(conn: Connection) -> None:
    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        conn.send_bytes(_encode(_decode(data)))


def _ping(conn: Connection, count: int, results: Connection) -> None:
    samples = []
    payload = MESSAGE
    for _ in range(count):
        started = time.perf_counter()
        conn.send_bytes(_encode(payload))
        if not conn.poll(_ANSWER_SECONDS):
            raise TimeoutError(f"no answer within {_ANSWER_SECONDS} s")
        _decode(conn.recv_bytes())
        samples.append(time.perf_counter() - started)
    results.send(samples)


def _samples_of(ping: multiprocessing.process.BaseProcess, results: Connection) -> list[float]:
    """The pinging child's samples, or an error once it has ended without sending them."""
    while not results.poll(0.5):
        if not ping.is_alive() and not results.poll(0):
            raise RuntimeError(f"the pinging child ended (exit code {ping.exitcode}) unanswered")
    samples: list[float] = results.recv()
    return samples


def raw_pipe_round_trip(count: int) -> list[float]:
    """(1): A ↔ B directly over one pipe; returns per-round-trip seconds."""
    ctx = multiprocessing.get_context("forkserver")
    a_end, b_end = ctx.Pipe()
    result_recv, result_send = ctx.Pipe(duplex=False)
    echo = ctx.Process(target=_echo, args=(b_end,), daemon=True)
    ping = ctx.Process(target=_ping, args=(a_end, count, result_send), daemon=True)
    echo.start()
    ping.start()
    samples = _samples_of(ping, result_recv)
    ping.join()
    echo.kill()
    echo.join()
    return samples


class _Relay(asyncio.Protocol):
    """Length-prefixed frames (multiprocessing's ``!i`` header), forwarded to a peer."""

    def __init__(self) -> None:
        self.peer: _Relay | None = None
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            # The pinging child starts before the broker has linked both ends; hold its first
            # frame until ``link`` flushes it.
            self._buffer += data
            return
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
        write = self.peer.transport.write
        offset, size = 0, len(data)
        with memoryview(data) as view:
            while size - offset >= 4:
                (length,) = struct.unpack_from("!i", data, offset)
                end = offset + 4 + length
                if end > size:
                    break
                message = _decode(view[offset + 4 : end])  # the broker decodes to route
                out = _encode(message)
                write(struct.pack("!i", len(out)) + out)
                offset = end
        if offset < size:
            self._buffer += data[offset:]


async def _broker(a_conn: Connection, b_conn: Connection, done: asyncio.Event) -> None:
    import socket

    loop = asyncio.get_running_loop()
    relays = []
    for conn in (a_conn, b_conn):
        sock = socket.socket(fileno=conn.fileno())
        conn._handle = None  # type: ignore[attr-defined]  # the socket owns the fd now
        _, relay = await loop.connect_accepted_socket(_Relay, sock)
        relays.append(relay)
    relays[0].peer, relays[1].peer = relays[1], relays[0]
    for relay in relays:
        if relay._buffer:
            relay.data_received(b"")
    await done.wait()


def broker_round_trip(count: int, use_uvloop: bool) -> list[float]:
    """(2): A → broker → B → broker → A; the broker runs in this process."""
    ctx = multiprocessing.get_context("forkserver")
    a_broker, a_end = ctx.Pipe()
    b_broker, b_end = ctx.Pipe()
    result_recv, result_send = ctx.Pipe(duplex=False)
    echo = ctx.Process(target=_echo, args=(b_end,), daemon=True)
    ping = ctx.Process(target=_ping, args=(a_end, count, result_send), daemon=True)
    echo.start()
    ping.start()
    samples: list[float] = []

    async def main() -> None:
        done = asyncio.Event()
        server = asyncio.ensure_future(_broker(a_broker, b_broker, done))
        loop = asyncio.get_running_loop()
        samples.extend(await loop.run_in_executor(None, _samples_of, ping, result_recv))
        done.set()
        await server

    if use_uvloop:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
    ping.join()
    echo.kill()
    echo.join()
    return samples


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and p99 in microseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e6, p99 * 1e6


class _Caller(asyncio.Protocol):
    """The bare broker's end of one echo child: frames in, futures resolved by id."""

    def __init__(self, waiting: dict[str, asyncio.Future[None]]) -> None:
        self.waiting = waiting
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, message: dict[str, Any]) -> None:
        assert self.transport is not None
        out = _encode(message)
        self.transport.write(struct.pack("!i", len(out)) + out)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        offset, size = 0, len(self._buffer)
        while size - offset >= 4:
            (length,) = struct.unpack_from("!i", self._buffer, offset)
            end = offset + 4 + length
            if end > size:
                break
            message = _decode(bytes(self._buffer[offset + 4 : end]))
            self.waiting.pop(message["correlationId"]).set_result(None)
            offset = end
        del self._buffer[:offset]


def broker_throughput(agents: int, callers: int, seconds: float) -> float:
    """Requests answered per second by a bare uvloop broker: ``callers`` concurrent loops, each
    sending the same message as the delegate benchmark to one of ``agents`` echo children and
    waiting for its answer."""
    import socket

    import uvloop

    ctx = multiprocessing.get_context("forkserver")
    ends = [ctx.Pipe() for _ in range(agents)]
    children = [ctx.Process(target=_echo, args=(child,), daemon=True) for _, child in ends]
    for child in children:
        child.start()
    rate = 0.0

    async def main() -> None:
        nonlocal rate
        loop = asyncio.get_running_loop()
        waiting: dict[str, asyncio.Future[None]] = {}
        links: list[_Caller] = []
        for ours, _ in ends:
            sock = socket.socket(fileno=ours.fileno())
            ours._handle = None  # type: ignore[attr-defined]  # the socket owns the fd now
            _, link = await loop.connect_accepted_socket(lambda: _Caller(waiting), sock)
            links.append(link)

        def ask(index: int, sent: int) -> asyncio.Future[None]:
            correlation_id = f"c{index}-{sent}"
            reply = loop.create_future()
            waiting[correlation_id] = reply
            links[(index + sent) % agents].send({**MESSAGE, "correlationId": correlation_id})
            return reply

        rate = await answers_per_second(ask, callers, seconds)

    uvloop.run(main())
    for child in children:
        child.kill()
        child.join()
    return rate


async def answers_per_second(
    ask: Callable[[int, int], Awaitable[object]], callers: int, seconds: float
) -> float:
    """Answers per second of ``callers`` concurrent loops, each awaiting ``ask(caller, n)`` for
    n = 1, 2, ...; counted over ``seconds`` after half a second of warm-up."""
    answered = 0
    running = True

    async def caller(index: int) -> None:
        nonlocal answered
        sent = 0
        while running:
            sent += 1
            await ask(index, sent)
            answered += 1

    tasks = [asyncio.ensure_future(caller(i)) for i in range(callers)]
    await asyncio.sleep(0.5)  # warm-up
    answered = 0
    await asyncio.sleep(seconds)
    counted = answered
    running = False
    await asyncio.gather(*tasks)
    return counted / seconds


def fsync_append_us(directory: str, count: int, size: int = 1024) -> list[float]:
    """Append ``size`` bytes to a file and fsync it, ``count`` times (a fold's disk floor)."""
    import os

    path = os.path.join(directory, "fsync-floor.jsonl")
    data = b"x" * (size - 1) + b"\n"
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, data)
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return samples
