"""http-fetch: SSRF refusals before any connection, redirects re-checked, limits, POST.

Real traffic only ever goes to servers this file starts on 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tools_base import ToolContext, ToolError, ToolHandler
from tools_base.tools import http_fetch
from tools_base.tools.http_fetch import configure


@dataclass
class Seen:
    """What a test server received."""

    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def make_handler(seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> bytes:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.requests.append((self.command, self.path, headers, body))
            return body

        def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if "content-length" not in {k.lower() for k in headers or {}}:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._route(self._record())

        def do_POST(self) -> None:
            self._route(self._record())

        def _route(self, body: bytes) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/redirect":
                status = int(query.get("status", "302"))
                self._reply(status, b"", {"Location": query["to"]})
            elif url.path == "/loop":
                self._reply(302, b"", {"Location": "/loop"})
            elif url.path == "/status":
                self._reply(int(query["code"]), b"nope", {"X-Reason": "test"})
            elif url.path == "/big":
                self._reply(200, b"x" * 100_000, {"Content-Type": "text/plain"})
            elif url.path == "/stream":  # no Content-Length: the body ends when we close
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write("é".encode() * 50_000)
                self.close_connection = True
            elif url.path == "/drip":  # a byte every 50 ms until the test ends
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                while not seen.release.wait(0.05):
                    self.wfile.write(b".")
                    self.wfile.flush()
                self.close_connection = True
            elif url.path == "/slow":
                seen.release.wait(10)
                self._reply(200, b"late")
            elif url.path == "/echo":
                reply = {
                    "method": self.command,
                    "body": body.decode(),
                    "contentType": self.headers.get("content-type"),
                    "authorization": self.headers.get("authorization"),
                }
                self._reply(200, json.dumps(reply).encode(), {"Content-Type": "application/json"})
            else:
                self._reply(200, b"hello", {"Content-Type": "text/plain; charset=utf-8"})

    return Handler


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up early (body cap, timeout) is expected here."""


@dataclass
class Server:
    port: int
    seen: Seen

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def entry(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def servers() -> Iterator[Callable[..., Server]]:
    """Starts local HTTP servers on demand; all are stopped at teardown."""
    started: list[tuple[ThreadingHTTPServer, threading.Thread, Seen]] = []

    def start(tls: ssl.SSLContext | None = None) -> Server:
        seen = Seen()
        httpd = QuietServer(("127.0.0.1", 0), make_handler(seen))
        if tls is not None:
            httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
        thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        started.append((httpd, thread, seen))
        return Server(port=httpd.server_address[1], seen=seen)

    yield start
    for httpd, thread, seen in started:
        seen.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.fixture
def server(servers: Callable[..., Server]) -> Server:
    return servers()


@pytest.fixture
def allowed(server: Server) -> dict[str, ToolHandler]:
    return configure({"allowedHosts": [server.entry]})


@pytest.fixture
def no_connect(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records (and blocks) every outgoing connection attempt."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise AssertionError(f"connection attempted to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def get(handlers: dict[str, ToolHandler], ctx: ToolContext, **args: Any) -> dict[str, Any]:
    out = handlers["get"](ctx, args)
    assert isinstance(out, dict)
    return out


def refused_code(handler: ToolHandler, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as exc_info:
        handler(ctx, args)
    return exc_info.value


# --- refusals that must happen before any connection -------------------------------------


def test_loopback_is_refused_by_default_without_reaching_the_server(ctx: ToolContext) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    try:
        port = listener.getsockname()[1]
        error = refused_code(http_fetch.handlers["get"], ctx, url=f"http://127.0.0.1:{port}/")
        assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
        assert "127.0.0.1" in error.message
        assert "loopback" in error.message
        assert error.suggestion
        assert "allowedHosts" in error.suggestion
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected, not even queued in the backlog
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("url", "code", "fragment"),
    [
        ("http://[::1]/", "E_HTTP_FORBIDDEN_ADDRESS", "loopback"),
        ("http://10.0.0.1/", "E_HTTP_FORBIDDEN_ADDRESS", "private"),
        ("http://192.168.1.20:8080/admin", "E_HTTP_FORBIDDEN_ADDRESS", "private"),
        ("http://169.254.169.254/latest/meta-data/", "E_HTTP_FORBIDDEN_ADDRESS", "metadata"),
        ("http://[fd00:ec2::254]/", "E_HTTP_FORBIDDEN_ADDRESS", "metadata"),
        ("http://[::ffff:127.0.0.1]/", "E_HTTP_FORBIDDEN_ADDRESS", "127.0.0.1"),
        ("http://[::ffff:169.254.169.254]/", "E_HTTP_FORBIDDEN_ADDRESS", "metadata"),
        ("http://[64:ff9b::a9fe:a9fe]/", "E_HTTP_FORBIDDEN_ADDRESS", "metadata"),
        ("http://0.0.0.0/", "E_HTTP_FORBIDDEN_ADDRESS", "unspecified"),
        ("http://2130706433/", "E_HTTP_FORBIDDEN_ADDRESS", "loopback"),
        ("http://localhost/", "E_HTTP_FORBIDDEN_ADDRESS", "loopback"),
        ("http://[fe80::1]/", "E_HTTP_FORBIDDEN_ADDRESS", "link-local"),
        ("http://224.0.0.1/", "E_HTTP_FORBIDDEN_ADDRESS", "multicast"),
        ("file:///etc/passwd", "E_HTTP_UNSUPPORTED_PROTOCOL", "file:"),
        ("ftp://x/", "E_HTTP_UNSUPPORTED_PROTOCOL", "ftp:"),
        ("gopher://127.0.0.1:70/", "E_HTTP_UNSUPPORTED_PROTOCOL", "gopher:"),
        ("http://user:pw@example.com/", "E_HTTP_INVALID_URL", "credentials"),
        ("http:///nohost", "E_HTTP_INVALID_URL", "no host"),
        ("http://example.com:99999/", "E_HTTP_INVALID_URL", "Invalid URL"),
    ],
)
def test_forbidden_urls_are_refused_before_connecting(
    ctx: ToolContext, no_connect: list[Any], url: str, code: str, fragment: str
) -> None:
    error = refused_code(http_fetch.handlers["get"], ctx, url=url)
    assert error.code == code
    assert fragment in error.message
    assert no_connect == []
    post_error = refused_code(http_fetch.handlers["post"], ctx, url=url, body={"a": 1})
    assert post_error.code == code


def test_metadata_stays_refused_with_allow_private_networks(
    ctx: ToolContext, no_connect: list[Any]
) -> None:
    handler = configure({"allowPrivateNetworks": True})["get"]
    assert refused_code(handler, ctx, url="http://169.254.169.254/").code == (
        "E_HTTP_FORBIDDEN_ADDRESS"
    )
    assert no_connect == []


def test_a_host_resolving_to_any_forbidden_address_is_refused(
    ctx: ToolContext, no_connect: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        assert host == "rebind.example"
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    error = refused_code(http_fetch.handlers["get"], ctx, url="http://rebind.example/")
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert "rebind.example" in error.message
    assert "10.1.2.3" in error.message
    assert no_connect == []


def test_dns_failure(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    error = refused_code(http_fetch.handlers["get"], ctx, url="http://no-such-host.invalid/")
    assert error.code == "E_HTTP_DNS_FAILED"


def test_connection_goes_to_the_vetted_address(
    ctx: ToolContext, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS is asked once; the socket uses that answer and the Host header keeps the name."""
    lookups: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def one_answer_then_evil(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        if len(lookups) > 1:
            raise AssertionError("second DNS lookup (rebinding window)")
        return real_getaddrinfo("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", one_answer_then_evil)
    handlers = configure({"allowedHosts": [f"service.internal:{server.port}"]})
    out = get(handlers, ctx, url=f"http://service.internal:{server.port}/hello")
    assert out["status"] == 200
    assert lookups == ["service.internal"]
    assert server.seen.requests[0][2]["host"] == f"service.internal:{server.port}"


# --- allowed traffic to the local test server -------------------------------------------


def test_get_from_an_allowed_host(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    out = get(allowed, ctx, url=server.url("/hello"), headers={"X-Num": 7, "X-Flag": True})
    assert out["status"] == 200
    assert out["statusText"] == "OK"
    assert out["method"] == "GET"
    assert out["body"] == "hello"
    assert out["truncated"] is False
    assert out["headers"]["content-type"] == "text/plain; charset=utf-8"
    assert out["url"] == server.url("/hello")
    assert out["finalUrl"] == server.url("/hello")
    assert out["redirects"] == 0
    sent = server.seen.requests[0][2]
    assert sent["x-num"] == "7"
    assert sent["x-flag"] == "true"
    assert sent["user-agent"].startswith("goondan-http-fetch")


def test_allowed_host_entry_without_port_and_allow_private(
    ctx: ToolContext, server: Server
) -> None:
    assert get(configure({"allowedHosts": ["127.0.0.1"]}), ctx, url=server.url())["status"] == 200
    handlers = configure({"allowPrivateNetworks": True})
    assert get(handlers, ctx, url=server.url())["status"] == 200


def test_allowed_host_entry_is_port_specific(ctx: ToolContext, server: Server) -> None:
    handlers = configure({"allowedHosts": [f"127.0.0.1:{server.port + 1}"]})
    assert refused_code(handlers["get"], ctx, url=server.url()).code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert server.seen.requests == []


def test_error_statuses_are_data(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    for code in (404, 500):
        out = get(allowed, ctx, url=server.url(f"/status?code={code}"))
        assert out["status"] == code
        assert out["body"] == "nope"
        assert out["headers"]["x-reason"] == "test"


@pytest.mark.parametrize("path", ["/big", "/stream"])
def test_body_cap(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler], path: str
) -> None:
    out = get(allowed, ctx, url=server.url(path), maxBytes=1001)
    assert out["truncated"] is True
    assert len(out["body"].encode()) <= 1001
    if path == "/stream":  # 2-byte characters: the one cut in half is dropped
        assert out["body"] == "é" * 500


def test_default_body_cap(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    out = get(allowed, ctx, url=server.url("/big"))
    assert out["truncated"] is False
    assert len(out["body"]) == 100_000


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_timeout_covers_the_whole_request(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler], path: str
) -> None:
    started = time.monotonic()
    error = refused_code(allowed["get"], ctx, url=server.url(path), timeoutMs=300)
    assert error.code == "E_HTTP_TIMEOUT"
    assert time.monotonic() - started < 5


def test_connection_refused(ctx: ToolContext) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens on this port now
    handler = configure({"allowedHosts": [f"127.0.0.1:{port}"]})["get"]
    error = refused_code(handler, ctx, url=f"http://127.0.0.1:{port}/")
    assert error.code == "E_HTTP_CONNECTION_FAILED"


@pytest.mark.parametrize("timeout", [0, -1])
def test_non_positive_timeout_is_invalid(ctx: ToolContext, timeout: int) -> None:
    error = refused_code(http_fetch.handlers["get"], ctx, url="http://x/", timeoutMs=timeout)
    assert error.code == "E_TOOL_INVALID_ARGS"


def test_post_json_body(ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]) -> None:
    out = allowed["post"](ctx, {"url": server.url("/echo"), "body": {"a": 1, "ü": [True, None]}})
    assert isinstance(out, dict)
    assert out["method"] == "POST"
    echoed = json.loads(str(out["body"]))
    assert echoed["method"] == "POST"
    assert json.loads(echoed["body"]) == {"a": 1, "ü": [True, None]}
    assert echoed["contentType"] == "application/json"


def test_post_body_string_and_own_content_type(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    out = allowed["post"](
        ctx,
        {
            "url": server.url("/echo"),
            "bodyString": "a=1&b=2",
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
        },
    )
    assert isinstance(out, dict)
    echoed = json.loads(str(out["body"]))
    assert echoed["body"] == "a=1&b=2"
    assert echoed["contentType"] == "application/x-www-form-urlencoded"


def test_post_body_wins_over_body_string(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    out = allowed["post"](ctx, {"url": server.url("/echo"), "body": {}, "bodyString": "ignored"})
    assert isinstance(out, dict)
    assert json.loads(str(out["body"]))["body"] == "{}"


def test_invalid_header_value(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    error = refused_code(
        allowed["get"], ctx, url=server.url(), headers={"X-Bad": "a\r\nInjected: 1"}
    )
    assert error.code == "E_HTTP_INVALID_HEADER"


# --- redirects ------------------------------------------------------------------------------


def test_redirect_is_followed_and_reported(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    out = get(allowed, ctx, url=server.url("/redirect?to=/hello"))
    assert out["status"] == 200
    assert out["body"] == "hello"
    assert out["url"] == server.url("/redirect?to=/hello")
    assert out["finalUrl"] == server.url("/hello")
    assert out["redirects"] == 1


def test_redirect_to_a_forbidden_host_is_refused(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    try:
        other = listener.getsockname()[1]
        url = server.url(f"/redirect?to=http://localhost:{other}/")
        error = refused_code(allowed["get"], ctx, url=url)
        assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
        assert "localhost" in error.message
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.parametrize(
    "target", ["http://169.254.169.254/latest/meta-data/", "http://[::1]:8080/", "http://10.9.9.9/"]
)
def test_redirect_to_internal_addresses_is_refused(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler], target: str
) -> None:
    error = refused_code(allowed["get"], ctx, url=server.url(f"/redirect?to={target}"))
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"


def test_redirect_to_another_protocol_is_refused(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    error = refused_code(allowed["get"], ctx, url=server.url("/redirect?to=file:///etc/passwd"))
    assert error.code == "E_HTTP_UNSUPPORTED_PROTOCOL"


def test_too_many_redirects(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    error = refused_code(allowed["get"], ctx, url=server.url("/loop"))
    assert error.code == "E_HTTP_TOO_MANY_REDIRECTS"
    assert len(server.seen.requests) == 6  # the first request and five redirects


def test_max_redirects_zero_returns_the_redirect(ctx: ToolContext, server: Server) -> None:
    handlers = configure({"allowedHosts": [server.entry], "maxRedirects": 0})
    out = get(handlers, ctx, url=server.url("/loop"))
    assert out["status"] == 302
    assert out["headers"]["location"] == "/loop"


def test_303_after_post_continues_as_get(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    url = server.url("/redirect?status=303&to=/echo")
    out = allowed["post"](ctx, {"url": url, "body": {"a": 1}})
    assert isinstance(out, dict)
    echoed = json.loads(str(out["body"]))
    assert echoed["method"] == "GET"
    assert echoed["body"] == ""
    assert echoed["contentType"] is None


def test_307_keeps_method_and_body(
    ctx: ToolContext, server: Server, allowed: dict[str, ToolHandler]
) -> None:
    url = server.url("/redirect?status=307&to=/echo")
    out = allowed["post"](ctx, {"url": url, "body": {"a": 1}})
    assert isinstance(out, dict)
    echoed = json.loads(str(out["body"]))
    assert echoed["method"] == "POST"
    assert json.loads(echoed["body"]) == {"a": 1}


def test_credentials_are_dropped_on_a_cross_origin_redirect(
    ctx: ToolContext, servers: Callable[..., Server]
) -> None:
    first, second = servers(), servers()
    handlers = configure({"allowedHosts": [first.entry, second.entry]})
    same = get(handlers, ctx, url=first.url("/redirect?to=/echo"), headers={"Authorization": "x"})
    assert json.loads(same["body"])["authorization"] == "x"
    cross = get(
        handlers,
        ctx,
        url=first.url(f"/redirect?to={second.url('/echo')}"),
        headers={"Authorization": "x"},
    )
    assert json.loads(cross["body"])["authorization"] is None


# --- TLS -----------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> Path:
    """A self-signed certificate for the name ``service.test`` (key and cert in one file)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    pem = tmp_path / "service.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=service.test",
            "-addext", "subjectAltName=DNS:service.test",
            "-keyout", str(pem), "-out", str(pem),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    return pem


@pytest.fixture
def tls_server(servers: Callable[..., Server], certificate: Path) -> Server:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate)
    return servers(tls)


@pytest.fixture
def resolve_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """``*.test`` names resolve to 127.0.0.1, without any DNS query."""
    real = socket.getaddrinfo

    def fake(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host.endswith(".test") else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.mark.usefixtures("resolve_to_loopback")
def test_https_verifies_the_certificate_of_the_url_host(
    ctx: ToolContext, tls_server: Server, certificate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = tls_server.port
    untrusted = configure({"allowedHosts": [f"service.test:{port}"]})["get"]
    error = refused_code(untrusted, ctx, url=f"https://service.test:{port}/hello")
    assert error.code == "E_HTTP_TLS_ERROR"

    trusting = ssl.create_default_context(cafile=str(certificate))
    monkeypatch.setattr(ssl, "create_default_context", lambda: trusting)
    handlers = configure({"allowedHosts": [f"service.test:{port}", f"other.test:{port}"]})
    out = get(handlers, ctx, url=f"https://service.test:{port}/hello")
    assert out["status"] == 200
    assert out["body"] == "hello"
    assert tls_server.seen.requests[-1][2]["host"] == f"service.test:{port}"
    # Same address, other name: the certificate does not match the URL's host.
    error = refused_code(handlers["get"], ctx, url=f"https://other.test:{port}/hello")
    assert error.code == "E_HTTP_TLS_ERROR"
