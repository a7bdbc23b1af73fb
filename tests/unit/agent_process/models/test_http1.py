"""The lean HTTP/1.1 client against a real loopback server writing raw responses."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_process.models import _http1
from agent_process.models._http1 import ConnectionFailed, Origin, TimedOut, pool_of, proxied

Respond = Callable[[bytes], bytes | None]
"""Given a request's bytes, the raw response (``None``: say nothing, keep the connection)."""


Starter = Callable[..., Awaitable["RawServer"]]
"""Starts a :class:`RawServer` (``respond``, ``close_after``) for the test."""


class RawServer:
    """Answers each request with ``respond``; counts connections and requests."""

    def __init__(self, respond: Respond, close_after: bool = False) -> None:
        self.respond = respond
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.respond(request)
                if answer is None:
                    await asyncio.sleep(3600)  # never answers: the client's timeout is tested
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def start() -> AsyncIterator[Starter]:
    servers: list[asyncio.Server] = []

    async def started(respond: Respond, close_after: bool = False) -> RawServer:
        raw = RawServer(respond, close_after)
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        servers.append(server)
        raw.port = server.sockets[0].getsockname()[1]
        return raw

    yield started
    _http1.close_pools()
    for server in servers:
        server.close()


def response(body: bytes, *headers: str, version: str = "HTTP/1.1") -> bytes:
    head = "".join(f"{line}\r\n" for line in headers)
    return f"{version} 200 OK\r\n{head}\r\n".encode() + body


def sized(body: bytes, *headers: str, version: str = "HTTP/1.1") -> bytes:
    return response(body, f"content-length: {len(body)}", *headers, version=version)


async def post(raw: RawServer, read_seconds: float | None = 10.0) -> tuple[int, bytes]:
    pool = pool_of(Origin.of(f"http://127.0.0.1:{raw.port}/v1"))
    async with pool.post("chat", b"x-test: 1\r\n", b'{"a": 1}', read_seconds) as (answer, body):
        return answer.status, b"".join([piece async for piece in body])


async def test_a_request_on_the_wire_and_keep_alive_across_calls(
    start: Starter,
) -> None:
    raw = await start(lambda request: sized(b'{"ok": true}'))
    for _ in range(3):
        assert await post(raw) == (200, b'{"ok": true}')
    assert raw.connections == 1
    head, _, body = raw.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat HTTP/1.1"
    assert {b"host: 127.0.0.1:%d" % raw.port, b"content-length: 8", b"x-test: 1"} <= set(lines)
    assert body == b'{"a": 1}'


@pytest.mark.parametrize(
    "framing",
    ["chunked", "until close", "gzip", "HTTP/1.0"],
)
async def test_every_framing_of_a_body(start: Starter, framing: str) -> None:
    text = b'{"choices": []}' * 50
    if framing == "chunked":
        parts = [text[:7], text[7:300], text[300:]]
        chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        answer = response(chunks, "transfer-encoding: chunked")
    elif framing == "gzip":
        answer = sized(gzip.compress(text), "content-encoding: gzip")
    elif framing == "HTTP/1.0":
        answer = sized(text, version="HTTP/1.0")
    else:
        answer = response(text, "connection: close")
    raw = await start(lambda request: answer, close_after=framing == "until close")
    assert await post(raw) == (200, text)
    assert await post(raw) == (200, text)
    reused = framing in ("chunked", "gzip")
    assert raw.connections == (1 if reused else 2)


async def test_an_idle_connection_the_server_closed_is_replaced(
    start: Starter,
) -> None:
    # The server closes after each answer without saying so: the next call finds the pooled
    # connection dead and makes a new one, without an error.
    raw = await start(lambda request: sized(b"{}"), close_after=True)
    for _ in range(3):
        assert await post(raw) == (200, b"{}")
    assert raw.connections == 3


async def test_an_idle_connection_past_its_expiry_is_not_reused(start: Starter) -> None:
    raw = await start(lambda request: sized(b"{}"))
    pool_of(Origin.of(f"http://127.0.0.1:{raw.port}/v1")).keepalive_expiry = 0.0
    for _ in range(3):
        assert await post(raw) == (200, b"{}")
    assert raw.connections == 3


async def test_a_read_that_outlasts_the_timeout(
    start: Starter,
) -> None:
    raw = await start(lambda request: None)
    with pytest.raises(TimedOut):
        await post(raw, read_seconds=0.2)


async def test_a_body_cut_short_and_a_refused_connection_fail(
    start: Starter,
) -> None:
    raw = await start(lambda request: response(b"{}", "content-length: 10"), close_after=True)
    with pytest.raises(ConnectionFailed, match="short"):
        await post(raw)
    raw.port = 1  # nothing listens on port 1
    with pytest.raises(ConnectionFailed):
        await post(raw)


@pytest.mark.parametrize(
    "hostile",
    ["a chunk of a terabyte", "a length of a terabyte", "a gzip bomb", "no end"],
)
async def test_an_answer_past_the_cap_fails_before_it_is_read(
    start: Starter, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http1, "MAX_BODY_BYTES", 1 << 20)
    if hostile == "a chunk of a terabyte":
        answer = response(b"ffffffffff\r\n{", "transfer-encoding: chunked")
    elif hostile == "a length of a terabyte":
        answer = response(b"{", "content-length: 1099511627776")
    elif hostile == "a gzip bomb":  # 4 KiB on the wire, 16 MiB inflated
        answer = sized(gzip.compress(bytes(16 << 20)), "content-encoding: gzip")
    else:
        answer = response(b"x" * (2 << 20), "connection: close")
    raw = await start(lambda request: answer, close_after=hostile == "no end")
    # Each fails at once, not after its read timeout (which would raise TimedOut, not this).
    with pytest.raises(ConnectionFailed, match="larger than 1 MiB"):
        await post(raw, read_seconds=30.0)


async def test_closing_the_pools_closes_their_idle_connections(start: Starter) -> None:
    raw = await start(lambda request: sized(b"{}"))
    assert await post(raw) == (200, b"{}")
    [idle] = pool_of(Origin.of(f"http://127.0.0.1:{raw.port}/v1"))._idle
    _http1.close_pools()  # as an agent process does before its loop ends
    assert idle.writer.is_closing()
    assert await post(raw) == (200, b"{}")  # a new pool, a new connection
    assert raw.connections == 2


def test_an_environment_proxy_is_noticed_with_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    api = Origin.of("https://api.example.com/v1")
    assert not proxied(api)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert proxied(api)
    assert not proxied(Origin.of("http://api.example.com/v1"))  # only https is proxied
    monkeypatch.setenv("NO_PROXY", "localhost,.example.com")
    assert not proxied(api)
