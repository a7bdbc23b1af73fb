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

* **Sizes**: a request head still not whole after :data:`HEAD_MAX_BYTES` is answered 431 (h11's
  own limit, kept on httptools, which has none); at most :data:`PIPELINED_MAX` pipelined requests
  wait their turn, past which the client is told 503 once they are answered.

* **One host**: each request head is checked by :mod:`goondan.http_target` before the app
  sees it (two ``Host`` headers, or a target naming another host, are answered 400).

It serves on uvicorn's httptools protocol where ``httptools`` is installed (a parser in C, less
CPU per request than h11's pure Python) and on its h11 protocol otherwise, under the same
guards (:func:`http_parser`; ``uvicorn.Config(http="h11")`` asks for h11).

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
from uvicorn.protocols.http.flow_control import FlowControl
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
from goondan.http_target import CheckedH11Connection, check_request
from goondan.http_writes import CoalescedWrites

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: h11 serves alone
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

__all__ = ["HEAD_MAX_BYTES", "PIPELINED_MAX", "GuardedServer", "api_error_body", "http_parser"]

REFUSED_BODY_BYTES = 64 * 1024
"""Body a refused request may still send, read and dropped so its 503 is not lost to a reset."""
REFUSED_HEAD_SECONDS = 2.0
"""A connection to be refused holds a descriptor only this long for its head (then its 503
comes without it)."""
UNREAD_GRACE_SECONDS = 1.0
"""More time for a head whose bytes have arrived but were not read yet (a busy loop)."""
HEAD_MAX_BYTES = 16 * 1024
"""A request head still not whole past this many bytes is answered 431 (h11's default limit)."""
READ_MAX_BYTES = 256 * 1024
"""The most one read of a socket returns (uvloop's buffer): h11's own limit on its buffer is
set this far above :data:`HEAD_MAX_BYTES`, so that ours answers first, and in JSON."""
PIPELINED_MAX = 16
"""Requests a client may send ahead of their answers on one connection (httptools parses all
that arrive; each waiting one holds its scope and body)."""

_DEFAULT_LIMITS = ConnectionLimits()
_INT = struct.Struct("i")
_BUSY_PEER = "too many connections from this address; retry later"
_TOO_MANY_PIPELINED = f"more than {PIPELINED_MAX} requests were sent ahead of their answers"
_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}

ErrorBody = Callable[[str, str], dict[str, Any]]
"""Builds the JSON body of the server's own answers (408, 431, 503) from a code and a message."""
Wrap = Callable[[ASGIApp, asyncio.BaseTransport], ASGIApp]
"""Given the app and a new connection's transport, the app that serves that connection."""


def api_error_body(code: str, message: str) -> dict[str, Any]:
    """``{"error": {"code", "message"}}``, the shape of the daemon's API errors."""
    return {"error": {"code": code, "message": message}}


Stage = Literal["none", "head", "body", "app"]
"""Where a connection's request stands: no byte of one yet, its head or its body under way, or
the whole of it in (the app's time, however long it takes)."""


class _Guard(asyncio.Protocol):
    """The deadlines and admission of one connection, mixed into one of uvicorn's HTTP/1.1
    protocols; what depends on the parser is :meth:`_stage`, :meth:`_head_bytes` and
    :meth:`_before_read`."""

    # Provided by the uvicorn protocol this is mixed into.
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    flow: FlowControl
    app: Any
    cycle: Any

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
        self.overflowing = False
        """More requests were pipelined than are queued: the rest is dropped, and the client
        told 503 once the queued ones are answered."""
        self.fd = -1
        self.refusal: str | None = None
        """Why the parser was stopped, when :mod:`goondan.http_target` refused the head."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
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
        if self.lingering or self.overflowing:
            return  # answered already, or about to be: what still comes is dropped
        self._before_read(data)
        super().data_received(data)
        self._review()

    def _before_read(self, data: bytes) -> None:
        """Note ``data`` before the parser reads it."""

    def _stage(self) -> Stage:
        """Where the request on this connection stands."""
        raise NotImplementedError

    def _head_bytes(self) -> int:
        """Bytes read of a request head not yet whole (0 when none is under way)."""
        raise NotImplementedError

    def _answered(self) -> None:
        """An answer is complete (before uvicorn's ``on_response_complete``)."""
        self.writes.flush()  # the end of a stream is not held for the loop's turn
        self.answered += 1

    def _review(self) -> None:
        """Set the deadline and the stalled mark for the state the request is now in."""
        if self.transport.is_closing():
            return
        now = time.monotonic()
        stage = self._stage()
        if stage == "head":
            if self._head_bytes() > HEAD_MAX_BYTES:
                message = f"the request head is over {HEAD_MAX_BYTES} bytes"
                self._answer(431, HttpCode.BAD_REQUEST, message)
                return
            if self.deadline_kind != "head":
                self._arm("head", now + self.limits.head_seconds)
            self.admission.mark(self, "partial", now)
        elif stage == "none":
            if self.answered:  # between requests: uvicorn's keep-alive timer runs
                self._disarm()
                self.admission.mark(self, "idle", now)
        elif stage == "body":
            if self.deadline_kind != "body":
                self.body_started, self.body_bytes = now, 0
            self.admission.mark(self, None, now)
            self._arm("body", self._body_deadline())
        else:  # the whole request is in: the app's time, however long it takes
            self._disarm()
            self.admission.mark(self, None, now)
            if self._head_bytes() > HEAD_MAX_BYTES:  # a pipelined one waits its turn, unread
                self.flow.pause_reading()

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
        stage = self._stage()
        if kind == "body":
            if stage != "body":
                return
            if self.flow.read_paused:  # the app is not reading: not the client's delay
                self._arm("body", time.monotonic() + self.limits.body_grace_seconds)
                return
            self.admission.counts.body_timeouts += 1
            message = "the request body came too slowly"
        else:
            if stage not in ("none", "head"):
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

    def send_400_response(self, msg: str) -> None:
        """A head the parser or :mod:`goondan.http_target` refused: 400 in the server's JSON,
        naming the problem where it is known."""
        refusal, self.refusal = self.refusal, None
        if refusal is not None:
            self._answer(400, HttpCode.HOST_INVALID, refusal)
        else:
            self._answer(400, HttpCode.BAD_REQUEST, "the request is not valid HTTP/1.1")

    def _answer(self, status: int, code: HttpCode, message: str) -> None:
        """Write a whole answer of our own (unless the app's is under way), then close."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            body = json.dumps(self.guard.error_body(code, message)).encode()
            headers = [
                b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
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


class _GuardedH11(_Guard, H11Protocol):
    """uvicorn's HTTP/1.1 protocol on h11 (pure Python) under the server's deadlines and
    admission: the fallback where httptools is not installed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.config.h11_max_incomplete_event_size or HEAD_MAX_BYTES + READ_MAX_BYTES
        self.conn = CheckedH11Connection(h11.SERVER, limit)
        self.conn.protocol = self

    def _before_read(self, data: bytes) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            self.body_bytes += len(data)

    def _stage(self) -> Stage:
        state = self.conn.their_state
        if state is h11.IDLE:
            return "head" if self.conn.trailing_data[0] else "none"
        return "body" if state is h11.SEND_BODY else "app"

    def _head_bytes(self) -> int:
        if self.conn.their_state is not h11.IDLE:
            return 0
        return len(self.conn.trailing_data[0])

    def on_response_complete(self) -> None:
        self._answered()
        super().on_response_complete()
        self._review()


_PROTOCOLS: dict[str, type[_Guard]] = {"h11": _GuardedH11}

if HttpToolsProtocol is not None:

    class _GuardedHttpTools(_Guard, HttpToolsProtocol):
        """uvicorn's HTTP/1.1 protocol on httptools (llhttp, in C) under the server's
        deadlines and admission.

        httptools reads every request in what arrives, where h11 reads one at a time: a
        pipelined request is queued (at most :data:`PIPELINED_MAX`, past which the client is
        told 503 after the queued ones), and its head counts as under way only once the
        requests before it are answered, as with h11."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.parsing: Literal["none", "head", "body"] = "none"
            self.head_read = 0

        def _before_read(self, data: bytes) -> None:
            if self.parsing == "none":
                # Even bytes the parser skips (blank lines) are a head under way, as h11
                # sees them: otherwise they would restart uvicorn's keep-alive timer forever.
                self.parsing = "head"
            if self.parsing == "head":
                self.head_read += len(data)

        def _stage(self) -> Stage:
            cycle = self.cycle
            if self.pipeline or (
                cycle is not None and not cycle.more_body and not cycle.response_complete
            ):
                return "app"
            return self.parsing

        def _head_bytes(self) -> int:
            return self.head_read if self.parsing == "head" else 0

        def on_message_begin(self) -> None:
            if len(self.pipeline) >= PIPELINED_MAX:
                self.overflowing = True
            self.parsing = "head"
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self.parsing, self.head_read = "body", 0
            checked = check_request(self.url, self.headers, self.parser.get_http_version())
            if checked.refusal is not None:
                self.refusal = checked.refusal
                raise ValueError(checked.refusal)  # the parser stops: send_400_response
            self.url = checked.target
            if not self.overflowing:
                super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self.overflowing:
                self.body_bytes += len(body)
                super().on_body(body)

        def on_message_complete(self) -> None:
            self.parsing = "none"
            if not self.overflowing:
                super().on_message_complete()

        def on_response_complete(self) -> None:
            last_queued = not self.pipeline
            self._answered()
            super().on_response_complete()
            if self.overflowing and last_queued and not self.transport.is_closing():
                self._answer(503, HttpCode.SERVER_BUSY, _TOO_MANY_PIPELINED)
            else:
                self._review()

    _PROTOCOLS["httptools"] = _GuardedHttpTools


def http_parser(http: object = "auto") -> Literal["httptools", "h11"]:
    """The HTTP/1.1 parser a :class:`GuardedServer` serves on for ``uvicorn.Config(http=...)``:
    ``"auto"`` (uvicorn's default) takes httptools where it is installed, h11 otherwise."""
    if http == "auto":
        return "h11" if HttpToolsProtocol is None else "httptools"
    if http == "httptools" and HttpToolsProtocol is None:
        raise ValueError("http: 'httptools' is not installed (pip install httptools)")
    if http in ("httptools", "h11"):
        return "httptools" if http == "httptools" else "h11"
    raise ValueError(f"http: {http!r} is not one of 'auto', 'httptools', 'h11'")


class GuardedServer(uvicorn.Server):
    """A uvicorn server that accepts its own connections under :class:`ConnectionLimits` and
    installs no signal handlers (its owner stops it: the daemon, the studio, a connector).
    ``config.http`` picks the parser (:func:`http_parser`; ``parser`` names the one in use).

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
        config.h11_max_incomplete_event_size = HEAD_MAX_BYTES + READ_MAX_BYTES
        self.parser = http_parser(config.http)
        self.protocol_class = _PROTOCOLS[self.parser]
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
        return self.protocol_class(
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
