"""The network proxy a sandboxed program with network reaches the world through.

One :class:`NetworkProxy` serves one program (a ``bash`` call, or an MCP server for as long as
it runs), on the agent's event loop: an HTTP proxy (``CONNECT host:port`` for HTTPS and any
TCP, absolute-form ``http://`` requests) and a SOCKS5 proxy (``CONNECT``, no authentication).
Its listeners live in the sandbox's own network namespace (:mod:`tools_base.sandbox._netns`);
the program's environment names them (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``).

For each request the proxy applies the Tool's rules (:class:`NetworkRules`: ``deny``, then
``allow``, on the host name), resolves the name itself (or takes the ``hosts`` map's address),
refuses the whole name when any answer is not a public address (:func:`public_only`), and
connects to the address it checked: never a second resolution, so a name cannot rebind.
Refusals are answered at once (HTTP 403 with the reason, SOCKS5 reply 2); every connection is
recorded as a :class:`Connection` (host, port, address, allowed or refused and why, bytes each
way) and handed to the sink of the tool call it belongs to (:data:`connection_sink`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import ipaddress
import os
import secrets
import socket
import stat
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from tools_base.sandbox import _proxy_wire as wire
from tools_base.sandbox._netns import HANDOFF_TAG, PORTS
from tools_base.sandbox._netpolicy import (
    AddressCheck,
    IPAddress,
    NetworkRules,
    parse_address,
    public_only,
    valid_host_name,
)

HEAD_SECONDS = 10.0
"""How long a client may take to send its request (a slow client is cut off, never waited on)."""
RESOLVE_SECONDS = 10.0
CONNECT_SECONDS = 15.0
HANDOFF_SECONDS = 30.0
"""How long the launcher may take to hand the listeners over."""
MAX_CONNECTIONS = 256
"""Connections one program may hold open through the proxy at once."""
MAX_RECORDED = 1000
"""Connections a proxy records one by one (kept, logged, handed to the sink); past it, a
program looping over refused requests cannot flood the event log: the rest are counted, and
the count logged when the proxy closes."""
_CHUNK = 64 * 1024
_log = structlog.get_logger("goondan.sandbox.proxy")


@dataclass(slots=True)
class Connection:
    """One outbound connection a sandboxed program asked for, as recorded."""

    protocol: str
    """``http`` (absolute-form), ``connect`` (HTTP CONNECT) or ``socks5``."""
    host: str
    port: int
    allowed: bool
    """Whether the policy let it through (it may still have failed to connect)."""
    reason: str | None = None
    """Why it was refused, or why it failed; ``None`` when it ran."""
    address: str | None = None
    """The address connected to (the one the policy checked)."""
    bytes_up: int = 0
    """Bytes the program sent."""
    bytes_down: int = 0
    """Bytes it received."""
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """As a tool's summary or a log line shows it."""
        return {
            "protocol": self.protocol,
            "host": self.host,
            "port": self.port,
            "address": self.address,
            "allowed": self.allowed,
            "reason": self.reason,
            "bytesUp": self.bytes_up,
            "bytesDown": self.bytes_down,
            "durationMs": round(self.duration_ms, 3),
        }


ConnectionSink = Callable[[Connection], None]
connection_sink: contextvars.ContextVar[ConnectionSink | None] = contextvars.ContextVar(
    "goondan_connection_sink", default=None
)
"""Where the running tool call's connections are recorded (the agent sets it per call; it
emits them on the call's span). ``None``: logged only."""


class Refused(Exception):
    """The policy refuses a destination."""


class Unreachable(Exception):
    """An allowed destination could not be reached; ``socks`` is the SOCKS5 reply code."""

    def __init__(self, reason: str, status: int, socks: wire.Socks) -> None:
        super().__init__(reason)
        self.status = status
        self.socks = socks


@functools.cache
def _handoff_directory() -> str:
    """A directory only this user can enter, for the handoff sockets (made once a process)."""
    base = os.path.join(tempfile.gettempdir(), f"goondan-proxy-{os.geteuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return tempfile.mkdtemp(prefix="goondan-proxy-")
    return base


class NetworkProxy:
    """The proxy of one sandboxed program: :meth:`start`, pass :attr:`handoff` to
    :func:`tools_base.sandbox.prepare`, run the program, then :meth:`close`."""

    def __init__(
        self,
        rules: NetworkRules | None = None,
        *,
        check: AddressCheck = public_only,
        sink: ConnectionSink | None = None,
        label: str = "",
    ) -> None:
        self.rules = rules or NetworkRules()
        self.check = check
        """Why an address is refused: :func:`public_only` (a benchmark may admit loopback)."""
        self.sinks: list[ConnectionSink] = [sink] if sink is not None else []
        """Where connections are recorded: the newest gets each (an MCP server's calls push
        and pop theirs)."""
        self.label = label
        self.handoff = ""
        """The Unix socket path the launcher hands the listeners to."""
        self.connections: list[Connection] = []
        self.unrecorded = 0
        """Connections past :data:`MAX_RECORDED`, counted only."""
        self.listening = asyncio.Event()
        """Set once the listeners arrived (a program's connections are then served)."""
        self._handoff_sock: socket.socket | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = False

    async def start(self) -> str:
        """Listen for the handoff; returns its path."""
        path = os.path.join(
            await asyncio.to_thread(_handoff_directory), f"{secrets.token_hex(8)}.sock"
        )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                sock.bind(path)
            except FileNotFoundError:  # the directory was cleaned away: make it again
                _handoff_directory.cache_clear()
                path = os.path.join(_handoff_directory(), os.path.basename(path))
                sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(1)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self._handoff_sock, self.handoff = sock, path
        self._receiver = asyncio.ensure_future(self._receive())
        return path

    async def _receive(self) -> None:
        """Take the listeners from the launcher, then serve them."""
        loop = asyncio.get_running_loop()
        sock = self._handoff_sock
        assert sock is not None
        fds: list[int] = []
        listeners: list[socket.socket] = []
        try:
            async with asyncio.timeout(HANDOFF_SECONDS):
                conn, _ = await loop.sock_accept(sock)
                with conn:
                    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]  # fmt: skip
                    if uid != os.geteuid():
                        raise PermissionError(f"handoff from uid {uid}")
                    ready: asyncio.Future[None] = loop.create_future()

                    def readable() -> None:
                        if not ready.done():
                            ready.set_result(None)

                    loop.add_reader(conn.fileno(), readable)
                    try:
                        await ready
                    finally:
                        loop.remove_reader(conn.fileno())
                    message, fds, _, _ = socket.recv_fds(conn, 64, len(PORTS))
            listeners = [socket.socket(fileno=fd) for fd in fds]
            fds = []
            if message != HANDOFF_TAG or len(listeners) != len(PORTS):
                raise ValueError("the handoff did not carry the proxy's listeners")
            for listener in listeners:
                if listener.type != socket.SOCK_STREAM or not listener.getsockopt(
                    socket.SOL_SOCKET, socket.SO_ACCEPTCONN
                ):
                    raise ValueError("the handoff carried a socket that is not listening")
            http, socks = listeners
            self._servers = [
                await asyncio.start_server(self._serve_http, sock=http, limit=wire.MAX_HEAD_BYTES),
                await asyncio.start_server(self._serve_socks, sock=socks),
            ]
            self.listening.set()
        except Exception as exc:
            _log.warning("sandbox network proxy not set up", program=self.label, error=repr(exc))
            if not self._servers:
                for listener in listeners:
                    listener.close()
        finally:
            for fd in fds:
                os.close(fd)
            self._drop_handoff()

    def _drop_handoff(self) -> None:
        sock, self._handoff_sock = self._handoff_sock, None
        if sock is not None:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.handoff)

    async def close(self) -> None:
        """Stop serving and cut every open connection (their records are made)."""
        self._closed = True
        if self._receiver is not None and not self._receiver.done():
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        self._drop_handoff()
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()  # one still connecting upstream, too: the program is gone
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self.unrecorded:
            _log.warning(
                "sandbox network connections past the record limit",
                program=self.label,
                recorded=len(self.connections),
                unrecorded=self.unrecorded,
            )

    def summary(self) -> dict[str, int]:
        """Connections made and refused, bytes each way."""
        made = [c for c in self.connections if c.allowed]
        return {
            "connections": len(made),
            "refused": len(self.connections) - len(made),
            "bytesUp": sum(c.bytes_up for c in made),
            "bytesDown": sum(c.bytes_down for c in made),
        }

    # -- deciding and recording ---------------------------------------------------------------

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        """The checked addresses to connect to; :class:`Refused` when the policy says no."""
        why = self.rules.refused_host(host)
        if why is not None:
            raise Refused(why)
        literal = parse_address(host)
        mapped = self.rules.mapped(host)
        if literal is not None:
            found = [literal]
        elif mapped is not None:
            found = [mapped]
        elif not valid_host_name(host):
            raise Refused(f"{host[:80]!r} is not a host name")
        else:
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(RESOLVE_SECONDS):
                    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (OSError, TimeoutError) as exc:
                raise Unreachable(
                    f"{host} could not be resolved: {exc}", 502, wire.Socks.HOST_UNREACHABLE
                ) from None
            found = []
            for info in infos:
                address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
                if address not in found:
                    found.append(address)
        for address in found:
            said = await asyncio.to_thread(self.check, address)
            if said is not None:
                raise Refused(f"{host} resolves to {said}" if literal is None else said)
        return found

    async def _open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
        """A connection to the first address of ``host`` that answers."""
        last: Unreachable | None = None
        for address in await self._addresses(host, port):
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    reader, writer = await asyncio.open_connection(str(address), port)
                return reader, writer, str(address)
            except TimeoutError:
                last = Unreachable(
                    f"{address} port {port} did not answer", 504, wire.Socks.TTL_EXPIRED
                )
            except ConnectionRefusedError:
                last = Unreachable(
                    f"{address} port {port} refused the connection",
                    502,
                    wire.Socks.CONNECTION_REFUSED,
                )
            except OSError as exc:
                last = Unreachable(
                    f"{address} port {port}: {exc.strerror or exc}",
                    502,
                    wire.Socks.HOST_UNREACHABLE,
                )
        assert last is not None
        raise last

    def _record(self, connection: Connection, sink: ConnectionSink | None = None) -> None:
        """Keep ``connection`` and hand it to ``sink`` (default: the current call's)."""
        if len(self.connections) >= MAX_RECORDED:
            self.unrecorded += 1
            return
        self.connections.append(connection)
        # The event log has every connection on its call's span; the log, the refusals.
        (_log.debug if connection.allowed else _log.info)(
            "sandbox network connection" if connection.allowed else "sandbox network refused",
            program=self.label,
            **connection.to_json(),
        )
        sink = sink or (self.sinks[-1] if self.sinks else None)
        if sink is not None:
            with contextlib.suppress(Exception):
                sink(connection)

    def _busy(self) -> str | None:
        if self._closed:
            return "the program's call is over"
        if len(self._tasks) > MAX_CONNECTIONS:
            return f"more than {MAX_CONNECTIONS} connections at once"
        return None

    def _track(self, writer: asyncio.StreamWriter) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._writers.add(writer)
        return task

    # -- the two protocols --------------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track(writer)
        started = time.perf_counter()
        try:
            try:
                async with asyncio.timeout(HEAD_SECONDS):
                    head = await reader.readuntil(b"\r\n\r\n")
                request = wire.parse_head(head)
            except TimeoutError:
                writer.write(wire.http_answer(408, "no complete request head in time"))
                return
            except asyncio.LimitOverrunError:
                writer.write(wire.http_answer(431, "request head too large"))
                return
            except asyncio.IncompleteReadError:
                return
            except wire.WireError as exc:
                writer.write(wire.http_answer(exc.status, exc.reason))
                return
            record = Connection(
                "connect" if request.tunnel else "http", request.host, request.port, True
            )
            busy = self._busy()
            try:
                if busy is not None:
                    raise Refused(busy)
                up_reader, up_writer, record.address = await self._open(request.host, request.port)
            except Refused as exc:
                record.allowed, record.reason = False, str(exc)
                writer.write(wire.http_answer(403, str(exc)))
                self._record(record)
                return
            except Unreachable as exc:
                record.reason = str(exc)
                writer.write(wire.http_answer(exc.status, str(exc)))
                self._record(record)
                return
            if request.tunnel:
                writer.write(wire.http_answer(200, ""))
            else:
                record.bytes_up += len(head)
                up_writer.write(request.forward)
            await self._relay(reader, writer, up_reader, up_writer, record, started)
        finally:
            await self._hang_up(writer)

    async def _hang_up(self, writer: asyncio.StreamWriter) -> None:
        """Flush what is left for the client, then close its connection."""
        self._writers.discard(writer)
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()

    async def _serve_socks(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._track(writer)
        started = time.perf_counter()
        try:
            try:
                async with asyncio.timeout(HEAD_SECONDS):
                    target = await self._socks_request(reader, writer)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return
            if target is None:
                return
            host, port = target
            record = Connection("socks5", host, port, True)
            busy = self._busy()
            try:
                if busy is not None:
                    raise Refused(busy)
                up_reader, up_writer, record.address = await self._open(host, port)
            except Refused as exc:
                record.allowed, record.reason = False, str(exc)
                writer.write(wire.socks_reply(wire.Socks.NOT_ALLOWED))
                self._record(record)
                return
            except Unreachable as exc:
                record.reason = str(exc)
                writer.write(wire.socks_reply(exc.socks))
                self._record(record)
                return
            writer.write(wire.socks_reply(wire.Socks.SUCCEEDED))
            await self._relay(reader, writer, up_reader, up_writer, record, started)
        finally:
            await self._hang_up(writer)

    async def _socks_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        """The greeting and the request; ``None`` (answered) when they are not ours to serve."""
        version, count = await reader.readexactly(2)
        if version != wire.SOCKS_VERSION:
            return None  # SOCKS4 or not SOCKS at all: nothing sensible to answer
        methods = await reader.readexactly(count)
        if wire.SOCKS_NO_AUTH not in methods:
            writer.write(wire.SOCKS_NO_METHOD)
            return None
        writer.write(bytes((wire.SOCKS_VERSION, wire.SOCKS_NO_AUTH)))
        version, command, _, kind = await reader.readexactly(4)
        if version != wire.SOCKS_VERSION:
            writer.write(wire.socks_reply(wire.Socks.GENERAL_FAILURE))
            return None
        if kind == wire.ATYP_IPV4:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == wire.ATYP_IPV6:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == wire.ATYP_NAME:
            raw = await reader.readexactly((await reader.readexactly(1))[0])
            host = raw.decode("ascii", "replace").lower().rstrip(".")
        else:
            writer.write(wire.socks_reply(wire.Socks.ADDRESS_TYPE_NOT_SUPPORTED))
            return None
        port = struct.unpack("!H", await reader.readexactly(2))[0]
        if command != wire.SOCKS_CONNECT:
            writer.write(wire.socks_reply(wire.Socks.COMMAND_NOT_SUPPORTED))
            return None
        if port == 0 or not valid_host_name(host):
            self._record(Connection("socks5", host[:253], port, False, "not a host and port"))
            writer.write(wire.socks_reply(wire.Socks.NOT_ALLOWED))
            return None
        return host, port

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        record: Connection,
        started: float,
    ) -> None:
        """Bytes both ways until both ends are done; the record counts them, and goes to the
        sink of the call under way when the connection opened (a long-lived program's
        connection may outlast its call)."""
        self._writers.add(up_writer)
        sink = self.sinks[-1] if self.sinks else None

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(_CHUNK):
                    if up:
                        record.bytes_up += len(data)
                    else:
                        record.bytes_down += len(data)
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof() and not dst.is_closing():
                    dst.write_eof()

        try:
            # What the client sent past its head (buffered already) goes first.
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()
            record.duration_ms = (time.perf_counter() - started) * 1000
            self._record(record, sink)
