"""Bare baselines for ``benchmarks/ipc.py``: no goondan code on the message path.

(1) a raw ``multiprocessing.Pipe`` round trip between two bare processes, and
(2) a bare asyncio broker relaying A → broker → B → broker → A, both with a ~200-byte msgpack
message encoded and decoded at every end, as in the reference measurements.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import struct
import time
from multiprocessing.connection import Connection
from typing import Any, cast

import msgpack

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
        conn.send_bytes(msgpack.packb(msgpack.unpackb(data)))


def _ping(conn: Connection, count: int, results: Connection) -> None:
    samples = []
    payload = MESSAGE
    for _ in range(count):
        started = time.perf_counter()
        conn.send_bytes(msgpack.packb(payload))
        msgpack.unpackb(conn.recv_bytes())
        samples.append(time.perf_counter() - started)
    results.send(samples)


def raw_pipe_round_trip(count: int) -> list[float]:
    """(1): A ↔ B directly over one pipe; returns per-round-trip seconds."""
    ctx = multiprocessing.get_context("forkserver")
    a_end, b_end = ctx.Pipe()
    result_recv, result_send = ctx.Pipe(duplex=False)
    echo = ctx.Process(target=_echo, args=(b_end,), daemon=True)
    ping = ctx.Process(target=_ping, args=(a_end, count, result_send), daemon=True)
    echo.start()
    ping.start()
    samples: list[float] = result_recv.recv()
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
        self._buffer += data
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from("!i", self._buffer)
            if len(self._buffer) < 4 + length:
                return
            body = bytes(self._buffer[4 : 4 + length])
            del self._buffer[: 4 + length]
            message = msgpack.unpackb(body)  # the broker decodes to route, as a real one must
            out = msgpack.packb(message)
            assert self.peer is not None
            assert self.peer.transport is not None
            self.peer.transport.write(struct.pack("!i", len(out)) + out)


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
        samples.extend(await loop.run_in_executor(None, result_recv.recv))
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
