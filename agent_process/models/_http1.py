"""A lean HTTP/1.1 client for a model API's calls: keep-alive connections shared per process.

A provider's call is one ``POST`` of a JSON body whose answer is JSON or a server-sent event
stream. The general-purpose clients (httpx and httpcore under the official SDKs) cost about
0.5 ms of CPU per call on top of the SDK's own 0.7 ms: connection-pool bookkeeping that
visits every pooled connection per request, header objects, anyio's stream layer. On the
event loop's own streams the same exchange costs a few dozen microseconds.

What it speaks: ``http`` and ``https`` (the CA store of httpx, so ``SSL_CERT_FILE`` still
counts), answers framed by ``content-length``, ``transfer-encoding: chunked`` or the end of
the connection, ``gzip``/``deflate`` bodies. Proxies are not spoken: a provider whose origin an
environment proxy applies to (``HTTPS_PROXY``, ``ALL_PROXY``... minus ``NO_PROXY``) keeps the
SDK's client (see :func:`proxied`).

Timeouts are httpx's: connecting, and then each read, each get the timeout (a stream may last
longer than it as long as it keeps sending). Failures are :class:`ConnectionFailed` or
:class:`TimedOut`; the caller decides on retries.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
import weakref
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

READ_LIMIT = 1 << 20
"""The longest head line or chunk-size line a response may have."""
MAX_BODY_BYTES = 64 << 20
"""The most an answer's body may hold, framed or decompressed: a provider answering without end
(a chunk size of terabytes, a body that never closes, a gzip bomb) fails the call instead of
filling the agent's memory. A model's answer, streamed or not, is a few MiB at the very most."""
MAX_IDLE_PER_ORIGIN = 256
"""Idle keep-alive connections kept per origin (more are closed when handed back)."""
KEEPALIVE_EXPIRY_SECONDS = 5.0
"""An idle connection older than this is closed rather than reused (httpx's default): a
connection a middlebox dropped without a word would otherwise take a read timeout to notice."""


class ConnectionFailed(Exception):
    """The connection could not be made, or broke before the answer was read."""


class TimedOut(ConnectionFailed):
    """Connecting, or one read of the answer, took longer than the timeout."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host and port of a base URL, and the path under it."""

    scheme: str
    host: str
    port: int
    path: str
    """The base URL's path, ending in ``/``."""

    @classmethod
    def of(cls, base_url: str) -> Origin:
        """The origin of ``base_url`` (``http`` or ``https``; a ``ValueError`` otherwise)."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        return cls(parts.scheme, parts.hostname, port, path)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def proxied(origin: Origin) -> bool:
    """Whether an environment proxy applies to ``origin`` (as httpx reads the environment)."""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(origin.scheme) or proxies.get("all")):
        return False
    bypassed = [name.strip().lstrip(".").lower() for name in proxies.get("no", "").split(",")]
    host = origin.host.lower()
    return not any(
        name == "*" or host == name or host.endswith("." + name) for name in bypassed if name
    )


@dataclass(slots=True)
class Answer:
    """The status and head of one response; its body is read from ``connection``."""

    status: int
    headers: dict[str, str]
    """Names lower-cased; a repeated header keeps its last value."""
    keep_alive: bool
    """Whether the connection may serve another request (HTTP/1.1 unless it says ``close``,
    HTTP/1.0 only when it says ``keep-alive``)."""


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


_SSL: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    global _SSL
    if _SSL is None:
        import httpx2  # its CA store and environment (SSL_CERT_FILE...), once per process

        _SSL = httpx2.create_ssl_context()
    return _SSL


class Pool:
    """Keep-alive connections to one origin, on one event loop."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.keepalive_expiry = KEEPALIVE_EXPIRY_SECONDS
        """Seconds an idle connection may wait to be reused."""
        self._idle: list[_Connection] = []

    async def _connect(self, seconds: float | None) -> _Connection:
        origin = self.origin
        tls = _ssl_context() if origin.scheme == "https" else None
        try:
            async with asyncio.timeout(seconds):
                reader, writer = await asyncio.open_connection(
                    origin.host, origin.port, ssl=tls, limit=READ_LIMIT
                )
        except TimeoutError:
            raise TimedOut("connect") from None
        except OSError as exc:
            raise ConnectionFailed(str(exc)) from exc
        return _Connection(reader, writer)

    def _take_idle(self) -> _Connection | None:
        oldest = asyncio.get_running_loop().time() - self.keepalive_expiry
        while self._idle:
            connection = self._idle.pop()  # the most recently used first
            if connection.idle_since < oldest:
                for stale in [connection, *self._idle]:  # the rest are older still
                    stale.close()
                self._idle.clear()
                return None
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return connection
            connection.close()
        return None

    def _give_back(self, connection: _Connection) -> None:
        if len(self._idle) < MAX_IDLE_PER_ORIGIN:
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle.append(connection)
        else:
            connection.close()

    @asynccontextmanager
    async def post(
        self,
        path: str,
        head: bytes,
        body: bytes,
        read_seconds: float | None,
        connect_seconds: float | None = None,
    ) -> AsyncIterator[tuple[Answer, AsyncIterator[bytes]]]:
        """``POST`` ``body`` to ``path`` (under the origin's path) with the header lines
        ``head``; yields the answer and its body's pieces as they arrive. ``read_seconds``
        bound each read (``None``: none), ``connect_seconds`` the connecting (by default
        ``read_seconds``). The connection goes back to the pool when the body was read to its end,
        else it is closed."""
        request = (
            b"POST %s%s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n%s\r\n"
            % (
                self.origin.path.encode(),
                path.encode(),
                self.origin.host_header.encode(),
                len(body),
                head,
            )
            + body
        )
        connection = self._take_idle()
        try:
            if connection is not None:
                try:
                    answer = await _exchange(connection, request, read_seconds)
                except ConnectionFailed:
                    # The server closed the idle connection as it was reused: a new one.
                    connection.close()
                    connection = None
            if connection is None:
                connection = await self._connect(
                    read_seconds if connect_seconds is None else connect_seconds
                )
                answer = await _exchange(connection, request, read_seconds)
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        body_reader = _Body(connection, answer, read_seconds)
        pieces = body_reader.pieces()
        try:
            yield answer, pieces
        finally:
            await pieces.aclose()
            if body_reader.done and body_reader.keep_alive:
                self._give_back(connection)
            else:
                connection.close()


async def _exchange(connection: _Connection, request: bytes, seconds: float | None) -> Answer:
    """Write ``request``; read the answer's status line and headers."""
    try:
        async with asyncio.timeout(seconds):
            connection.writer.write(request)
            await connection.writer.drain()
            raw = await connection.reader.readuntil(b"\r\n\r\n")
    except TimeoutError:
        raise TimedOut("read") from None
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise ConnectionFailed(str(exc) or type(exc).__name__) from exc
    lines = raw.decode("latin-1").split("\r\n")
    try:
        version, status_text = lines[0].split(" ", 2)[:2]
        status = int(status_text)
    except ValueError:
        raise ConnectionFailed(f"not an HTTP response: {lines[0][:80]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    said = headers.get("connection", "").lower()
    keep_alive = said == "keep-alive" if version == "HTTP/1.0" else said != "close"
    return Answer(status, headers, keep_alive)


class _Body:
    """The body of one answer, by its framing; whether the connection may serve again."""

    __slots__ = ("answer", "connection", "done", "keep_alive", "timeout")

    def __init__(self, connection: _Connection, answer: Answer, timeout: float | None) -> None:
        self.connection = connection
        self.answer = answer
        self.timeout = timeout
        self.done = False
        self.keep_alive = answer.keep_alive

    async def pieces(self) -> AsyncGenerator[bytes, None]:
        headers = self.answer.headers
        encoding = headers.get("content-encoding", "identity").lower()
        inflate = None
        if encoding in ("gzip", "deflate"):
            inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by its header
        elif encoding != "identity":
            raise ConnectionFailed(f"unsupported content-encoding {encoding!r}")
        left = MAX_BODY_BYTES
        async for piece in self._framed(MAX_BODY_BYTES):
            if inflate is not None:
                # At most one byte past the cap: an answer inflating beyond it fails here,
                # before the rest of a bomb is ever expanded.
                piece = inflate.decompress(piece, left + 1)
            left -= len(piece)
            if left < 0:
                raise _too_large()
            yield piece
        if inflate is not None:
            rest = inflate.flush()
            if len(rest) > left:
                raise _too_large()
            if rest:
                yield rest
        self.done = True

    async def _framed(self, cap: int) -> AsyncIterator[bytes]:
        """The body's bytes as framed on the wire; no more than ``cap`` of them."""
        reader = self.connection.reader
        headers = self.answer.headers
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await self._timed(reader.readuntil(b"\r\n"))
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ConnectionFailed(f"bad chunk size {size_line[:40]!r}") from None
                cap -= size
                if cap < 0:
                    raise _too_large()  # before reading a chunk that could never fit
                if size == 0:
                    while await self._timed(reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    return
                piece = await self._timed(reader.readexactly(size + 2))
                yield piece[:-2]
        elif "content-length" in headers:
            try:
                left = int(headers["content-length"])
            except ValueError:
                raise ConnectionFailed("bad content-length") from None
            if left > cap:
                raise _too_large()
            while left > 0:
                piece = await self._timed(reader.read(min(left, 1 << 16)))
                if not piece:
                    raise ConnectionFailed(f"the connection closed {left} bytes short")
                left -= len(piece)
                yield piece
        else:  # the body ends with the connection
            self.keep_alive = False
            while piece := await self._timed(reader.read(1 << 16)):
                cap -= len(piece)
                if cap < 0:
                    raise _too_large()
                yield piece

    async def _timed(self, read: Awaitable[bytes]) -> bytes:
        """One read, within the timeout (never spanning a ``yield``: the deadline belongs to
        the read alone, not to what the caller does with a piece)."""
        try:
            async with asyncio.timeout(self.timeout):
                return await read
        except TimeoutError:
            raise TimedOut("read") from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise ConnectionFailed(str(exc) or type(exc).__name__) from exc


def _too_large() -> ConnectionFailed:
    return ConnectionFailed(f"the answer is larger than {MAX_BODY_BYTES >> 20} MiB")


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Origin, Pool]] = (
    weakref.WeakKeyDictionary()
)


def pool_of(origin: Origin) -> Pool:
    """The process's pool of ``origin`` on the running loop (every Model and Turn shares it)."""
    loop = asyncio.get_running_loop()
    pools = _POOLS.setdefault(loop, {})
    pool = pools.get(origin)
    if pool is None:
        pool = pools[origin] = Pool(origin)
    return pool


def close_pools() -> None:
    """Close every idle connection of the running loop's pools and forget the pools: before
    the loop ends, so no connection outlives it (a transport the loop never closed would be
    closed by the collector, after the loop, with a warning)."""
    loop = asyncio.get_running_loop()
    for pool in _POOLS.pop(loop, {}).values():
        for connection in pool._idle:
            connection.close()
        pool._idle.clear()
