"""The network proxy over real sockets: listeners handed over as the launcher hands them, hostile
clients (malformed, oversized, slow, wrong SOCKS version or method), refusals answered at once
and recorded, and bytes counted both ways. Upstreams are servers on this machine's loopback,
so the proxies that must reach them are built with an address check that admits everything;
the refusals use the real one (``public_only``)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tools_base.sandbox import Connection, NetworkProxy, NetworkRules
from tools_base.sandbox import _proxy as proxy_module
from tools_base.sandbox._netns import connect_handoff, send_listeners
from tools_base.sandbox._netpolicy import AddressCheck, public_only

pytestmark = pytest.mark.timeout(30)


def admit_all(address: Any) -> str | None:
    return None


class Running:
    def __init__(self, proxy: NetworkProxy, http: int, socks: int, records: list[Connection]):
        self.proxy, self.http, self.socks, self.records = proxy, http, socks, records
        self.recorded = asyncio.Event()

    async def open(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", port)

    async def http_exchange(self, data: bytes) -> bytes:
        reader, writer = await self.open(self.http)
        writer.write(data)
        writer.write_eof()  # one request: an echoing upstream ends when the client does
        try:
            async with asyncio.timeout(10):
                return await reader.read()
        finally:
            writer.close()


async def start(check: AddressCheck, rules: NetworkRules | None = None) -> Running:
    """A proxy whose listeners (on this namespace's loopback, free ports) arrive through its
    handoff socket, as the launcher sends them."""
    records: list[Connection] = []
    recorded = asyncio.Event()

    def sink(connection: Connection) -> None:
        records.append(connection)
        recorded.set()

    proxy = NetworkProxy(rules, check=check, sink=sink, label="test")
    path = await proxy.start()
    listeners = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        listeners.append(sock)
    http, socks = (s.getsockname()[1] for s in listeners)
    handoff = await asyncio.to_thread(connect_handoff, path)
    with handoff:
        send_listeners(handoff, listeners)
    async with asyncio.timeout(10):
        await proxy.listening.wait()
    running = Running(proxy, http, socks, records)
    running.recorded = recorded
    return running


@pytest.fixture
async def strict() -> AsyncIterator[Running]:
    running = await start(public_only)
    yield running
    await running.proxy.close()


@pytest.fixture
async def admitting() -> AsyncIterator[Running]:
    running = await start(admit_all)
    yield running
    await running.proxy.close()


@pytest.fixture
async def echo() -> AsyncIterator[tuple[int, list[bytes]]]:
    """An upstream that echoes, and what it was sent (heads included)."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            seen.append(data)
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], seen
    server.close()
    await server.wait_closed()


async def test_connect_to_loopback_is_refused_at_once_and_recorded(
    strict: Running, echo: tuple[int, list[bytes]]
) -> None:
    port, seen = echo
    answer = await strict.http_exchange(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"X-Goondan-Proxy-Refusal: 127.0.0.1 is in 127.0.0.0/8" in answer
    [record] = strict.records
    assert (record.protocol, record.host, record.port, record.allowed) == (
        "connect", "127.0.0.1", port, False,
    )  # fmt: skip
    assert not seen


async def test_a_name_that_resolves_to_loopback_is_refused(strict: Running) -> None:
    answer = await strict.http_exchange(b"GET http://localhost:9/ HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403")
    assert "localhost resolves to" in (strict.records[0].reason or "")


async def test_a_name_with_one_private_answer_among_public_ones_is_refused(
    strict: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo

    def resolver(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "mixed.test":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    answer = await strict.http_exchange(b"CONNECT mixed.test:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403")
    [record] = strict.records
    assert "10.0.0.1" in (record.reason or "")
    assert record.address is None  # never connected, not even to the public answer


async def test_allow_and_deny_are_answered_403(echo: tuple[int, list[bytes]]) -> None:
    port, _ = echo
    rules = NetworkRules(allow=("*.allowed.test",), deny=("no.allowed.test",))
    running = await start(admit_all, rules)
    try:
        for host in ("other.test", "no.allowed.test"):
            answer = await running.http_exchange(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403"), answer
        assert [r.allowed for r in running.records] == [False, False]
    finally:
        await running.proxy.close()


async def test_connect_relays_both_ways_and_counts_bytes(
    admitting: Running, echo: tuple[int, list[bytes]]
) -> None:
    port, seen = echo
    reader, writer = await admitting.open(admitting.http)
    writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\nearly".encode())
    async with asyncio.timeout(10):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection Established\r\n\r\n"
        assert await reader.readexactly(5) == b"early"  # sent with the head: not lost
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.write_eof()
        assert await reader.read() == b""
    writer.close()
    async with asyncio.timeout(10):
        await admitting.recorded.wait()
    [record] = admitting.records
    assert (record.allowed, record.address, record.bytes_up, record.bytes_down) == (
        True, "127.0.0.1", 9, 9,
    )  # fmt: skip
    assert b"".join(seen) == b"earlyping"


async def test_plain_http_goes_upstream_in_origin_form(
    admitting: Running, echo: tuple[int, list[bytes]]
) -> None:
    port, seen = echo
    answer = await admitting.http_exchange(
        f"GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\nProxy-Authorization: k\r\n\r\n".encode()
    )
    sent = f"GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    assert b"".join(seen) == sent.encode()
    assert answer == sent.encode()  # the echo server's answer is what it got


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"CONNECT example.com HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT [::1:443 HTTP/1.1\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\r\n\r\n", b"400"),  # TLS to the HTTP port
        (b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", b"400"),
        (b"CONNECT a:1 HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
    ],
)
async def test_a_hostile_head_is_answered_and_closed(
    strict: Running, data: bytes, status: bytes
) -> None:
    answer = await strict.http_exchange(data)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:80]
    assert not strict.records


async def test_a_slow_client_is_cut_off_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_module, "HEAD_SECONDS", 0.2)
    running = await start(admit_all)
    try:
        reader, writer = await running.open(running.http)
        writer.write(b"CONNECT exam")  # and nothing more
        async with asyncio.timeout(10):
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408")
        reader, writer = await running.open(running.socks)
        writer.write(b"\x05")  # half a greeting
        async with asyncio.timeout(10):
            assert await reader.read() == b""
        writer.close()
    finally:
        await running.proxy.close()


async def socks(running: Running, *parts: bytes) -> bytes:
    reader, writer = await running.open(running.socks)
    try:
        out = b""
        async with asyncio.timeout(10):
            for part in parts:
                writer.write(part)
                chunk = await reader.read(4096)
                out += chunk
                if not chunk:
                    break
        return out
    finally:
        writer.close()


def socks_request(command: int, kind: int, address: bytes, port: int) -> bytes:
    return bytes((5, command, 0, kind)) + address + struct.pack("!H", port)


async def test_socks_with_a_bad_version_or_method(strict: Running) -> None:
    assert await socks(strict, b"\x04\x01\x00\x50\x7f\x00\x00\x01\x00") == b""  # SOCKS4
    assert await socks(strict, b"\x05\x01\x02") == b"\x05\xff"  # username/password only
    bind = socks_request(2, 1, socket.inet_aton("8.8.8.8"), 53)
    assert (await socks(strict, b"\x05\x01\x00", bind))[2 + 1] == 7
    odd = bytes((5, 1, 0, 9)) + b"\x00" * 6
    assert (await socks(strict, b"\x05\x01\x00", odd))[2 + 1] == 8
    assert not strict.records


@pytest.mark.parametrize(
    ("kind", "address", "host"),
    [
        (4, socket.inet_pton(socket.AF_INET6, "::1"), "::1"),
        (4, socket.inet_pton(socket.AF_INET6, "::ffff:169.254.169.254"), "::ffff:a9fe:a9fe"),
        (1, socket.inet_aton("169.254.169.254"), "169.254.169.254"),
        (3, b"\x09localhost", "localhost"),
    ],
)
async def test_socks_refuses_this_machine_with_reply_2(
    strict: Running, kind: int, address: bytes, host: str
) -> None:
    answer = await socks(strict, b"\x05\x01\x00", socks_request(1, kind, address, 80))
    assert answer[:2] == b"\x05\x00"
    assert answer[2:4] == b"\x05\x02"  # connection not allowed by ruleset
    [record] = strict.records
    assert (record.protocol, record.host, record.allowed) == ("socks5", host, False)


async def test_socks_connects_and_relays(admitting: Running, echo: tuple[int, list[bytes]]) -> None:
    port, _ = echo
    reader, writer = await admitting.open(admitting.socks)
    writer.write(b"\x05\x01\x00" + socks_request(1, 3, b"\x09127.0.0.1", port))
    async with asyncio.timeout(10):
        assert await reader.readexactly(2 + 10) == b"\x05\x00\x05\x00\x00\x01" + b"\x00" * 6
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
    writer.close()
    await admitting.proxy.close()  # cuts what is still open, and records it
    [record] = admitting.records
    assert (record.allowed, record.bytes_up, record.bytes_down) == (True, 5, 5)


async def test_an_unreachable_host_is_502_not_a_hang(admitting: Running) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: refused
        answer = await admitting.http_exchange(
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()
        )
    assert answer.startswith(b"HTTP/1.1 502")
    [record] = admitting.records
    assert record.allowed
    assert "refused the connection" in (record.reason or "")


async def test_a_handoff_without_listeners_serves_nothing() -> None:
    proxy = NetworkProxy(check=admit_all)
    path = await proxy.start()
    handoff: Callable[[], socket.socket] = lambda: connect_handoff(path)  # noqa: E731
    with await asyncio.to_thread(handoff) as sock:
        sock.sendall(b"no descriptors here")
        assert proxy._receiver is not None
        async with asyncio.timeout(10):
            await proxy._receiver  # it gave up on this handoff
    assert not proxy.listening.is_set()
    await proxy.close()


async def test_a_flood_of_refusals_is_recorded_up_to_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(proxy_module, "MAX_RECORDED", 3)
    running = await start(public_only)
    try:
        for _ in range(5):
            answer = await running.http_exchange(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 403")  # every one still answered
    finally:
        await running.proxy.close()
    assert len(running.records) == 3
    assert running.proxy.unrecorded == 2


async def test_a_connection_that_outlives_its_call_is_recorded_on_that_call(
    admitting: Running, echo: tuple[int, list[bytes]]
) -> None:
    # A long-lived program (an MCP server) keeps a connection open past the call that made
    # it: its record still belongs to that call, not to the next one, nor to nobody.
    port, _ = echo
    first: list[Connection] = []
    later: list[Connection] = []
    recorded = asyncio.Event()

    def on_first(connection: Connection) -> None:
        first.append(connection)
        recorded.set()

    admitting.proxy.sinks.append(on_first)
    reader, writer = await admitting.open(admitting.http)
    writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    async with asyncio.timeout(10):
        await reader.readuntil(b"\r\n\r\n")
    admitting.proxy.sinks.remove(on_first)  # the call ended; the connection did not
    admitting.proxy.sinks.append(later.append)
    writer.write_eof()
    async with asyncio.timeout(10):
        assert await reader.read() == b""
        await recorded.wait()
    writer.close()
    assert [record.port for record in first] == [port]
    assert later == []
