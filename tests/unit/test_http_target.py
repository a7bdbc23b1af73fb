"""One host per request, on every server of the project: :mod:`goondan.http_target` under
:class:`goondan.http_server.GuardedServer`, on both of uvicorn's parsers, with raw request
bytes on a real loopback socket (a client library would never send two ``Host`` headers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from goondan.http_server import GuardedServer
from goondan.http_target import NO_HOST, TWO_HOSTS, check_request

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["httptools", "h11"])
def http(request: pytest.FixtureRequest) -> str:
    parser: str = request.param
    return parser


class Seen:
    """An app that answers what it was asked: the path, query and every Host it saw."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        self.calls += 1
        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
        body = json.dumps(
            {"path": scope["path"], "query": scope["query_string"].decode(), "hosts": hosts}
        ).encode()
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(app: Seen, http: str) -> AsyncIterator[tuple[str, int]]:
    sock = socket.create_server(("127.0.0.1", 0))
    address = sock.getsockname()
    config = uvicorn.Config(app, http=http, log_config=None, access_log=False, lifespan="off")
    server = GuardedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield address
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task


async def exchange(address: tuple[str, int], raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``raw`` and read the one answer to its end: status and JSON body."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(raw)
        async with asyncio.timeout(10):
            data = await reader.read()
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def request(target: str, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"GET {target} HTTP/{version}", *headers, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


@pytest.mark.parametrize(
    "headers",
    [
        ("Host: 127.0.0.1", "Host: evil.example"),
        ("host: evil.example", "Host: 127.0.0.1"),  # another case is the same name
        ("Host: 127.0.0.1", "HOST: 127.0.0.1"),  # even the same value twice
    ],
)
async def test_two_host_headers_are_refused_400_naming_the_problem(
    http: str, headers: tuple[str, str]
) -> None:
    app = Seen()
    async with serving(app, http) as address:
        status, body = await exchange(address, request("/x", *headers))
    assert status == 400
    assert body["error"] == {"code": "HOST_INVALID", "message": TWO_HOSTS}
    assert app.calls == 0  # no app saw it


async def test_one_host_is_served_and_none_is_refused_on_http_1_1_only(http: str) -> None:
    app = Seen()
    async with serving(app, http) as address:
        status, body = await exchange(address, request("/x?a=1", "Host: 127.0.0.1"))
        assert (status, body) == (200, {"path": "/x", "query": "a=1", "hosts": ["127.0.0.1"]})
        status, body = await exchange(address, request("/x"))
        assert (status, body["error"]) == (400, {"code": "HOST_INVALID", "message": NO_HOST})
        status, body = await exchange(address, request("/x", version="1.0"))
        assert (status, body["path"]) == (200, "/x")


async def test_an_absolute_target_naming_another_host_is_refused(http: str) -> None:
    app = Seen()
    async with serving(app, http) as address:
        own = f"127.0.0.1:{address[1]}"
        for target, host in [
            ("http://evil.example/x", own),
            (f"http://{own}@evil.example/x", own),  # userinfo: the host is evil.example
            (f"http://{own}.evil.example/x", own),
            (f"https://{own}/x", own),  # not this server's scheme
            (f"http://{own}/x", "evil.example"),  # Host elsewhere: the allow-lists judge Host
        ]:
            status, body = await exchange(address, request(target, f"Host: {host}"))
            assert status == 400, target
            assert body["error"]["code"] == "HOST_INVALID", target
            assert "Host" in body["error"]["message"] or "scheme" in body["error"]["message"]
        status, body = await exchange(address, request(f"http://{own}/x", version="1.0"))
        assert (status, body["error"]["code"]) == (400, "HOST_INVALID")  # no Host to match
    assert app.calls == 0


async def test_an_absolute_target_naming_its_own_host_is_served_as_its_path(http: str) -> None:
    app = Seen()
    async with serving(app, http) as address:
        own = f"127.0.0.1:{address[1]}"
        for target, path, query in [
            (f"http://{own}/v1/x?a=1", "/v1/x", "a=1"),
            (f"HTTP://{own.upper()}/y", "/y", ""),
            (f"http://{own}", "/", ""),
            (f"http://{own}?b=2", "/", "b=2"),
        ]:
            status, body = await exchange(address, request(target, f"Host: {own}"))
            assert (status, body) == (200, {"path": path, "query": query, "hosts": [own]}), target


@pytest.mark.parametrize(
    ("line", "said"),
    [("CONNECT evil.example:443", "not a path"), ("OPTIONS *", "not a path")],
)
async def test_other_target_forms_are_refused(http: str, line: str, said: str) -> None:
    app = Seen()
    async with serving(app, http) as address:
        raw = f"{line} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        status, body = await exchange(address, raw)
    assert (status, body["error"]["code"]) == (400, "HOST_INVALID")
    assert said in body["error"]["message"]


def test_the_check_reads_names_in_any_case_and_keeps_a_path_as_it_is() -> None:
    checked = check_request(b"/a?b", [(b"HoSt", b"x"), (b"hOsT", b"x")], "1.1")
    assert checked.refusal == TWO_HOSTS
    checked = check_request(b"/a?b", [(b"host", b"x")], "1.1")
    assert (checked.refusal, checked.target) == (None, b"/a?b")
    checked = check_request(b"http://x/a#frag", [(b"host", b"X")], "1.1")
    assert (checked.refusal, checked.target) == (None, b"/a")
