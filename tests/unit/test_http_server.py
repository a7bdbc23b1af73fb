"""The guarded HTTP server (goondan.http_server, with goondan.http_admission) under short
limits, in this process: real sockets on loopback, real clients (asyncio streams); every wait
bounded. Each guard is tried on both of uvicorn's parsers: httptools (served where installed)
and h11 (the fallback)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from goondan.http_admission import ConnectionLimits
from goondan.http_server import PIPELINED_MAX, GuardedServer, http_parser

pytestmark = pytest.mark.timeout(30)

App = Callable[[Any, Any, Any], Awaitable[None]]
PARSERS = ["httptools", "h11"]


@pytest.fixture(params=PARSERS)
def http(request: pytest.FixtureRequest) -> str:
    """The parser the server is asked for (``uvicorn.Config(http=...)``)."""
    parser: str = request.param
    return parser


class Log:
    """The server's log: each line kept, and awaitable."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.written = asyncio.Event()

    def warning(self, event: str, /, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})
        self.written.set()


class Held:
    """An app whose requests wait until released; it counts who came in."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.arrived = asyncio.Condition()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went, or the server cut it off
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        async with self.arrived:
            self.entered += 1
            self.arrived.notify_all()
        if scope["path"] != "/quick":
            await self.release.wait()
        answer = json.dumps({"bytes": len(body)}).encode()
        length = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": answer})

    async def until_entered(self, count: int) -> None:
        async with asyncio.timeout(10), self.arrived:
            await self.arrived.wait_for(lambda: self.entered >= count)


@contextlib.asynccontextmanager
async def serving(
    app: App, limits: ConnectionLimits, tmp_path: Path | None = None, *, http: str = "auto"
) -> AsyncIterator[tuple[GuardedServer, Callable[[], Awaitable[Any]], Log, Any]]:
    """The app served on loopback TCP (or on a Unix socket in ``tmp_path``): the server, a
    function opening a client connection (reader, writer), the server's log, its address."""
    address: Any
    if tmp_path is None:
        sock = socket.create_server(("127.0.0.1", 0))
        address = sock.getsockname()

        async def connect() -> Any:
            return await asyncio.open_connection(*address)
    else:
        address = str(tmp_path / "s.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(address)
        sock.listen()

        async def connect() -> Any:
            return await asyncio.open_unix_connection(address)

    config = uvicorn.Config(
        app,
        http=http,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    log = Log()
    server = GuardedServer(config, limits, log=log)
    assert server.parser == http_parser(http)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield server, connect, log, address  # it listens already: clients queue until accepted
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task


async def answer_of(
    reader: asyncio.StreamReader, seconds: float = 5
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the one answer on a connection, read to its end."""
    async with asyncio.timeout(seconds):
        data = await reader.read()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, body


GET = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


async def trickle(address: Any, first: bytes, more: bytes) -> tuple[bytes, float, bool]:
    """Send ``first``, then ``more`` every 50 ms until the server answers and closes (at most
    5 s); the whole answer, how long it took, and whether it came while bytes still came. A plain socket: the answer stays readable
    after a later write of ours meets a reset (an asyncio stream would drop it)."""
    loop = asyncio.get_running_loop()
    with socket.create_connection(address, timeout=5) as sock:
        sock.setblocking(False)
        started = time.monotonic()
        await loop.sock_sendall(sock, first)

        async def read_all() -> bytes:
            data = b""
            while chunk := await loop.sock_recv(sock, 65536):
                data += chunk
            return data

        answered = asyncio.create_task(read_all())
        while not answered.done() and time.monotonic() - started < 5:
            with contextlib.suppress(OSError):
                await loop.sock_sendall(sock, more)
            await asyncio.wait({answered}, timeout=0.05)
        while_sending = answered.done()
        async with asyncio.timeout(5):
            data = await answered
    return data, time.monotonic() - started, while_sending


def parsed(data: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


async def test_a_head_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(http: str) -> None:
    limits = ConnectionLimits(head_seconds=0.5)
    async with serving(Held(), limits, http=http) as (_, _, _, address):
        # Every byte used to restart the clock; the head's deadline holds whatever comes.
        data, elapsed, while_sending = await trickle(
            address, b"GET / HTTP/1.1\r\nHost: t\r\n", b"X"
        )
    status, body = parsed(data)
    assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT")
    assert elapsed > 0.4  # not before the deadline
    assert while_sending  # the deadline, not the bytes: they were still coming


async def test_a_connection_that_says_nothing_is_answered_408(http: str) -> None:
    limits = ConnectionLimits(head_seconds=0.3)
    async with serving(Held(), limits, http=http) as (_, connect, _, _):
        reader, writer = await connect()
        status, _, _ = await answer_of(reader)
        writer.close()
    assert status == 408


async def test_a_body_slower_than_the_least_rate_is_cut_off_and_a_fast_one_is_not(
    http: str,
) -> None:
    app = Held()
    app.release.set()
    limits = ConnectionLimits(body_grace_seconds=0.3, body_min_bytes_per_second=2000)
    async with serving(app, limits, http=http) as (_, connect, _, address):
        head = b"POST /quick HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"
        data, _, _ = await trickle(address, head, b"x" * 10)  # 200 B/s
        assert parsed(data)[0] == 408
        assert app.entered == 0  # the app never got the whole body

        reader, writer = await connect()
        writer.write(
            b"POST /quick HTTP/1.1\r\nHost: t\r\nContent-Length: 3000\r\nConnection: close\r\n\r\n"
        )
        for _ in range(6):  # 3,000 bytes in about 0.3 s: 10,000 B/s
            writer.write(b"y" * 500)
            await asyncio.sleep(0.05)  # the client's pace, not a wait for the server
        status, _, body = await answer_of(reader)
        writer.close()
    assert (status, json.loads(body)) == (200, {"bytes": 3000})


async def test_a_request_the_app_takes_long_over_has_no_deadline(http: str) -> None:
    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0.8)  # past the head and body deadlines below
        length = [(b"content-length", b"4")]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": b"done"})

    limits = ConnectionLimits(head_seconds=0.2, body_grace_seconds=0.2)
    async with serving(slow, limits, http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(GET)
        status, _, body = await answer_of(reader)
        writer.close()
    assert (status, body) == (200, b"done")


async def test_a_peer_past_its_share_is_answered_503_with_retry_after(http: str) -> None:
    app = Held()
    # capacity 16, a peer's share a quarter of it: 4
    limits = ConnectionLimits(max_connections=16, peer_share=4)
    async with serving(app, limits, http=http) as (_, connect, log, _):
        held = [await connect() for _ in range(4)]
        for _, writer in held:
            writer.write(GET)
        await app.until_entered(4)
        reader, writer = await connect()
        writer.write(GET)
        status, headers, body = await answer_of(reader)
        writer.close()
        assert status == 503
        assert headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "SERVER_BUSY"
        app.release.set()
        answers = [await answer_of(r) for r, _ in held]
        for _, w in held:
            w.close()
    assert [status for status, _, _ in answers] == [200] * 4
    assert log.lines[0]["refused"] == 1  # the first line, written at once


async def test_past_capacity_a_new_connection_waits_for_room_and_is_served(
    tmp_path: Path, http: str
) -> None:
    app = Held()
    limits = ConnectionLimits(max_connections=8)
    async with serving(app, limits, tmp_path, http=http) as (server, connect, log, _):
        held = [await connect() for _ in range(8)]
        for _, writer in held:
            writer.write(GET)
        await app.until_entered(8)
        reader, writer = await connect()  # the kernel queues it
        writer.write(b"GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        async with asyncio.timeout(5):
            await log.written.wait()  # the server stopped accepting: nothing stalled to shed
        assert log.lines[0]["accept_paused"] >= 1
        assert server.admission.open == 8
        assert app.entered == 8
        app.release.set()
        status, _, _ = await answer_of(reader)
        writer.close()
        for r, w in held:
            await answer_of(r)
            w.close()
    assert status == 200


async def test_past_capacity_the_oldest_stalled_head_is_shed_for_a_new_request(
    tmp_path: Path, http: str
) -> None:
    app = Held()
    app.release.set()
    limits = ConnectionLimits(max_connections=8, silent_grace_seconds=0.2)
    async with serving(app, limits, tmp_path, http=http) as (_, connect, log, _):
        stalled = [await connect() for _ in range(8)]
        for _, writer in stalled:
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n")
        reader, writer = await connect()
        writer.write(GET)
        status, _, _ = await answer_of(reader)
        writer.close()
        assert status == 200
        shed = await answer_of(stalled[0][0])
        for _, w in stalled:
            w.close()
    assert shed[0] == 503
    assert json.loads(shed[2])["error"]["code"] == "SERVER_BUSY"
    assert log.lines  # one line counts what was shed (at most every 10 s)


async def test_a_kept_alive_connection_serves_again_then_idles_out(http: str) -> None:
    app = Held()
    app.release.set()
    limits = ConnectionLimits(keepalive_seconds=1, head_seconds=0.3)
    async with serving(app, limits, http=http) as (_, connect, _, _):
        reader, writer = await connect()
        for _ in range(2):  # the head deadline starts at each request's first byte
            writer.write(b"GET /quick HTTP/1.1\r\nHost: t\r\n\r\n")
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
                length = head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]
                await reader.readexactly(int(length))
            assert head.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed, as a keep-alive timeout closes
        writer.close()
    assert time.monotonic() - started > 0.5  # the keep-alive timeout, not the head's


async def next_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes] | None:
    """The next answer on a kept-alive connection (``None`` once it is closed), within 5 s."""
    async with asyncio.timeout(5):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as end:
            if end.partial:
                raise
            return None
        status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
        body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, body


QUICK = b"GET /quick HTTP/1.1\r\nHost: t\r\n\r\n"


async def test_a_slow_head_after_an_answer_is_answered_408(http: str) -> None:
    app = Held()
    app.release.set()
    limits = ConnectionLimits(keepalive_seconds=5, head_seconds=0.3)
    async with serving(app, limits, http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(QUICK)
        first = await next_answer(reader)
        writer.write(b"GET /quick HTTP/1.1\r\nHost")  # and no more: the head's deadline runs
        second = await next_answer(reader)
        closed = await next_answer(reader)
        writer.close()
    assert first is not None
    assert first[0] == 200
    # The 408 is written although an answer went out before it on this connection.
    assert second is not None
    assert second[0] == 408, second
    assert json.loads(second[2])["error"]["code"] == "REQUEST_TIMEOUT"
    assert closed is None


async def test_blank_lines_after_an_answer_do_not_hold_the_connection(http: str) -> None:
    app = Held()
    app.release.set()
    limits = ConnectionLimits(keepalive_seconds=5, head_seconds=0.5)
    async with serving(app, limits, http=http) as (_, _, _, address):
        # httptools skips blank lines before a request; each byte used to restart the keep-alive
        # timer, so a line end every 50 ms held the connection for ever.
        data, elapsed, while_sending = await trickle(address, QUICK, b"\r\n")
    answers = data.split(b"HTTP/1.1 ")
    assert answers[1].startswith(b"200")
    assert answers[2][:3] in (b"400", b"408"), data  # h11 refuses a blank line; httptools times out
    assert while_sending
    assert elapsed < 5


async def test_a_head_past_the_size_limit_is_answered_431_and_others_are_served(
    http: str,
) -> None:
    app = Held()
    app.release.set()
    async with serving(app, ConnectionLimits(), http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 40_000)
        status, _, body = await answer_of(reader)
        writer.close()
        reader, writer = await connect()
        writer.write(b"GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        served, _, _ = await answer_of(reader)
        writer.close()
    assert (status, json.loads(body)["error"]["code"]) == (431, "BAD_REQUEST")
    assert app.entered == 1  # only the second request reached the app
    assert served == 200


async def test_an_oversized_head_pipelined_behind_a_long_request_is_431_after_its_answer(
    http: str,
) -> None:
    app = Held()
    async with serving(app, ConnectionLimits(), http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(b"GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        await app.until_entered(1)
        # While the app works no deadline runs, but the head is not read past its limit.
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 40_000)
        await writer.drain()
        app.release.set()
        first = await next_answer(reader)
        second = await next_answer(reader)
        writer.close()
    assert first is not None
    assert first[0] == 200
    assert second is not None
    assert (second[0], json.loads(second[2])["error"]["code"]) == (431, "BAD_REQUEST")


async def test_a_malformed_request_is_answered_400_and_others_are_served(http: str) -> None:
    app = Held()
    app.release.set()
    async with serving(app, ConnectionLimits(), http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
        status, _, _ = await answer_of(reader)
        writer.close()
        reader, writer = await connect()
        writer.write(b"GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        served, _, _ = await answer_of(reader)
        writer.close()
    assert (status, served) == (400, 200)
    assert app.entered == 1


async def test_pipelined_requests_with_bodies_are_answered_in_order(http: str) -> None:
    app = Held()
    app.release.set()
    async with serving(app, ConnectionLimits(), http=http) as (_, connect, _, _):
        reader, writer = await connect()
        writer.write(
            b"POST /quick HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
            b"POST /quick HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        answers = [await next_answer(reader) for _ in range(4)]
        writer.close()
    assert [(a[0], json.loads(a[2])) for a in answers[:3] if a is not None] == [
        (200, {"bytes": 5}),
        (200, {"bytes": 3}),
        (200, {"bytes": 0}),
    ]
    assert answers[3] is None


async def test_a_deep_pipeline_is_answered_in_order_and_queues_a_bounded_number(
    http: str,
) -> None:
    app = Held()
    sent = 4 * PIPELINED_MAX
    async with serving(app, ConnectionLimits(), http=http) as (_, connect, _, _):
        reader, writer = await connect()
        last = b"GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        writer.write(b"GET /held HTTP/1.1\r\nHost: t\r\n\r\n" + QUICK * (sent - 2) + last)
        await app.until_entered(1)  # all of it has arrived with the first request
        app.release.set()
        answers = []
        while (answer := await next_answer(reader)) is not None:
            answers.append(answer)
        writer.close()
    statuses = [status for status, _, _ in answers]
    if http == "h11":  # h11 reads one request at a time: every one is answered
        assert statuses == [200] * sent
        return
    # httptools reads all that arrived: past the queue, the client is told 503 after the
    # queued ones are answered, and the connection closed.
    assert statuses == [200] * (1 + PIPELINED_MAX) + [503], statuses
    assert answers[-1][1]["retry-after"] == "1"
    assert json.loads(answers[-1][2])["error"]["code"] == "SERVER_BUSY"
    assert app.entered == 1 + PIPELINED_MAX


def test_the_parser_is_httptools_where_installed_and_h11_without_it(tmp_path: Path) -> None:
    assert http_parser() == "httptools"  # a core dependency
    assert http_parser("h11") == "h11"
    with pytest.raises(ValueError, match="http: 'wsgi'"):
        http_parser("wsgi")
    # Without httptools, the same server serves on h11.
    code = """
import asyncio, socket, sys
sys.modules["httptools"] = None  # as if not installed
import uvicorn
from goondan.http_server import GuardedServer, http_parser

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})

async def main():
    sock = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    server = GuardedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    writer.write(b"GET / HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    server.should_exit = True
    await asyncio.wait_for(task, 10)
    print(http_parser(), server.parser, answer.split(b"\\r\\n")[0].decode())
    try:
        http_parser("httptools")
    except ValueError as refused:
        print(refused)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == [
        "h11 h11 HTTP/1.1 200 OK",
        "http: 'httptools' is not installed (pip install httptools)",
    ]


def limits_in_child(code: str, nofile: int) -> str:
    """What ``code`` prints in a fresh interpreter whose descriptor limit is ``nofile`` (soft;
    the hard limit as ours)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        preexec_fn=lower,
    )
    return done.stdout.strip()


def test_the_capacity_follows_the_descriptor_limit_and_the_limit_is_raised() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"SKIPPED LOUDLY: a hard descriptor limit of {hard} leaves nothing to raise")
    code = (
        "from goondan.http_admission import connection_capacity, raise_open_file_limit;"
        "print(connection_capacity()); print(raise_open_file_limit()); print(connection_capacity())"
    )
    before, raised, after = limits_in_child(code, 1024).split()
    assert int(before) == 768  # a quarter kept for everything else
    wanted = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    assert int(raised) == wanted
    assert int(after) == min(8192, wanted - max(256, wanted // 4))
