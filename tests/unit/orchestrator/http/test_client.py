"""The CLI's HTTP client reads the daemon's answers whole, and a cut-short one is no answer."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from orchestrator.http.client import DaemonApi, NoAnswer, NoDaemon, socket_path

ANSWERS = {
    "length": b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{"a": [1]}\n',
    "chunked": (
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"a":\r\n4;x=y\r\n [2]\r\n1\r\n}\r\n0\r\n\r\n'
    ),
    "to the end": b'HTTP/1.1 200 OK\r\n\r\n{"a": 3}',
    "empty": b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n",
}
CUT_SHORT = [
    b'HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{"a"',
    b"HTTP/1.1 200 OK\r\ncontent-le",
    b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"a"',
    b"garbage\r\n\r\n",
    b"",
]


def serve_once(state: Path, answer: bytes, requests: list[bytes]) -> threading.Thread:
    """A one-connection server on the state's socket: reads the request, sends ``answer``
    in small pieces, closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path(state)))
    listener.listen()

    def run() -> None:
        connection, _ = listener.accept()
        with connection, listener:
            data = b""
            while b"\r\n\r\n" not in data:
                data += connection.recv(4096)
            head, _, body = data.partition(b"\r\n\r\n")
            length = [
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ]
            while length and len(body) < length[0]:
                body += connection.recv(4096)
            requests.append(head + b"\r\n\r\n" + body)
            for i in range(0, len(answer), 7):
                connection.sendall(answer[i : i + 7])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("length", (200, {"a": [1]})),
        ("chunked", (404, {"a": [2]})),
        ("to the end", (200, {"a": 3})),
        ("empty", (204, None)),
    ],
)
def test_an_answer_is_read_whole(tmp_path: Path, kind: str, expected: tuple[int, object]) -> None:
    requests: list[bytes] = []
    server = serve_once(tmp_path, ANSWERS[kind], requests)
    assert DaemonApi(tmp_path, timeout=10).call("POST", "/v1/x", {"input": "hi"}) == expected
    server.join(10)
    head, _, body = requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"Connection: close" in head
    assert body == b'{"input": "hi"}'


@pytest.mark.parametrize("answer", CUT_SHORT)
def test_an_answer_cut_short_is_no_answer(tmp_path: Path, answer: bytes) -> None:
    server = serve_once(tmp_path, answer, [])
    with pytest.raises(NoAnswer, match="went away before answering"):
        DaemonApi(tmp_path, timeout=10).call("GET", "/v1/agents")
    server.join(10)


def test_no_daemon_is_said_at_once(tmp_path: Path) -> None:
    with pytest.raises(NoDaemon, match="no daemon is running"):
        DaemonApi(tmp_path, timeout=10).call("GET", "/v1/agents")
