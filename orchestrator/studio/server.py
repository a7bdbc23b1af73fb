"""The studio's HTTP server: the app's files, its JSON API and its event stream (Starlette on
uvicorn, as the daemon's API)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import threading
import time
import webbrowser
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog
import uvicorn
from msgspec import UnsetType
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from goondan.http_server import GuardedServer
from goondan.loopback import is_loopback
from ipc.protocol import CONNECTION_SENDER_PREFIX, ORCHESTRATOR
from ipc.runtime_events import LIVE_ONLY, read_event
from orchestrator.approvals import list_approvals
from orchestrator.eventlog import parse_since
from orchestrator.http.servers import address_family
from orchestrator.operations.answers import AgentRow
from orchestrator.operations.encoding import plain
from orchestrator.studio import DEFAULT_PORT, STATIC_DIR
from orchestrator.studio.conversations import conversation, instances
from orchestrator.studio.decisions import DecisionGate
from orchestrator.studio.events import LEVELS, EventIndex, wrap
from orchestrator.studio.live import DaemonEvents, StreamClosed, daemon_status, daemon_usage
from orchestrator.studio.session import KEY_PARAM

__all__ = ["Studio", "build_app", "serve_studio", "url_of"]
KEEPALIVE_SECONDS = 15.0
"""An idle stream sends a comment this often, so the browser and proxies keep it open."""
RETRY_MS = 3000
"""How soon a browser reconnects its stream after it ends (and so notices a new daemon)."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
USAGE_CACHE_SECONDS = 2.0
"""How long the daemon's whole usage book is reused: it reads every instance's metadata, and
a busy swarm's trace list asks for it after each burst of events."""
TRACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
"""What a trace id the studio passes on to the daemon may look like."""

_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]

AWAITING_FROM = frozenset({"processing", "idle"})
"""Statuses of a running agent that a parked tool call of its turns into ``awaitingApproval``
(idle: a call parked before a restart still holds its instance)."""

T = TypeVar("T")


class Studio:
    """What the API serves, over one state directory."""

    def __init__(self, state_dir: Path, *, on_loopback: bool = True) -> None:
        self.state_dir = state_dir
        self.index = EventIndex(state_dir)
        self.decisions = DecisionGate(state_dir, on_loopback)
        """Decisions on parked tool calls: checked, then carried out by the daemon."""
        self.stopping = asyncio.Event()
        """Set when the server stops: open streams end at once."""
        self._usage_book: tuple[float, int, dict[str, Any]] | None = None
        """The last whole usage book: when it was asked, for how many traces, the answer."""

    def refreshed(self) -> EventIndex:
        """The event index with every line written so far."""
        self.index.refresh()
        return self.index

    async def agents(self) -> dict[str, Any]:
        """Agents (status from the daemon when one runs), handoff edges, the mode."""
        index = self.refreshed()
        live = await daemon_status(self.state_dir)
        if live is not None:
            rows: list[dict[str, Any]] = []
            for agent in live.agents:
                record = index.agents.get(agent.agent)
                last_crash = record.last_crash_ms if record is not None else None
                rows.append({**_plain_row(agent), "lastCrashMs": last_crash})
            body: dict[str, Any] = {
                "mode": "live",
                "swarm": live.swarm,
                "pid": _or_none(live.pid),
                "agents": rows,
                "connections": plain(live.connections),
                "cluster": plain(live.cluster) if not isinstance(live.cluster, UnsetType) else None,
                "pools": plain(live.pools) if not isinstance(live.pools, UnsetType) else [],
            }
        else:
            names = set(index.agents)
            with contextlib.suppress(OSError):
                names.update(p.name for p in (self.state_dir / "agents").iterdir() if p.is_dir())
            names.discard(ORCHESTRATOR)
            rows, connections = [], []
            for name in sorted(names):
                record = index.agents.get(name)
                row: dict[str, Any] = (
                    record.row() if record is not None else {"agent": name, "status": "unknown"}
                )
                used = index.usage.get(name)
                row["usage"] = used.to_json() if used is not None else None
                row["permitsWaiting"] = None  # only the daemon knows
                if name.startswith(CONNECTION_SENDER_PREFIX):
                    connection = name.removeprefix(CONNECTION_SENDER_PREFIX)
                    connections.append({**row, "connection": connection, "connector": None})
                else:
                    rows.append(row)
            body = {
                "mode": "offline",
                "swarm": index.agents.swarm,
                "pid": None,
                "agents": rows,
                "connections": connections,
                "cluster": None,
                "pools": None,  # the daemon's alone: unknown after the fact
            }
        parked = Counter(
            row.agent_name for row in await asyncio.to_thread(list_approvals, self.state_dir)
        )
        for row in rows:
            _note_parked(row, parked[row["agent"]])
        body["pendingApprovals"] = sum(parked.values())
        known = {row["agent"] for row in rows}
        body["edges"] = [
            edge for edge in index.edges.values() if edge["from"] in known and edge["to"] in known
        ]
        return body

    async def usage(self, trace: str | None, traces: int) -> dict[str, Any]:
        """The daemon's usage book: one trace's row (``trace``, ``None`` when the daemon has
        none for it) or the whole (``usage``), with the mode; nothing after the fact."""
        if trace is None and self._usage_book is not None:
            asked_at, count, body = self._usage_book
            if count == traces and time.monotonic() - asked_at < USAGE_CACHE_SECONDS:
                return body
        answer = await daemon_usage(self.state_dir, trace=trace, traces=traces)
        if answer is None:
            self._usage_book = None
            return {"mode": "offline", "trace" if trace is not None else "usage": None}
        status, found = answer
        if status != 200 or not isinstance(found, dict):
            found = None
        if trace is not None:
            return {"mode": "live", "trace": found}
        body = {"mode": "live", "usage": found}
        self._usage_book = (time.monotonic(), traces, body)
        return body

    async def stream(self) -> AsyncIterator[bytes]:
        """The browser's event stream: the mode, then the daemon's events as they come."""
        yield f"retry: {RETRY_MS}\n\n".encode()
        upstream = DaemonEvents(self.state_dir)
        try:
            await upstream.open()
        except StreamClosed:
            yield _sse("mode", {"live": False})
            return
        try:
            yield _sse("mode", {"live": True})
            async for item in self._until_stopped(upstream.items()):
                if item is None:
                    yield b": keepalive\n\n"
                    continue
                kind, value = item
                if kind == "dropped":
                    yield _sse("dropped", {"count": value})
                elif (event := read_event(value)).type not in LIVE_ONLY:
                    yield _sse(None, wrap(event))
            if not self.stopping.is_set():
                yield _sse("mode", {"live": False})  # the daemon stopped
        finally:
            await upstream.close()

    async def _until_stopped(self, items: AsyncIterator[T]) -> AsyncIterator[T | None]:
        """``items`` until they end or the studio stops; ``None`` after each idle
        :data:`KEEPALIVE_SECONDS`."""
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        upcoming: asyncio.Future[Any] | None = None
        try:
            while True:
                if upcoming is None:
                    upcoming = asyncio.ensure_future(anext(items))
                done, _ = await asyncio.wait(
                    {upcoming, stop}, timeout=KEEPALIVE_SECONDS, return_when="FIRST_COMPLETED"
                )
                if stop in done:
                    return
                if upcoming not in done:
                    yield None
                    continue
                try:
                    item: T = upcoming.result()
                except StopAsyncIteration:
                    return
                upcoming = None
                yield item
        finally:
            stop.cancel()
            if upcoming is not None:
                upcoming.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await upcoming


def _note_parked(row: dict[str, Any], parked: int) -> None:
    """An agent's row with its tool calls parked for an operator (``pendingApprovals``); an
    agent whose work waits on them is ``awaitingApproval``, not ``processing``: nothing moves
    until someone decides."""
    row["pendingApprovals"] = parked
    if parked and row["status"] in AWAITING_FROM:
        row["status"] = "awaitingApproval"


def _plain_row(row: AgentRow) -> dict[str, object]:
    """An agent's status row as the page reads it (the daemon's JSON)."""
    data = plain(row)
    assert isinstance(data, dict)
    return data


def _or_none(value: T | UnsetType) -> T | None:
    return None if isinstance(value, UnsetType) else value


def _sse(kind: str | None, data: object) -> bytes:
    line = json.dumps(data, ensure_ascii=False, default=str)
    head = f"event: {kind}\n" if kind else ""
    return f"{head}data: {line}\n\n".encode()


def _limit(request: Request, default: int, maximum: int) -> int:
    raw = request.query_params.get("limit")  # query parameters, from outside
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise HTTPException(400, "limit must be a positive integer")
    return min(int(raw), maximum)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": {"message": str(exc.detail)}}, status_code=exc.status_code)


class _Guarded:
    """ASGI middleware: security headers on every answer, and (on loopback) only requests
    addressed to a loopback name, so a web page elsewhere cannot reach the studio by
    rebinding a DNS name to 127.0.0.1."""

    def __init__(self, app: ASGIApp, *, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback_only and not _addressed_to_loopback(scope):
            response = JSONResponse({"error": {"message": "unexpected Host"}}, status_code=421)
            await response(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # an ASGI message (headers optional), not JSON
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _addressed_to_loopback(scope: Scope) -> bool:
    # The client's headers in the ASGI scope. One Host at most: goondan.http_target refused
    # two before this runs.
    host = next((v for k, v in scope.get("headers") or [] if k == b"host"), b"").decode("latin-1")
    if host.startswith("["):
        name = host[1:].partition("]")[0]
    else:
        name = host.rpartition(":")[0] if ":" in host else host
    return name.lower() in LOOPBACK_HOSTS


def build_app(studio: Studio, *, loopback_only: bool = True) -> ASGIApp:
    """The studio's ASGI app over ``studio``."""

    async def index(request: Request) -> Response:
        key = request.query_params.get(KEY_PARAM)
        if key is not None:  # the printed link: a session for this browser
            return studio.decisions.open_link(request, key)
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def agents(request: Request) -> Response:
        return JSONResponse(await studio.agents())

    async def traces(request: Request) -> Response:
        agent = request.query_params.get("agent") or None  # query parameters, from outside
        rows = studio.refreshed().trace_list(agent, _limit(request, 200, 5000))
        return JSONResponse({"traces": rows})

    async def trace(request: Request) -> Response:
        found = studio.refreshed().traces.get(request.path_params["trace"])
        if found is None or not found.spans:
            raise HTTPException(404, f"no trace {request.path_params['trace']!r} in the log")
        return JSONResponse(found.to_json())

    async def instance_list(request: Request) -> Response:
        agent = request.query_params.get("agent") or None  # query parameters, from outside
        return JSONResponse({"instances": instances(studio.state_dir, agent)})

    async def messages(request: Request) -> Response:
        agent, key = request.path_params["agent"], request.path_params["key"]
        found = await asyncio.to_thread(conversation, studio.state_dir, agent, key)
        if found is None:
            raise HTTPException(404, f"no instance {key!r} of agent {agent!r}")
        return JSONResponse(found)

    async def usage(request: Request) -> Response:
        # query parameters, from outside: checked here
        trace_id = request.query_params.get("trace")
        if trace_id is not None and not TRACE_ID.match(trace_id):
            raise HTTPException(400, "trace must be a trace id")
        traces = request.query_params.get("traces", "200")
        if not traces.isdigit():
            raise HTTPException(400, "traces must be a whole number")
        return JSONResponse(await studio.usage(trace_id, min(int(traces), 5000)))

    async def events(request: Request) -> Response:
        query = request.query_params  # from outside: each parameter checked below
        level = query.get("level") or None
        if level is not None and level not in LEVELS:
            raise HTTPException(400, f"level must be one of {', '.join(LEVELS)}")
        since_ms = None
        if query.get("since"):
            try:
                since_ms = parse_since(query["since"]).timestamp() * 1000
            except ValueError:
                raise HTTPException(400, "since: 30s, 10m, 2h, 1d or a timestamp") from None
        rows = studio.refreshed().select(
            agent=query.get("agent") or None,
            trace=query.get("trace") or None,
            types=query.getlist("type"),
            level=level,
            since_ms=since_ms,
            limit=_limit(request, 500, 10_000),
        )
        return JSONResponse({"events": rows})

    async def approvals(request: Request) -> Response:
        rows = await asyncio.to_thread(list_approvals, studio.state_dir, include_decided=True)
        return JSONResponse({"approvals": plain(rows)})

    async def session(request: Request) -> Response:
        facts = studio.decisions.facts(request)
        return JSONResponse(facts, headers={"Cache-Control": "no-store"})

    async def approve(request: Request) -> Response:
        return await studio.decisions.decide(request, "approve")

    async def reject(request: Request) -> Response:
        return await studio.decisions.decide(request, "reject")

    async def stream(request: Request) -> Response:
        return StreamingResponse(
            studio.stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/api/agents", agents, methods=["GET"]),
        Route("/api/traces", traces, methods=["GET"]),
        Route("/api/traces/{trace}", trace, methods=["GET"]),
        Route("/api/instances", instance_list, methods=["GET"]),
        Route("/api/conversations/{agent}/{key:path}", messages, methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/usage", usage, methods=["GET"]),
        Route("/api/stream", stream, methods=["GET"]),
        Route("/api/session", session, methods=["GET"]),
        Route("/api/approvals", approvals, methods=["GET"]),
        Route("/api/approvals/{id}/approve", approve, methods=["POST"]),
        Route("/api/approvals/{id}/reject", reject, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR, follow_symlink=False)),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    return _Guarded(app, loopback_only=loopback_only)


def url_of(host: str, port: int) -> str:
    """The address a browser opens."""
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}/"


async def serve_studio(
    state_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    open_browser: bool = False,
    announce: Callable[[str], None] = print,
) -> int:
    """Serve the studio until SIGINT/SIGTERM; ``announce`` is told its link once it listens
    (its URL with the key that gives a browser opening it the right to decide, on loopback).

    Raises ``OSError`` when the address cannot be bound (a port in use).
    """
    log = structlog.get_logger("goondan.studio")
    studio = Studio(state_dir, on_loopback=is_loopback(host))
    sock = socket.create_server((host, port), family=address_family(host))
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(studio, loopback_only=is_loopback(host)),
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=3,
    )
    server = GuardedServer(config, log=log)
    loop = asyncio.get_running_loop()

    def stop(sig: int) -> None:
        log.info("studio stopping", signal=signal.Signals(sig).name)
        studio.stopping.set()
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    url = url_of(host, bound)
    live = await daemon_status(state_dir) is not None
    log.info("studio listening", url=url, state_dir=str(state_dir), live=live)  # no key
    link = studio.decisions.link(url)
    announce(link)
    if open_browser:  # a browser may take a while to start: never on the loop
        threading.Thread(target=webbrowser.open, args=(link,), name="browser", daemon=True).start()
    try:
        await server.serve(sockets=[sock])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        sock.close()
    return 0
