"""The CLI's way back to a request whose connection dropped: by the request's id.

A request the daemon accepted is recorded before its first byte of answer is sent, and the
answer's head names it (``X-Goondan-Request-Id``). When the connection then drops (the daemon
was restarted, a proxy cut it), the client asks ``GET /v1/requests/{id}/events`` with the
``Last-Event-ID`` it saw last: the daemon replays what came after and follows until the answer.
While no daemon answers (it is starting again), it tries again for ``reattach_seconds`` (the
CLI's ``--reattach``), then gives up: the request is still answered, and can be asked for by
its id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.http.client_errors import NoAnswer, NoDaemon

if TYPE_CHECKING:  # imported when a request is picked up again: `send` starts without it
    import http.client

RETRY_SECONDS = 0.25
"""The pause between two tries to reach a daemon that is not there (yet)."""

OnEvent = Callable[[str, dict[str, Any]], None]


class DaemonApi(Protocol):
    """What picking a request up again needs of :class:`orchestrator.http.client.DaemonApi`."""

    timeout: float
    reattach_seconds: float

    @property
    def headers(self) -> dict[str, str]: ...

    def http_connection(self) -> http.client.HTTPConnection: ...

    def connect(self, connection: http.client.HTTPConnection) -> None: ...

    def http_headers(self) -> dict[str, str]: ...


def sse_with_ids(lines: Iterable[bytes]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(event name, id, JSON data)`` of each server-sent event in ``lines`` (a response's
    body, line by line) as it arrives (comments, such as keepalives, skipped; the id empty for
    an event without one)."""
    kind, event_id, data = "message", "", list[str]()
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("id:"):
            event_id = line.removeprefix("id:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))
        elif not line and data:
            event = json.loads("\n".join(data))
            if isinstance(event, dict):
                yield kind, event_id, event
            kind, event_id, data = "message", "", []


class Progress:
    """How far a streamed request got: its id, and the id of the last event handed on."""

    __slots__ = ("last_event_id", "reached", "request_id")

    def __init__(self, request_id: str = "", last_event_id: str = "") -> None:
        self.request_id = request_id
        self.last_event_id = last_event_id
        self.reached = False
        """The last try reached a daemon that answered."""

    def follow(self, lines: Iterable[bytes], on_event: OnEvent) -> tuple[int, Any] | None:
        """Hand each event of ``lines`` (the body of the answer) but the answer to
        ``on_event``; the answer as ``(status, body)``, or ``None`` when the stream ended
        without one."""
        for kind, event_id, item in sse_with_ids(lines):
            if event_id:
                self.last_event_id = event_id
            if kind != "answer":
                on_event(kind, item)
                continue
            return (200 if item.get("status") == "ok" else 502), item
        return None


def reattach(
    api: DaemonApi,
    progress: Progress,
    on_event: OnEvent,
    failure: NoAnswer,
    posted: tuple[str, dict[str, Any]],
) -> tuple[int, Any]:
    """The answer of the request ``progress`` names, picked up again after ``failure`` (by
    its id; or, when the answer's head never came, by sending ``posted`` again with its
    ``Idempotency-Key``); raises :class:`NoAnswer` once no daemon answered for
    ``api.reattach_seconds``."""
    import http.client

    deadline = time.monotonic() + api.reattach_seconds
    while True:
        progress.reached = False
        try:
            return _once(api, progress, on_event, posted)
        except (NoDaemon, NoAnswer, OSError, ValueError, http.client.HTTPException) as exc:
            if progress.reached:  # a daemon answered, then went away again: a new gap
                deadline = time.monotonic() + api.reattach_seconds
            if time.monotonic() + RETRY_SECONDS > deadline:
                named = progress.request_id or "(its id never came)"
                raise NoAnswer(
                    f"{failure}; request {named} could not be picked up again ({exc})"
                ) from exc
            time.sleep(RETRY_SECONDS)


def _once(
    api: DaemonApi, progress: Progress, on_event: OnEvent, posted: tuple[str, dict[str, Any]]
) -> tuple[int, Any]:
    connection = api.http_connection()
    try:
        api.connect(connection)
        headers = api.http_headers()
        if progress.request_id:
            headers["Accept"] = "text/event-stream"
            if progress.last_event_id:
                headers["Last-Event-ID"] = progress.last_event_id
            connection.request("GET", f"/v1/requests/{progress.request_id}/events", headers=headers)
        else:
            path, body = posted
            headers.update(api.headers)
            headers["Content-Type"] = "application/json"
            connection.request("POST", path, json.dumps(body).encode(), headers)
        response = connection.getresponse()
        progress.reached = True
        progress.request_id = response.getheader("x-goondan-request-id") or progress.request_id
        if not response.getheader("content-type", "").startswith("text/event-stream"):
            data = response.read()
            if response.status == 503:  # a daemon starting or stopping: try again
                raise NoAnswer("the daemon is not taking requests yet")
            return response.status, json.loads(data) if data else None
        answer = progress.follow(response, on_event)
        if answer is None:
            raise NoAnswer("the event stream ended before the answer")
        return answer
    finally:
        connection.close()
