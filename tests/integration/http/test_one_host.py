"""One host per request on every HTTP server of the project, for real: a daemon process with
its TCP listener, its ``api.sock`` and a webhook connector's process, and the studio's process
over the same state directory. Raw request bytes on sockets (no client library sends two
``Host`` headers); every wait bounded. Both parsers are tried on the same server class in
``tests/unit/test_http_target.py``."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.http_connector import signed_webhook, webhook_connection
from tests.support.studio import StudioProcess

pytestmark = pytest.mark.timeout(120)

SECRET = "one-host-secret-5d1a"
SECRET_ENV = "ONE_HOST_SECRET"


class Faces:
    """Where each server listens: ``(kind, address)``, ``address`` a path or a TCP port."""

    def __init__(self, api_sock: str, api_port: int, hook_port: int, studio_port: int) -> None:
        self.api_sock = api_sock
        self.api_port = api_port
        self.hook_port = hook_port
        self.studio_port = studio_port

    def all(self) -> list[tuple[str, str | int, str]]:
        """Each server: a name, its address, a path it serves to a plain GET."""
        return [
            ("api.sock", self.api_sock, "/healthz"),
            ("api tcp", self.api_port, "/healthz"),
            ("studio", self.studio_port, "/api/agents"),
            ("webhook", self.hook_port, "/"),
        ]


@pytest.fixture(scope="module")
def faces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faces]:
    directory = tmp_path_factory.mktemp("one-host")
    daemon = Daemon(
        directory,
        webhook_connection(SECRET_ENV),
        args=["--listen", "127.0.0.1:0"],
        env={SECRET_ENV: SECRET},
    )
    studio: StudioProcess | None = None
    try:
        api_port = int(str(daemon.wait_for("http api listening")["port"]))
        hook = daemon.wait_for("connector listening", process="connector:hooks")
        studio = StudioProcess(cwd=directory)
        studio_port = int(studio.url.rstrip("/").rpartition(":")[2])
        api_sock = str(directory / ".goondan" / "api.sock")
        yield Faces(api_sock, api_port, int(str(hook["port"])), studio_port)
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()


def exchange(address: str | int, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``raw`` to a Unix socket path or a loopback port; the answer's status and JSON
    body (``{}`` when it has none)."""
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        sock.connect(address)
    else:
        sock = socket.create_connection(("127.0.0.1", address), timeout=20)
    with sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def refusal(body: dict[str, Any]) -> tuple[str, str]:
    """``(code, message)`` of a refusal: the API's and the studio's ``{"error": {...}}``, or a
    connector's ``{"ok": false, "error", "code"}``."""
    error = body["error"]
    if isinstance(error, dict):
        return str(error["code"]), str(error["message"])
    return str(body["code"]), str(error)


def head(line: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [line, *headers, "Connection: close", f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def own(address: str | int) -> str:
    return "localhost" if isinstance(address, str) else f"127.0.0.1:{address}"


def test_two_host_headers_are_refused_by_every_server(faces: Faces) -> None:
    for name, address, path in faces.all():
        for first, second in (
            (f"Host: {own(address)}", "Host: evil.example"),
            ("host: evil.example", f"Host: {own(address)}"),  # another case, one name
            (f"Host: {own(address)}", f"host: {own(address)}"),
        ):
            status, body = exchange(address, head(f"GET {path} HTTP/1.1", first, second))
            assert status == 400, (name, first, second, body)
            code, message = refusal(body)
            assert code == "HOST_INVALID", name
            assert "more than one Host header" in message, name


def test_an_absolute_target_naming_another_host_is_refused_by_every_server(
    faces: Faces,
) -> None:
    for name, address, path in faces.all():
        for target in (f"http://evil.example{path}", f"http://{own(address)}@evil.example{path}"):
            line = f"GET {target} HTTP/1.1"
            status, body = exchange(address, head(line, f"Host: {own(address)}"))
            assert status == 400, (name, target, body)
            code, message = refusal(body)
            assert code == "HOST_INVALID", name
            assert "evil.example" in message, name


def test_one_host_is_served_and_so_is_an_absolute_target_naming_it(faces: Faces) -> None:
    for name, address, path in faces.all():
        if name == "webhook":
            continue  # takes only signed POSTs: below
        for target in (path, f"http://{own(address)}{path}"):
            line = f"GET {target} HTTP/1.1"
            status, body = exchange(address, head(line, f"Host: {own(address)}"))
            assert status == 200, (name, target, body)
    body, headers = signed_webhook(SECRET, "one host")
    signed = [f"{key}: {value}" for key, value in headers.items()]
    for target in ("/", f"http://127.0.0.1:{faces.hook_port}/"):
        raw = head(
            f"POST {target} HTTP/1.1",
            f"Host: 127.0.0.1:{faces.hook_port}",
            "Content-Type: application/json",
            *signed,
            body=body,
        )
        status, answer = exchange(faces.hook_port, raw)
        assert status in (200, 202), (target, answer)


def test_an_absolute_target_agreeing_with_a_foreign_host_meets_the_host_check(
    faces: Faces,
) -> None:
    # Target and Host agree, so the head passes; the name is then held to the listener's own
    # names, as a plain request under that Host is (the API's allow-list, the studio's loopback).
    for name, address, path in faces.all():
        if name not in ("api tcp", "studio"):
            continue
        line = f"GET http://evil.example{path} HTTP/1.1"
        status, body = exchange(address, head(line, "Host: evil.example"))
        assert status == 421, (name, body)
