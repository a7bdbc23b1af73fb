"""HTTP serving that slow clients and many clients cannot starve: the daemon's API (``api.sock``
and TCP), the studio and the connectors' listeners all serve through :class:`GuardedServer`.

Plain uvicorn forgets a connection's keep-alive timer at its first byte and times out nothing
after that, so a client sending a request head a byte at a time holds its connection forever;
and the event loop accepts connections until the process runs out of descriptors, where uvloop
(libuv) closes the pending ones unanswered. :class:`GuardedServer` accepts connections itself
and watches each one (numbers in :class:`goondan.http_admission.ConnectionLimits`):

* **Deadlines** (nginx's ``client_header_timeout`` and ``client_body_timeout``), here. A request
  head must arrive whole within ``head_seconds`` of the connection, or of its first byte after
  an earlier answer on it; a body must keep ``body_min_bytes_per_second`` after
  ``body_grace_seconds``. Past either the client is answered 408 and the connection closed. A
  kept-alive connection that sends nothing is closed after ``keepalive_seconds``. No deadline
  runs while the app handles a request: a Turn may take minutes, an event stream hours.
* **Capacity and per-peer shares**, in :mod:`goondan.http_admission`: connections past the
  capacity wait in the listen backlog or make a stalled one go; a peer over its share is
  answered 503.

Nobody waiting for an answer is closed without one: a shed connection that has not had its
answer is told 503 with ``Retry-After`` (an idle kept-alive one is simply closed, as its
keep-alive timeout would), a late head or body 408. A connection whose bytes have arrived but
were not read yet (a busy loop, not a slow client) is neither shed nor timed out for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import math
import socket
import struct
import termios
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from goondan.http_admission import (
    LINGER_SECONDS,
    Acceptor,
    Admission,
    ConnectionLimits,
    Log,
    Stall,
)
from goondan.http_codes import HttpCode
from goondan.http_writes import CoalescedWrites

__all__ = ["GuardedServer", "api_error_body"]

REFUSED_BODY_BYTES = 64 * 1024
"""Body a refused request may still send, read and dropped so its 503 is not lost to a reset."""
REFUSED_HEAD_SECONDS = 2.0
"""A connection to be refused holds a descriptor only this long for its head (then its 503
comes without it)."""
UNREAD_GRACE_SECONDS = 1.0
"""More time for a head whose bytes have arrived but were not read yet (a busy loop)."""

_DEFAULT_LIMITS = ConnectionLimits()
_INT = struct.Struct("i")
_BUSY_PEER = "too many connections from this address; retry later"

ErrorBody = Callable[[str, str], dict[str, Any]]
"""Builds the JSON body of the server's own answers (408, 503) from a code and a message."""
Wrap = Callable[[ASGIApp, asyncio.BaseTransport], ASGIApp]
"""Given the app and a new connection's transport, the app that serves that connection."""


def api_error_body(code: str, message: str) -> dict[str, Any]:
    """``{"error": {"code", "message"}}``, the shape of the daemon's API errors."""
    return {"error": {"code": code, "message": message}}


class _GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under the server's deadlines and admission."""

    def __init__(
        self,
        *args: Any,
        guard: GuardedServer,
        peer_key: str | None,
        refuse: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.admission = guard.admission
        self.limits = guard.limits
        self.peer_key = peer_key
        self.refuse = refuse
        self.answered = 0
        self.deadline: asyncio.TimerHandle | None = None
        self.deadline_kind: Literal["head", "body"] | None = None
        self.body_started = 0.0
        self.body_bytes = 0
        self.counted = True
        """Whether it still counts against its peer's share (and the capacity, unless
        lingering)."""
        self.lingering = False
        self.fd = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self.writes = CoalescedWrites(self.transport, self.loop)  # an answer in one send
        self.transport = self.writes
        if self.refuse:
            self.app = self.guard.refusal_app
        elif self.guard.wrap is not None:
            self.app = self.guard.wrap(self.app, transport)
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1
        now = time.monotonic()
        self.admission.mark(self, "silent", now)
        head = min(self.limits.head_seconds, REFUSED_HEAD_SECONDS) if self.refuse else None
        self._arm("head", now + (head or self.limits.head_seconds))

    def unread(self) -> bool:
        """Whether bytes from the client wait in the kernel, not yet read."""
        if self.fd < 0:
            return False
        try:
            pending = fcntl.ioctl(self.fd, termios.FIONREAD, _INT.pack(0))
        except OSError:
            return False
        return bool(_INT.unpack(pending)[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.admission.mark(self, None, 0.0)
        if self.lingering:
            self.lingering = False
            self.admission.lingering -= 1
            self.admission.leave(None, descriptor=True)
        self._release()
        super().connection_lost(exc)

    def _release(self) -> None:
        if self.counted:
            self.counted = False
            self.admission.leave(self.peer_key, descriptor=not self.lingering)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # answered already: what still comes is dropped
        if self.conn.their_state is h11.SEND_BODY:
            self.body_bytes += len(data)
        super().data_received(data)
        self._review()

    def on_response_complete(self) -> None:
        self.writes.flush()  # the end of a stream is not held for the loop's turn
        self.answered += 1
        super().on_response_complete()
        self._review()

    def _review(self) -> None:
        """Set the deadline and the stalled mark for the state the request is now in."""
        if self.transport.is_closing():
            return
        now = time.monotonic()
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.conn.trailing_data[0]:  # a head under way
                if self.deadline_kind != "head":
                    self._arm("head", now + self.limits.head_seconds)
                self.admission.mark(self, "partial", now)
            elif self.answered:  # between requests: uvicorn's keep-alive timer runs
                self._disarm()
                self.admission.mark(self, "idle", now)
        elif state is h11.SEND_BODY:
            if self.deadline_kind != "body":
                self.body_started, self.body_bytes = now, 0
            self.admission.mark(self, None, now)
            self._arm("body", self._body_deadline())
        else:  # the whole request is in: the app's time, however long it takes
            self._disarm()
            self.admission.mark(self, None, now)

    def _body_deadline(self) -> float:
        rate = self.limits.body_min_bytes_per_second
        return self.body_started + self.limits.body_grace_seconds + self.body_bytes / rate

    def _arm(self, kind: Literal["head", "body"], when: float) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline_kind = kind
        self.deadline = self.loop.call_at(
            self.loop.time() + max(0.0, when - time.monotonic()), self._expired
        )

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = None
        self.deadline_kind = None

    def _expired(self) -> None:
        kind, self.deadline, self.deadline_kind = self.deadline_kind, None, None
        if self.transport.is_closing():
            return
        if kind == "body":
            if self.conn.their_state is not h11.SEND_BODY:
                return
            if self.flow.read_paused:  # the app is not reading: not the client's delay
                self._arm("body", time.monotonic() + self.limits.body_grace_seconds)
                return
            self.admission.counts.body_timeouts += 1
            message = "the request body came too slowly"
        else:
            if self.conn.their_state is not h11.IDLE:
                return
            if self.unread():  # its bytes are here, our loop was busy: read them first
                self._arm("head", time.monotonic() + UNREAD_GRACE_SECONDS)
                return
            if self.refuse:  # it was to be refused anyway: say why, and when to come back
                self.admission.counts.refused += 1
                self._answer(503, HttpCode.SERVER_BUSY, _BUSY_PEER)
                self.admission.report()
                return
            self.admission.counts.head_timeouts += 1
            message = "the request head did not arrive in time"
        self._answer(408, HttpCode.REQUEST_TIMEOUT, message)
        self.admission.report()

    def shed(self, kind: Stall) -> None:
        """Close this stalled connection to make room; one waiting for its request is told so
        (an idle kept-alive one is simply closed, as its keep-alive timeout would)."""
        if kind == "idle" or self.transport.is_closing():
            self._close()
        else:
            self._answer(
                503,
                HttpCode.SERVER_BUSY,
                "too many connections wait for their requests; retry later",
            )

    def _answer(self, status: int, code: HttpCode, message: str) -> None:
        """Write a whole answer of our own (unless one has begun), then close."""
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            body = json.dumps(self.guard.error_body(code, message)).encode()
            reason = {408: b"Request Timeout", 503: b"Service Unavailable"}[status]
            headers = [
                b"HTTP/1.1 %d %s" % (status, reason),
                b"content-type: application/json",
                b"content-length: %d" % len(body),
                b"connection: close",
            ]
            if status == 503:
                headers.append(b"retry-after: %d" % self.limits.retry_after_seconds)
            self.transport.write(b"\r\n".join(headers) + b"\r\n\r\n" + body)
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's own answer, if any, goes nowhere
            cycle.message_event.set()
        self._linger()

    def _linger(self) -> None:
        """Close after our answer without a reset: say we are done (FIN), drop what the client
        still sends until it closes too or :data:`LINGER_SECONDS` pass."""
        transport = self.transport
        if not transport.can_write_eof() or not self.counted:
            self._close()
            return
        self._disarm()
        self.admission.mark(self, None, 0.0)
        self.lingering = True
        self.admission.lingering += 1
        transport.write_eof()
        self.flow.resume_reading()
        self.deadline = self.loop.call_later(LINGER_SECONDS, transport.close)
        self._release()  # out of its peer's share; its descriptor goes when it does

    def _close(self) -> None:
        self._disarm()
        self.admission.mark(self, None, 0.0)
        self.transport.close()
        # Its descriptor goes once the little left to write is out: the slot is free now.
        self._release()


class GuardedServer(uvicorn.Server):
    """A uvicorn server that accepts its own connections under :class:`ConnectionLimits` and
    installs no signal handlers (its owner stops it: the daemon, the studio, a connector).

    ``wrap`` gives each connection its own app (the daemon reads the peer's credentials there);
    ``error_body`` shapes the JSON of the server's own 408 and 503 answers; ``log`` receives a
    line counting what was shed, refused and timed out, at most every
    :data:`goondan.http_admission.REPORT_SECONDS`.
    Serve with ``serve(sockets=[...])``: listening sockets bound by the caller, which keeps
    them (they are closed when the server stops).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        limits: ConnectionLimits = _DEFAULT_LIMITS,
        *,
        wrap: Wrap | None = None,
        error_body: ErrorBody = api_error_body,
        log: Log | None = None,
    ) -> None:
        config.timeout_keep_alive = max(1, math.ceil(limits.keepalive_seconds))
        super().__init__(config)
        self.limits = limits
        self.wrap = wrap
        self.error_body = error_body
        self.admission = Admission(limits, log)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def connection_protocol(self, peer_key: str | None, refuse: bool) -> asyncio.Protocol:
        """The protocol of one accepted connection."""
        return _GuardedProtocol(
            config=self.config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
            guard=self,
            peer_key=peer_key,
            refuse=refuse,
        )

    async def refusal_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The 503 of a connection over its peer's share: the body is read first (a little of
        it), so the answer is not lost to a reset."""
        if scope["type"] != "http":
            return
        drained = 0
        while drained <= REFUSED_BODY_BYTES:
            message = await receive()
            drained += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        self.admission.counts.refused += 1
        self.admission.report()
        body = json.dumps(self.error_body(HttpCode.SERVER_BUSY, _BUSY_PEER)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(self.limits.retry_after_seconds).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start uvicorn without its own listeners, then accept on ``sockets`` ourselves."""
        await super().startup(sockets=[])
        # Upgrades would hand the connection to a protocol outside these limits.
        self.config.ws_protocol_class = None
        loop = asyncio.get_running_loop()
        for sock in sockets or []:
            acceptor = Acceptor(sock, self.connection_protocol, self.admission, loop)
            self.admission.acceptors.append(acceptor)
            acceptor.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting first, then let uvicorn finish the connections it has."""
        for acceptor in self.admission.acceptors:
            acceptor.close()
            for task in list(acceptor.connecting):
                task.cancel()
        await super().shutdown(sockets=sockets)
