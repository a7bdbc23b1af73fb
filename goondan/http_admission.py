"""Admission of HTTP connections: how many a server may hold open, how many one peer may, and
which stalled one goes to make room (numbers in :class:`ConnectionLimits`). The per-connection
deadlines and the server itself are in :mod:`goondan.http_server`.

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

Counts of what was shed, refused and timed out are logged at most every
:data:`REPORT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import resource
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "Acceptor",
    "Admission",
    "ConnectionLimits",
    "ConnectionProtocol",
    "Log",
    "Sheddable",
    "Stall",
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
LINGER_SECONDS = 2.0
"""How long a connection answered and closed by the server keeps reading (and dropping) what
its client still sends: closed with bytes unread, it would reset, and the client could lose
the answer (nginx's ``lingering_close``). Lingering connections no longer count against the
capacity or their peer's share, but a quarter of the capacity at most may linger (out of the
descriptors kept back): past that, accepting waits for them to go."""


class Log(Protocol):
    """What the server logs through (a structlog logger, a connector's ``ctx.logger``)."""

    def warning(self, event: str, /, **fields: Any) -> Any: ...


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


class Sheddable(Protocol):
    """A connection as admission sees it: whose it is, and how to make it go."""

    @property
    def peer_key(self) -> str | None:
        """The peer it counts against (an IP address), ``None`` on a Unix socket."""

    def unread(self) -> bool:
        """Whether bytes from the client wait in the kernel, not yet read."""

    def shed(self, kind: Stall) -> None:
        """Close it to make room (telling a client that waits for an answer why)."""


ConnectionProtocol = Callable[[str | None, bool], asyncio.Protocol]
"""Builds the protocol of an accepted connection from its peer key and whether it is to be
refused (its peer being over its share)."""


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

    every: OrderedDict[Sheddable, float] = field(default_factory=OrderedDict)
    by_peer: dict[str, OrderedDict[Sheddable, float]] = field(default_factory=dict)

    def add(self, connection: Sheddable, since: float) -> None:
        self.every[connection] = since
        if connection.peer_key is not None:
            self.by_peer.setdefault(connection.peer_key, OrderedDict())[connection] = since

    def discard(self, connection: Sheddable) -> None:
        if self.every.pop(connection, None) is None or connection.peer_key is None:
            return
        mine = self.by_peer.get(connection.peer_key)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self.by_peer[connection.peer_key]

    def oldest(self, peer_key: str | None) -> tuple[Sheddable, float] | None:
        queue = self.every if peer_key is None else self.by_peer.get(peer_key)
        if not queue:
            return None
        return next(iter(queue.items()))


class Admission:
    """The connections of one server: how many, whose, which are stalled; and who may come in."""

    def __init__(self, limits: ConnectionLimits, log: Log | None) -> None:
        self.limits = limits
        self.log = log
        self.open = 0
        """Connections holding a descriptor, lingering ones included."""
        self.lingering = 0
        self.by_peer: dict[str, int] = {}
        self.stalled: dict[Stall, _Stalled] = {kind: _Stalled() for kind in _SHED_ORDER}
        self.acceptors: list[Acceptor] = []
        self.counts = _Counts()
        self._reported = _Counts()
        self._last_report = 0.0

    def per_peer(self, capacity: int) -> int:
        """How many connections one TCP peer may hold, out of ``capacity``."""
        return max(4, capacity // self.limits.peer_share)

    def take(self, peer_key: str | None) -> None:
        """Count a connection just accepted (against ``peer_key``'s share, if any)."""
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

    def mark(self, connection: Sheddable, kind: Stall | None, since: float) -> None:
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
        """Resume accepting: a slot may have come free."""
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


class Acceptor:
    """Accepts the connections of one listening socket, while the server has room for them,
    and serves each through the protocol ``connection_protocol`` builds."""

    def __init__(
        self,
        sock: socket.socket,
        connection_protocol: ConnectionProtocol,
        admission: Admission,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.sock = sock
        self.connection_protocol = connection_protocol
        self.admission = admission
        self.loop = loop
        self.reading = False
        self.closed = False
        self.connecting: set[asyncio.Task[None]] = set()
        self._retry: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Listen (with the limits' backlog) and begin accepting."""
        self.sock.setblocking(False)
        self.sock.listen(self.admission.limits.backlog)
        self.resume()

    def resume(self) -> None:
        """Accept again, unless closed or accepting already."""
        if self.reading or self.closed:
            return
        self.reading = True
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def pause(self, retry: float | None = None) -> None:
        """Stop accepting; with ``retry``, try again after that many seconds."""
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
        """Stop accepting for good (the socket stays its owner's to close)."""
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
            return self.connection_protocol(peer_key, refuse)

        try:
            await self.loop.connect_accepted_socket(protocol, conn)
        except (OSError, RuntimeError, asyncio.CancelledError):
            # Gone before it was served, or the server is stopping: its slot goes back.
            conn.close()
            self.admission.leave(peer_key, descriptor=True)
            raise
