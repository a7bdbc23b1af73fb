"""A Chat Completions endpoint for ``benchmarks/permits.py``, in a process of its own.

It answers every ``POST .../chat/completions`` with the same assistant message (the shape of
``tests.support.wire_server.openai_completion``, usage included) on a keep-alive HTTP/1.1
connection, as a provider would. A request whose ``model`` is ``wait-<ms>`` is answered after
that many milliseconds, standing for a model's time; any other model is answered at once.

``GET /stats`` answers, since the last ``GET /stats`` (then counts again): ``requests``;
``maxInFlight``, how many calls overlapped at most, as the server saw them; ``idleGapMedianMs``,
the median time from an answer that left no call in flight to the arrival of the next call
(under a pool of ``maxConcurrent: 1``, the handover from one agent's call to the next's).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from multiprocessing.connection import Connection
from typing import cast

import uvloop

from tests.support.wire_server import openai_completion

ANSWER = json.dumps(openai_completion({"content": "ok"})).encode()
WAIT_PREFIX = "wait-"


class Stats:
    """Calls in flight now, and counts since the last read."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.idle_since: float | None = None
        """When the last call in flight was answered (``None``: one is in flight)."""
        self.gaps: list[float] = []
        """Seconds from an answer that left nothing in flight to the next call's arrival."""

    def began(self) -> None:
        if self.in_flight == 0 and self.idle_since is not None:
            self.gaps.append(time.perf_counter() - self.idle_since)
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle_since = time.perf_counter()

    def read(self) -> bytes:
        gaps = sorted(self.gaps)
        data = {
            "requests": self.requests,
            "maxInFlight": self.max_in_flight,
            "idleGapMedianMs": gaps[len(gaps) // 2] * 1000 if gaps else None,
        }
        self.requests = 0
        self.max_in_flight = self.in_flight
        self.idle_since = None
        self.gaps = []
        return json.dumps(data).encode()


class HttpConnection(asyncio.Protocol):
    """One connection: requests with a ``content-length`` body, answered in order (a subclass
    answers its own way by overriding ``_handle``)."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            total = end + 4 + length
            if len(self._buffer) < total:
                return
            body = bytes(self._buffer[end + 4 : total])
            del self._buffer[:total]
            self._handle(head[0], body)

    def _handle(self, request_line: str, body: bytes) -> None:
        method, path, _ = request_line.split(" ", 2)
        if method == "GET" and path == "/stats":
            self._send(self.stats.read())
            return
        self.stats.began()
        model = str(json.loads(body).get("model", "")) if body else ""
        if model.startswith(WAIT_PREFIX):
            delay = int(model.removeprefix(WAIT_PREFIX)) / 1000
            asyncio.get_running_loop().call_later(delay, self._answer)
        else:
            self._answer()

    def _answer(self) -> None:
        self._send(ANSWER)
        self.stats.ended()

    def _send(self, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n"
        )
        self.transport.write(head.encode() + payload)


def serve(ready: Connection) -> None:
    """Listen on a free port of 127.0.0.1, send the port on ``ready``, serve until killed."""

    async def main() -> None:
        stats = Stats()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(
            lambda: HttpConnection(stats), sock=sock
        )
        ready.send(sock.getsockname()[1])
        ready.close()
        await server.serve_forever()

    uvloop.run(main())
