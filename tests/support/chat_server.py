"""A local HTTP server that answers like the Telegram Bot API, the Slack Web API, or the
Discord and GitHub REST APIs (GET, POST and PATCH).

Runs in a thread on 127.0.0.1 and records every request (method, path, headers, body; JSON and
form bodies parsed) so tests assert what a tool really sent. Answers come from ``routes``
(path → :class:`~tests.support.wire_server.Reply`, or a function of the request returning one);
an unknown path gets a 404 in Telegram's error shape. Two special replies: :data:`HANG` keeps
the client waiting until the server stops (for timeouts) and :data:`DROP` closes the connection
without answering (for network errors). :class:`BotUpdates` is a ``getUpdates`` route that keeps
updates and honours offsets like Telegram, with failures scripted in between.
:meth:`ChatApiServer.wait_for` waits, with a deadline, until the recorded requests satisfy a
condition (a test never sleeps to let a client catch up).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

from tests.support.wire_server import Reply, send_reply

HANG = Reply(status=-1)
"""Answer nothing until the server stops."""
DROP = Reply(status=-2)
"""Close the connection without a status line."""


@dataclass
class ChatRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names."""
    raw: bytes
    body: Any
    """Parsed JSON, or a dict of a form body, or ``None`` without a body."""
    at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic``)."""


Route = Reply | Callable[[ChatRequest], Reply]


def telegram_ok(result: Any) -> Reply:
    """A Bot API success: ``{"ok": true, "result": ...}``."""
    return Reply(body={"ok": True, "result": result})


def telegram_error(code: int, description: str, retry_after: int | None = None) -> Reply:
    """A Bot API failure, with the HTTP status Telegram uses for it."""
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return Reply(status=code, body=body)


def slack_ok(**fields: Any) -> Reply:
    """A Web API success: ``{"ok": true, ...}``."""
    return Reply(body={"ok": True, **fields})


def slack_error(error: str, status: int = 200, **headers: str) -> Reply:
    """A Web API failure (Slack answers most of them with HTTP 200)."""
    return Reply(status=status, body={"ok": False, "error": error}, headers=headers)


def file_reply(data: bytes, content_type: str = "application/octet-stream") -> Reply:
    """A file download."""
    return Reply(raw=data, headers={"content-type": content_type})


class ChatApiServer:
    """Serve ``routes``; ``requests`` lists what arrived, in order."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[ChatRequest] = []
        self.release = threading.Event()
        self.changed = threading.Condition()
        """Notified when a request is recorded, when updates are added to a :class:`BotUpdates`
        route and when the server stops."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def do_PATCH(self) -> None:
                self._handle()

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = ChatRequest(self.command, self.path, headers, raw, _parse(headers, raw))
                with server.changed:
                    server.requests.append(request)
                    server.changed.notify_all()
                route = server.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    reply = Reply(
                        status=404,
                        body={"ok": False, "error_code": 404, "description": "Not Found"},
                    )
                else:
                    reply = route(request) if callable(route) else route
                if reply is HANG:
                    server.release.wait(30)
                    self.close_connection = True
                    return
                if reply is DROP:
                    self.close_connection = True
                    return
                send_reply(self, reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        class QuietServer(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                """A client hanging up early (size cap, timeout) is expected here."""

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def host_entry(self) -> str:
        """This server as an ``allowedHosts`` entry."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ChatApiServer:
        self.thread.start()
        return self

    def wait_for(
        self, condition: Callable[[list[ChatRequest]], bool], timeout: float = 30
    ) -> list[ChatRequest]:
        """Wait until ``condition(requests)`` holds (it sees a snapshot of :attr:`requests`)
        and return that snapshot; raise ``AssertionError`` naming what arrived after
        ``timeout`` seconds."""
        snapshot: list[ChatRequest] = []

        def holds() -> bool:
            nonlocal snapshot
            snapshot = list(self.requests)
            return condition(snapshot)

        with self.changed:
            if self.changed.wait_for(holds, timeout):
                return snapshot
        seen = [f"{r.method} {redact_path(r.path)}" for r in snapshot]
        raise AssertionError(f"not within {timeout} s; the server saw {seen}")

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        with self.changed:
            self.changed.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def redact_path(path: str) -> str:
    """``path`` with a Bot API token (``/bot<token>/``) left out."""
    head, sep, rest = path.partition("/bot")
    if not sep or head:
        return path
    _, slash, tail = rest.partition("/")
    return f"/bot<token>{slash}{tail}"


def _parse(headers: dict[str, str], raw: bytes) -> Any:
    if not raw:
        return None
    kind = headers.get("content-type", "")
    if kind.startswith("application/x-www-form-urlencoded"):
        return dict(parse_qsl(raw.decode(), keep_blank_values=True))
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


class BotUpdates:
    """A ``getUpdates`` route: answers the updates at or past the request's ``offset``, as
    Telegram does, at most ``batch`` of them; with none it holds the request (a long poll) until
    the server stops, :meth:`add` brings updates for it or the request's ``timeout`` passes
    (then it answers ``[]``).

    ``scripted`` maps a poll's number (0 for the first ``getUpdates``) to the answer it gets
    instead of the updates (a 429, :data:`DROP`, a stale batch, ...). ``polls`` lists every ``getUpdates`` request, and
    ``parked`` is set when a poll found nothing left to give.
    """

    def __init__(
        self,
        server: ChatApiServer,
        updates: list[dict[str, Any]] | None = None,
        *,
        batch: int = 100,
        scripted: dict[int, Reply] | None = None,
    ) -> None:
        self.server = server
        self.updates = list(updates or [])
        self.batch = batch
        self.scripted = dict(scripted or {})
        self.polls: list[ChatRequest] = []
        self.parked = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        offset = int(body.get("offset") or 0)
        with self._lock:
            number = len(self.polls)
            self.polls.append(request)
            failure = self.scripted.get(number)
            if failure is None:
                pending = [u for u in self.updates if u["update_id"] >= offset][: self.batch]
        if failure is not None:
            return failure
        if pending:
            return telegram_ok(pending)
        self.parked.set()
        changed = self.server.changed
        with changed:
            changed.wait_for(
                lambda: self.server.release.is_set() or bool(self._pending(offset)),
                min(float(body.get("timeout") or 0), 30),
            )
        if self.server.release.is_set():
            return telegram_ok([])
        return telegram_ok(self._pending(offset))

    def _pending(self, offset: int) -> list[dict[str, Any]]:
        with self._lock:
            return [u for u in self.updates if u["update_id"] >= offset][: self.batch]

    def add(self, *updates: dict[str, Any]) -> None:
        """Keep more updates; a poll held waiting for them answers at once."""
        with self.server.changed:
            with self._lock:
                self.updates.extend(updates)
            self.parked.clear()
            self.server.changed.notify_all()

    def offsets(self) -> list[int]:
        """The ``offset`` each poll sent (0 when it sent none)."""
        return [int((p.body or {}).get("offset") or 0) for p in self.polls]


def telegram_update(
    update_id: int,
    text: str | None = None,
    *,
    chat_id: int = 1001,
    user_id: int = 7,
    username: str = "ann",
    is_bot: bool = False,
    **message: Any,
) -> dict[str, Any]:
    """A ``message`` update as the Bot API sends it (extra ``message`` fields as keywords)."""
    body: dict[str, Any] = {
        "message_id": update_id * 10,
        "date": 1_700_000_000 + update_id,
        "chat": {"id": chat_id, "type": "private", "username": username},
        "from": {"id": user_id, "is_bot": is_bot, "first_name": "Ann", "username": username},
        **message,
    }
    if text is not None:
        body["text"] = text
    return {"update_id": update_id, "message": body}


def serve() -> Iterator[ChatApiServer]:
    """Fixture body: a running server, stopped afterwards."""
    with ChatApiServer() as server:
        yield server
