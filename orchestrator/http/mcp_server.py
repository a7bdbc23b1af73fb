"""The swarm as an MCP server: Streamable HTTP at ``/mcp``, on the official ``mcp`` SDK.

Every agent the ``mcp`` door shows is one tool (:mod:`orchestrator.http.mcp_tools` says how a
call maps onto a Turn). ``/mcp`` is served on both listeners, behind the API's own guards
(the token on TCP, ``Origin``, ``Host``, ``Content-Type``; a bodiless ``DELETE`` ends a
session), and a body over :data:`~orchestrator.http.body.MAX_BODY_BYTES` is refused 413
before the SDK reads it.

Sessions. The SDK's :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager`
holds the sessions in a task group that must outlive every request; the daemon's uvicorn runs
without a lifespan, so the door starts it on the first ``/mcp`` request, as a task of the
daemon's task owner (:class:`~orchestrator.tasks.TaskOwner`), and it stops when the daemon
closes that owner at shutdown: every session and every call still open ends then (the Turns
they started run on, and are answered by their request ids). A session left idle
:data:`SESSION_IDLE_SECONDS` is closed.

The ``mcp`` extra is optional: without it ``/mcp`` answers 501 with a JSON error naming
``pip install 'goondan-py[mcp]'``, and the rest of the API is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from typing import TYPE_CHECKING

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from goondan.errors import DeliveryCode, HttpCode
from orchestrator.http.body import MAX_BODY_BYTES
from orchestrator.http.openapi import Operation
from orchestrator.http.responses import error
from orchestrator.operations import SwarmOperations
from orchestrator.requests import RequestDesk
from orchestrator.tasks import TaskOwner

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from orchestrator.http.mcp_tools import ShownAgents

MCP_PATH = "/mcp"
"""Where the MCP server answers."""
MCP_EXTRA_MISSING = (
    "the MCP front door needs the `mcp` extra, which is not installed: "
    "pip install 'goondan-py[mcp]'"
)
SESSION_IDLE_SECONDS = 30 * 60.0
"""A session with no request in flight for this long is closed (its id then answers 404)."""
MAX_SESSIONS = 1000
"""Sessions open at once; a client opening one more is answered 503 until one ends."""

_log = structlog.get_logger("goondan.mcp")


def mcp_available() -> bool:
    """Whether the ``mcp`` extra is installed (and not blocked from import)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a module entry of None: import is refused
        return False


MCP_OPERATIONS: dict[tuple[str, str], Operation] = {
    (method, MCP_PATH): Operation(
        summary,
        {"type": "object"} if method == "POST" else None,
        body={"type": "object", "required": ["jsonrpc", "method"]} if method == "POST" else None,
        stream=method != "DELETE",
        tag="mcp",
        external="https://modelcontextprotocol.io/specification/2025-11-25/basic/transports",
    )
    for method, summary in (
        ("POST", "A JSON-RPC message of the MCP session: each agent the door shows is a tool."),
        ("GET", "The session's stream of server messages (Streamable HTTP)."),
        ("DELETE", "End the session."),
    )
}
"""The door's route, as the OpenAPI document describes it."""


def mcp_routes(
    daemon: SwarmOperations,
    desk: RequestDesk,
    agents: ShownAgents,
    tasks: TaskOwner | None = None,
) -> list[BaseRoute]:
    """The ``/mcp`` route: the MCP server of the ``agents`` the door shows (its sessions
    owned by ``tasks``), or a 501 naming the extra when ``mcp`` is not installed."""
    if not mcp_available():
        return [Route(MCP_PATH, _extra_missing, methods=["GET", "POST", "DELETE"])]
    door = McpDoor(daemon, desk, agents, tasks)
    return [Route(MCP_PATH, door, methods=["GET", "POST", "DELETE"])]


async def _extra_missing(request: Request) -> Response:
    return error(501, HttpCode.HTTP_ERROR, MCP_EXTRA_MISSING)


class McpDoor:
    """The ASGI app of ``/mcp``: the SDK's session manager, started on first use."""

    def __init__(
        self,
        daemon: SwarmOperations,
        desk: RequestDesk,
        agents: ShownAgents,
        tasks: TaskOwner | None = None,
    ) -> None:
        self.daemon = daemon
        self.desk = desk
        self.agents = agents
        self.tasks = tasks if tasks is not None else TaskOwner()
        """Owns the session manager's task (the daemon's owner: closed at shutdown)."""
        self._manager: asyncio.Future[StreamableHTTPSessionManager] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            message = f"the body is over {MAX_BODY_BYTES} bytes"
            await error(413, HttpCode.PAYLOAD_TOO_LARGE, message)(scope, receive, send)
            return
        if self.daemon.stopping:
            message = "the daemon is shutting down"
            await error(503, DeliveryCode.SHUTTING_DOWN, message)(scope, receive, send)
            return
        started = self._manager
        if started is not None and started.done() and started.exception() is None:
            manager = started.result()  # the common case: no shield, no await
        else:
            manager = await self.manager()
        if scope.get("method") == "POST":
            send = head_with_first_event(send)
        await manager.handle_request(scope, receive, send)

    async def manager(self) -> StreamableHTTPSessionManager:
        """The running session manager (started now if this is the first use)."""
        if self._manager is None:
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

            from orchestrator.http.mcp_tools import AgentTools

            manager = StreamableHTTPSessionManager(
                AgentTools(self.daemon, self.desk, self.agents).server(),
                # The API's guard checks Host and Origin for every route: the SDK's own
                # check would only refuse what the operator allowed (policy.api).
                security_settings=None,
                max_request_body_size=MAX_BODY_BYTES,
                session_idle_timeout=SESSION_IDLE_SECONDS,
                max_sessions=MAX_SESSIONS,
            )
            self._manager = asyncio.get_running_loop().create_future()
            running = self._run(manager, self._manager, self._stop)
            self._task = self.tasks.start_soon(running, "mcp-sessions")
        return await asyncio.shield(self._manager)

    async def _run(
        self,
        manager: StreamableHTTPSessionManager,
        ready: asyncio.Future[StreamableHTTPSessionManager],
        stop: asyncio.Event,
    ) -> None:
        try:
            async with manager.run():
                ready.set_result(manager)
                _log.info("mcp sessions started")
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(RuntimeError(f"the MCP server could not start: {exc!r}"))
            raise
        finally:
            _log.info("mcp sessions stopped")

    async def aclose(self) -> None:
        """End every session now (the daemon does it by closing its task owner)."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def head_with_first_event(send: Send) -> Send:
    """``send``, the head of an event stream held until its first chunk, so both leave in
    one write.

    The SDK answers each call's POST with a stream whose head it sends before the call has
    run; sent alone, the head is a write of its own and wakes the client for nothing: the
    client reads the call's events (its answer, a progress notification, an elicitation)
    from the body, which the head now comes with. A GET's stream, which may stay silent for
    long, is not held (the caller wraps only a POST's ``send``)."""
    held: Message | None = None

    async def sending(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and _streams_events(message):
            held = message
            return
        if held is not None:
            head, held = held, None
            await send(head)
        await send(message)

    return sending


def _streams_events(start: Message) -> bool:
    return any(
        key.lower() == b"content-type" and bytes(value).startswith(b"text/event-stream")
        for key, value in start.get("headers") or ()
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None
