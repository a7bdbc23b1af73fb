"""How the CLI talks to a running daemon: HTTP over the state directory's ``api.sock``.

A small synchronous client on the standard library (``http.client`` over a Unix socket), so
``status`` and friends start fast and need nothing beyond the core install. Every call is
bounded: no daemon raises :class:`NoDaemon` at once; a daemon that takes the request and
then dies or falls silent raises :class:`NoAnswer`.
"""

from __future__ import annotations

import errno
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from goondan.errors import DaemonError

SOCKET_NAME = "api.sock"
CONNECT_RETRY_SECONDS = 10.0
"""How long a client retries a connect the kernel refused for a full backlog."""
DEFAULT_TIMEOUT_SECONDS = 120.0
"""How long a call waits for the daemon's answer (a Turn may take a while)."""
EXIT_NO_ANSWER = 3
"""CLI exit code: the daemon went away, or did not answer in time, after taking the request."""


class NoDaemon(DaemonError, RuntimeError):
    """No daemon answers on this state directory."""


class NoAnswer(DaemonError, RuntimeError):
    """The daemon took the request but went away (or fell silent) before answering."""


def socket_path(state_dir: Path) -> Path:
    """Where the API socket of ``state_dir`` lives."""
    return state_dir / SOCKET_NAME


def path_segment(value: str) -> str:
    """``value`` quoted for one segment of a URL path (an agent name, an instance key)."""
    return quote(value, safe="")


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection to a Unix socket, retrying while the daemon's backlog is full."""

    def __init__(self, path: Path, timeout: float | None) -> None:
        super().__init__("goondan", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        deadline = time.monotonic() + CONNECT_RETRY_SECONDS
        delay = 0.01
        while True:
            try:
                sock.connect(str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                raise NoDaemon(
                    f"no daemon is running for {self.path.parent} (no answer on {self.path})"
                ) from exc
            except BlockingIOError as exc:  # the daemon is busy accepting others: retry shortly
                if exc.errno != errno.EAGAIN or time.monotonic() >= deadline:
                    sock.close()
                    raise NoAnswer(
                        f"the daemon accepted no connection within {CONNECT_RETRY_SECONDS:g} s"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        self.sock = sock


class DaemonApi:
    """The HTTP API of the daemon serving ``state_dir``, one connection per call."""

    def __init__(self, state_dir: Path, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.state_dir = state_dir
        self.path = socket_path(state_dir)
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """``(status, JSON body)`` of one request; raises :class:`NoDaemon` or :class:`NoAnswer`."""
        connection = _UnixConnection(self.path, self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except TimeoutError as exc:
            raise NoAnswer(f"the daemon did not answer within {self.timeout:g} s") from exc
        except (http.client.HTTPException, OSError) as exc:
            # Reset, broken pipe, a connection closed mid-answer: the daemon died under us.
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else "closed"
            raise NoAnswer(f"the daemon went away before answering ({detail})") from exc
        finally:
            connection.close()
        try:
            return response.status, json.loads(data) if data else None
        except ValueError as exc:
            raise NoAnswer("the daemon sent an answer that is not JSON") from exc

    def events(self, query: str = "") -> Iterator[dict[str, Any]] | None:
        """The daemon's live events (``GET /v1/events``), or ``None`` when none serves them.

        Returns once the stream is open, so events read from the log file afterwards and
        events pushed here overlap rather than leave a gap.
        """
        connection = _UnixConnection(self.path, timeout=None)  # a stream waits as long as it runs
        try:
            connection.request("GET", f"/v1/events{query}", headers={"Accept": "text/event-stream"})
            response = connection.getresponse()
            if response.status != 200 or response.readline().strip() != b": connected":
                connection.close()
                return None
        except (DaemonError, OSError, http.client.HTTPException):
            connection.close()
            return None

        def stream() -> Iterator[dict[str, Any]]:
            try:
                for raw in response:
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    if line.startswith("data: {"):
                        event = json.loads(line.removeprefix("data: "))
                        if isinstance(event, dict):
                            yield event
            except (OSError, http.client.HTTPException):
                return  # the daemon stopped
            finally:
                connection.close()

        return stream()


def error_text(body: Any) -> str:
    """The message of an API error body ``{"error": {"code", "message"}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('message')} ({error.get('code')})"
    return str(error or body)
