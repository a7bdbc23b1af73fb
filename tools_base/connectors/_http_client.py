"""A small asyncio HTTP/1.1 client for connectors that call an API (one request, one connection).

Why not ``http.client`` in a thread: a long poll holds a request open for half a minute, and a
thread blocked in ``recv`` cannot be cancelled, so stopping the connector would hang (or leak a
thread that keeps the token in flight). Here the request is a coroutine: cancelling it aborts the
connection at once.

Each request opens a connection, sends ``Connection: close`` and reads the answer whole (with a
``content-length``, chunked, or to the end of the stream), refusing an answer over
``max_bytes``. Errors are :class:`HttpClientError` (and ``TimeoutError`` from the caller's
deadline); their messages name the host and port, never the path, which may hold a token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from dataclasses import dataclass

from tools_base.tools.http_fetch import Url

USER_AGENT = "goondan-connectors/0.1"
MAX_HEAD_BYTES = 64 * 1024
"""Status line and headers together."""


class HttpClientError(Exception):
    """The request could not be made or the answer could not be read."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.1``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One HTTP answer, read whole."""

    status: int
    headers: dict[str, str]
    """Lower-case names; a repeated header keeps its last value."""
    body: bytes


async def request(
    method: str,
    url: Url,
    target: str,
    *,
    headers: dict[str, str],
    body: bytes | None,
    max_bytes: int,
    tls: ssl.SSLContext | None = None,
) -> HttpAnswer:
    """Send ``method target`` to ``url``'s host and read the answer.

    ``target`` is the path (and query) sent in the request line; ``url`` supplies scheme, host
    and port. The caller bounds the whole exchange with ``asyncio.timeout``; cancellation
    closes the connection.
    """
    where = f"{url.host}:{url.port}"
    context = (tls or ssl.create_default_context()) if url.scheme == "https" else None
    try:
        reader, writer = await asyncio.open_connection(
            url.host,
            url.port,
            ssl=context,
            server_hostname=url.host if context is not None else None,
            limit=MAX_HEAD_BYTES,
        )
    except OSError as exc:  # ssl.SSLError and socket.gaierror are OSErrors
        raise HttpClientError(f"cannot connect to {where}: {_reason(exc)}") from None
    try:
        default_port = 443 if url.scheme == "https" else 80
        host = url.host if ":" not in url.host else f"[{url.host}]"
        lines = [
            f"{method} {target} HTTP/1.1",
            f"host: {host if url.port == default_port else f'{host}:{url.port}'}",
            f"user-agent: {USER_AGENT}",
            "connection: close",
            "accept-encoding: identity",
        ]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"content-length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        await writer.drain()
        status, answer_headers = await _read_head(reader, where)
        data = await _read_body(reader, answer_headers, max_bytes, where)
        return HttpAnswer(status=status, headers=answer_headers, body=data)
    except OSError as exc:
        raise HttpClientError(f"connection to {where} failed: {_reason(exc)}") from None
    finally:
        # Never reused (connection: close); abort rather than close so a cancelled long poll
        # does not wait for a TLS goodbye.
        writer.transport.abort()


async def _read_head(reader: asyncio.StreamReader, where: str) -> tuple[int, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise HttpClientError(f"{where} closed the connection without answering") from None
        raise HttpClientError(f"{where} closed the connection in the answer's headers") from None
    except asyncio.LimitOverrunError:
        raise HttpClientError(f"{where} sent headers over {MAX_HEAD_BYTES} bytes") from None
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpClientError(f"{where} did not answer in HTTP/1.x")
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], max_bytes: int, where: str
) -> bytes:
    too_large = HttpClientError(f"{where} sent an answer over {max_bytes} bytes")
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader, max_bytes, too_large)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise HttpClientError(f"{where} sent a bad content-length")
            if int(length) > max_bytes:
                raise too_large
            return await reader.readexactly(int(length))
        chunks: list[bytes] = []
        total = 0
        while data := await reader.read(64 * 1024):
            total += len(data)
            if total > max_bytes:
                raise too_large
            chunks.append(data)
        return b"".join(chunks)
    except asyncio.IncompleteReadError:
        raise HttpClientError(f"{where} closed the connection in the answer's body") from None
    except asyncio.LimitOverrunError:
        raise HttpClientError(f"{where} sent a malformed chunked answer") from None


async def _read_chunked(
    reader: asyncio.StreamReader, max_bytes: int, too_large: HttpClientError
) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise HttpClientError("malformed chunk size in the answer") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        total += size
        if total > max_bytes:
            raise too_large
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__
