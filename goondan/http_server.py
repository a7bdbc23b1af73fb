"""HTTP serving that slow clients and many clients cannot starve: the daemon's API (``api.sock``
and TCP), the studio and the connectors' listeners all serve through :class:`GuardedServer`.

Plain uvicorn forgets a connection's keep-alive timer at its first byte and times out nothing
after that, so a client sending a request head a byte at a time holds its connection forever;
and the event loop accepts connections until the process runs out of descriptors, where uvloop
(libuv) closes the pending ones unanswered. :class:`GuardedServer` accepts connections itself
and watches each one (numbers in :class:`ConnectionLimits`):

* **Deadlines** (nginx's ``client_header_timeout`` and ``client_body_timeout``). A request head
  must arrive whole within ``head_seconds`` of the connection, or of its first byte after an
  earlier answer on it; a body must keep ``body_min_bytes_per_second`` after
  ``body_grace_seconds``. Past either the client is answered 408 and the connection closed. A
  kept-alive connection that sends nothing is closed after ``keepalive_seconds``. No deadline
  runs while the app handles a request: a Turn may take minutes, an event stream hours.
* **Capacity.** At most :func:`connection_capacity` connections are open at once, from the
  process's descriptor limit with a quarter kept for everything else, read again as connections
  arrive (a limit lowered under a running process counts). At capacity the oldest stalled
  connection is shed to make room: an idle kept-alive one first, then one whose head is
  incomplete, then one that has said nothing for ``silent_grace_seconds``. When none is stalled
  the server stops accepting until one closes: new connections wait in the listen backlog
  (``backlog``), and are never accepted only to be dropped.
* **Per peer** (nginx's ``limit_conn``). One TCP peer (an IP address) may hold
  ``1/peer_share`` of the capacity; past that its own oldest stalled connection is shed, or the
  new one is answered ``503`` with ``Retry-After``. Unix-socket connections count only towards the
  capacity: the socket's file mode admits the server's own user alone, so every peer there is
  the same one.

Nobody waiting for an answer is closed without one: a shed connection that has not had its
answer is told 503 with ``Retry-After`` (an idle kept-alive one is simply closed, as its
keep-alive timeout would), a late head or body 408. A connection whose bytes have arrived but
were not read yet (a busy loop, not a slow client) is neither shed nor timed out for it. Counts of
what was shed, refused and timed out are logged at most every :data:`REPORT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import json
import math
import resource
import socket
import struct
import termios
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from goondan.http_codes import HttpCode
from goondan.http_writes import CoalescedWrites

__all__ = [
    "ConnectionLimits",
    "GuardedServer",
    "api_error_body",
    "connection_capacity",
    "raise_open_file_limit",
]

RESERVED_DESCRIPTORS = 256
"""Descriptors never given to connections, at the least (a quarter of the limit above 1,024):
the process's pipes, files and outgoing sockets need them."""
ACCEPTS_PER_WAKE = 128
"""Connections accepted in one go before the loop serves the others."""
REPORT_SECONDS = 10.0
"""Least time between two log lines counting connections shed, refused or timed out."""
ACCEPT_RETRY_SECONDS = 0.1
"""How soon accepting resumes after the kernel refused a descriptor, or with nothing to shed."""
REFUSED_BODY_BYTES = 64 * 1024
"""Body a refused request may still send, read and dropped so its 503 is not lost to a reset."""
REFUSED_HEAD_SECONDS = 2.0
"""A connection to be refused holds a descriptor only this long for its head (then its 503
comes without it)."""
UNREAD_GRACE_SECONDS = 1.0
"""More time for a head whose bytes have arrived but were not read yet (a busy loop)."""
LINGER_SECONDS = 2.0
"""How long a connection answered and closed by the server keeps reading (and dropping) what
its client still sends: closed with bytes unread, it would reset, and the client could lose
the answer (nginx's ``lingering_close``). Lingering connections no longer count against the
capacity or their peer's share, but a quarter of the capacity at most may linger (out of the
descriptors kept back): past that, accepting waits for them to go."""

_INT = struct.Struct("i")
_BUSY_PEER = "too many connections from this address; retry later"

ErrorBody = Callable[[str, str], dict[str, Any]]
"""Builds the JSON body of the server's own answers (408, 503) from a code and a message."""
Wrap = Callable[[ASGIApp, asyncio.BaseTransport], ASGIApp]
"""Given the app and a new connection's transport, the app that serves that connection."""


class Log(Protocol):
    """What the server logs through (a structlog logger, a connector's ``ctx.logger``)."""

    def warning(self, event: str, /, **fields: Any) -> Any: ...


def api_error_body(code: str, message: str) -> dict[str, Any]:
    """``{"error": {"code", "message"}}``, the shape of the daemon's API errors."""
    return {"error": {"code": code, "message": message}}


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take, and how many connections a server and a peer may hold."""

    head_seconds: float = 10.0
    """A whole request head, from the connection (or from its first byte after an answer)."""
    keepalive_seconds: float = 5.0
    """An idle kept-alive connection, between an answer and the next request's first byte
    (uvicorn's default; clients such as httpx drop theirs after as long)."""
    body_grace_seconds: float = 10.0
    """A body may start slowly: the rate is owed only after this long."""
    body_min_bytes_per_second: int = 4096
    """The least average rate of a body after the grace (a 1 MiB body: 10 s + 256 s)."""
    silent_grace_seconds: float = 1.0
    """A new connection that has sent nothing is shed only past this age: in a burst, the
    request of a connection just accepted is already on its way."""
    max_connections: int = 8192
    """Open connections of one process at most, however many descriptors it may have."""
    peer_share: int = 4
    """A TCP peer may hold ``1/peer_share`` of the capacity."""
    backlog: int = 4096
    """Connections the kernel queues while the server is not accepting (capped by
    ``net.core.somaxconn``)."""
    retry_after_seconds: int = 1
    """``Retry-After`` of a 503."""


def connection_capacity(limits: ConnectionLimits = ConnectionLimits()) -> int:
    """How many connections may be open now: the descriptor limit in force, less a quarter of it
    (at least :data:`RESERVED_DESCRIPTORS`), at most ``limits.max_connections``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    reserve = max(RESERVED_DESCRIPTORS, soft // 4)
    return max(8, min(limits.max_connections, soft - reserve))


def raise_open_file_limit(ceiling: int = 1 << 20) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (at most ``ceiling``) and
    return the soft limit now in force.

    This is what servers do (Go raises it at start; systemd keeps soft 1,024 for programs that
    use ``select()`` and expects the others to raise it themselves): every connection costs a
    descriptor, and :func:`connection_capacity` follows the limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return wanted
    return soft


Stall = Literal["idle", "partial", "silent"]
_SHED_ORDER: tuple[Stall, ...] = ("idle", "partial", "silent")
_PEER_SHED_ORDER: tuple[Stall, ...] = ("idle", "partial")


@dataclass(slots=True)
class _Counts:
    shed: int = 0
    refused: int = 0
    head_timeouts: int = 0
    body_timeouts: int = 0
    accept_paused: int = 0

    def since(self, earlier: _Counts) -> dict[str, int]:
        return {
            name: getattr(self, name) - getattr(earlier, name)
            for name in (f.name for f in dataclasses.fields(self))
        }


@dataclass(slots=True)
class _Stalled:
    """Connections that hold a slot without a request in progress, oldest first: overall and
    per peer, so the oldest of either is found at once."""

    every: OrderedDict[_GuardedProtocol, float] = field(default_factory=OrderedDict)
    by_peer: dict[str, OrderedDict[_GuardedProtocol, float]] = field(default_factory=dict)

    def add(self, connection: _GuardedProtocol, since: float) -> None:
        self.every[connection] = since
        if connection.peer_key is not None:
            self.by_peer.setdefault(connection.peer_key, OrderedDict())[connection] = since

    def discard(self, connection: _GuardedProtocol) -> None:
        if self.every.pop(connection, None) is None or connection.peer_key is None:
            return
        mine = self.by_peer.get(connection.peer_key)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self.by_peer[connection.peer_key]

    def oldest(self, peer_key: str | None) -> tuple[_GuardedProtocol, float] | None:
        queue = self.every if peer_key is None else self.by_peer.get(peer_key)
        if not queue:
            return None
        return next(iter(queue.items()))


class _Admission:
    """The connections of one server: how many, whose, which are stalled; and who may come in."""

    def __init__(self, limits: ConnectionLimits, log: Log | None) -> None:
        self.limits = limits
        self.log = log
        self.open = 0
        """Connections holding a descriptor, lingering ones included."""
        self.lingering = 0
        self.by_peer: dict[str, int] = {}
        self.stalled: dict[Stall, _Stalled] = {kind: _Stalled() for kind in _SHED_ORDER}
        self.acceptors: list[_Acceptor] = []
        self.counts = _Counts()
        self._reported = _Counts()
        self._last_report = 0.0

    def per_peer(self, capacity: int) -> int:
        return max(4, capacity // self.limits.peer_share)

    def take(self, peer_key: str | None) -> None:
        self.open += 1
        if peer_key is not None:
            self.by_peer[peer_key] = self.by_peer.get(peer_key, 0) + 1

    def leave(self, peer_key: str | None, *, descriptor: bool) -> None:
        """A connection no longer counts against its peer's share (and, with ``descriptor``,
        holds no descriptor either)."""
        if descriptor:
            self.open -= 1
        if peer_key is not None:
            left = self.by_peer.get(peer_key, 1) - 1
            if left > 0:
                self.by_peer[peer_key] = left
            else:
                self.by_peer.pop(peer_key, None)
        self.room_made()

    def staying(self) -> int:
        """Open connections that are not on their way out."""
        return self.open - self.lingering

    def mark(self, connection: _GuardedProtocol, kind: Stall | None, since: float) -> None:
        """Record whether ``connection`` is stalled, and how (``None``: a request is under way)."""
        for other, queue in self.stalled.items():
            if other != kind:
                queue.discard(connection)
        if kind is not None and connection not in self.stalled[kind].every:
            self.stalled[kind].add(connection, since)
            if kind != "silent":  # sheddable now (a silent one only once it is old enough)
                self.room_made()

    def shed_one(self, peer_key: str | None = None) -> bool:
        """Close the oldest stalled connection (of ``peer_key``, if given); whether one was.

        Within one peer's share a connection that has sent nothing yet is not shed: in a burst
        from one address every new connection is silent for a moment, and shedding the older
        ones for the newer would answer the whole burst 503. The newcomer is refused instead;
        a silent one still ends at its head deadline.
        """
        now = time.monotonic()
        for kind in _SHED_ORDER if peer_key is None else _PEER_SHED_ORDER:
            queue = self.stalled[kind]
            while (found := queue.oldest(peer_key)) is not None:
                connection, since = found
                if kind == "silent" and now - since < self.limits.silent_grace_seconds:
                    break
                queue.discard(connection)
                if connection.unread():
                    # Its next bytes are here, only not read yet (a busy loop): not stalled.
                    # Reading them marks it again if it still is.
                    continue
                connection.shed(kind)
                self.counts.shed += 1
                self.report()
                return True
        return False

    def room_made(self) -> None:
        for acceptor in self.acceptors:
            acceptor.resume()

    def report(self) -> None:
        """Log what was shed, refused and timed out since the last line, at most so often."""
        now = time.monotonic()
        if self.log is None or now - self._last_report < REPORT_SECONDS:
            return
        delta = self.counts.since(self._reported)
        if not any(delta.values()):
            return
        self._last_report = now
        self._reported = dataclasses.replace(self.counts)
        self.log.warning("http connections limited", open=self.open, **delta)


def _peer_key(sock: socket.socket, address: Any) -> str | None:
    """The peer a connection counts against: its IP address on TCP, none on a Unix socket."""
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        host = str(address[0])
        return host.removeprefix("::ffff:") if "." in host else host
    return None


class _Acceptor:
    """Accepts the connections of one listening socket, while the server has room for them."""

    def __init__(
        self,
        server: GuardedServer,
        sock: socket.socket,
        admission: _Admission,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.server = server
        self.sock = sock
        self.admission = admission
        self.loop = loop
        self.reading = False
        self.closed = False
        self.connecting: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.sock.setblocking(False)
        self.sock.listen(self.admission.limits.backlog)
        self.resume()

    def resume(self) -> None:
        if self.reading or self.closed:
            return
        self.reading = True
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def pause(self, retry: float | None = None) -> None:
        if self.reading:
            self.reading = False
            self.admission.counts.accept_paused += 1
            self.loop.remove_reader(self.sock.fileno())
        if retry is not None and self._retry is None and not self.closed:
            self._retry = self.loop.call_later(retry, self._retried)

    def _retried(self) -> None:
        self._retry = None
        self.resume()

    def close(self) -> None:
        self.pause()
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _accept(self) -> None:
        admission = self.admission
        capacity = connection_capacity(admission.limits)
        per_peer = admission.per_peer(capacity)
        for _ in range(ACCEPTS_PER_WAKE):
            if admission.staying() >= capacity and not admission.shed_one():
                # Nothing stalled to make room for: the kernel keeps the rest in the backlog
                # until a connection closes, or a silent one grows old enough to shed.
                self.pause(retry=admission.limits.silent_grace_seconds)
                admission.report()
                return
            if admission.open >= capacity + capacity // 4:
                self.pause(retry=LINGER_SECONDS)  # those lingering go first
                return
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors for now: the connection stays queued, not dropped.
                    admission.shed_one()
                    self.pause(retry=ACCEPT_RETRY_SECONDS)
                    admission.report()
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # the peer gave up before we took it
                if admission.log is not None:
                    admission.log.warning("http accept failed", error=str(exc))
                self.pause(retry=ACCEPT_RETRY_SECONDS)
                return
            conn.setblocking(False)
            peer_key = _peer_key(conn, address)
            refuse = False
            if peer_key is not None:
                # Its connections being refused count too: shed until it is under its share.
                while admission.by_peer.get(peer_key, 0) >= per_peer:
                    if not admission.shed_one(peer_key):
                        refuse = True
                        break
            admission.take(peer_key)
            task = self.loop.create_task(self._serve(conn, peer_key, refuse))
            self.connecting.add(task)
            task.add_done_callback(self.connecting.discard)

    async def _serve(self, conn: socket.socket, peer_key: str | None, refuse: bool) -> None:
        def protocol() -> asyncio.Protocol:
            return self.server.connection_protocol(peer_key, refuse)

        try:
            await self.loop.connect_accepted_socket(protocol, conn)
        except (OSError, RuntimeError, asyncio.CancelledError):
            # Gone before it was served, or the server is stopping: its slot goes back.
            conn.close()
            self.admission.leave(peer_key, descriptor=True)
            raise


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
    line counting what was shed, refused and timed out, at most every :data:`REPORT_SECONDS`.
    Serve with ``serve(sockets=[...])``: listening sockets bound by the caller, which keeps
    them (they are closed when the server stops).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        limits: ConnectionLimits = ConnectionLimits(),
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
        self.admission = _Admission(limits, log)

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
            acceptor = _Acceptor(self, sock, self.admission, loop)
            self.admission.acceptors.append(acceptor)
            acceptor.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting first, then let uvicorn finish the connections it has."""
        for acceptor in self.admission.acceptors:
            acceptor.close()
            for task in list(acceptor.connecting):
                task.cancel()
        await super().shutdown(sockets=sockets)
