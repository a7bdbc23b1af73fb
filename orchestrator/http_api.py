"""The daemon's HTTP API (the ``api`` extra): Starlette routes served by uvicorn.

It always listens on ``<state>/api.sock``, a Unix socket created with mode 0600 (only the
daemon's user may connect): the CLI's ``status``, ``send``, ``restart``, ``instances``,
``approve``, ``reject`` and ``logs --follow`` go through it. A live socket there makes a second daemon on the same state
refuse to start; a stale one (its daemon was killed) is replaced. ``run --listen HOST:PORT``
adds a TCP listener. A TCP listener off loopback
refuses to start without a bearer token, and with a token every request must carry it
(``Authorization: Bearer <token>``), else 401.

Every error is JSON ``{"error": {"code", "message"}}``: unknown route 404, wrong method 405,
body over :data:`MAX_BODY_BYTES` 413, body that is not a JSON object 400, missing token 401.

Routes (all JSON):

``GET  /healthz``                                the process is up
``GET  /readyz``                                 200 when the entry agent is ready, else 503
``GET  /v1/agents``                              one status row per agent (and per Connection)
``POST /v1/agents/{agent}/requests``             ``{input, instanceKey?, timeoutMs?}``: run a Turn,
                                                 answer with the delegate answer (200, or 502
                                                 when the request failed)
``POST /v1/agents/{agent}/sends``                the same without waiting: 202
``POST /v1/agents/{agent}/restart``              stop gracefully, start again
``GET  /v1/requests``                            the requests waiting for an answer
``POST /v1/requests/{id}/cancel``                ``{reason?}``: cancel a request (by request id
                                                 or trace id): answered ``CANCELLED`` now, its
                                                 Turns stop at their next safe point; 404 when
                                                 nothing of that id runs
``GET  /v1/instances?agent=``                    the conversation instances on disk
``DELETE /v1/agents/{agent}/instances/{key}``    delete one conversation
``GET  /v1/approvals?agent=&all=1``             tool calls parked for approval (pending ones,
                                                 or every one with ``all``)
``GET  /v1/approvals/{id}``                      one approval
``POST /v1/approvals/{id}/approve``              ``{arguments?}``: the call runs (with these
                                                 arguments if given); 200 with the approval
``POST /v1/approvals/{id}/reject``               ``{reason}``: the model gets ``E_TOOL_REJECTED``
                                                 with the reason; 200 with the approval.
                                                 ``?wait=1`` on either: also the Turn's answer
                                                 (``turn``), once it ends (``null`` past the
                                                 swarm's request timeout).
                                                 Deciding: 404 unknown id, 409 decided already
                                                 or expired, 400 bad body or arguments that
                                                 do not fit the tool, 503 agent unreachable
``GET  /v1/events?agent=&trace=``               runtime events as they happen (server-sent events)
``GET  /metrics``                                Prometheus metrics
``GET  /v1/models``, ``POST /v1/chat/completions`` the OpenAI-compatible front door (the agent
                                                 is the model)
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from goondan.errors import DaemonError
from ipc import DEFAULT_INSTANCE_KEY
from orchestrator.api_client import socket_path
from orchestrator.approvals import BadDecision, decision_from_body, find_approval, list_approvals
from orchestrator.eventlog import matches
from orchestrator.events_hub import END_OF_STREAM
from orchestrator.state_dir import list_instances
from orchestrator.status import ProcessStatus

if TYPE_CHECKING:
    import uvicorn

    from orchestrator.daemon import Orchestrator
    from orchestrator.metrics import SwarmMetrics

API_LISTEN_BACKLOG = 4096
"""Connections the kernel queues before the server accepts them (many CLI calls at once)."""
MAX_BODY_BYTES = 1024 * 1024
"""Largest request body accepted (413 past it)."""
MAX_IDLE_CONNECTIONS = 256
"""Open connections waiting for a request; one more closes the one idle the longest, so idle
clients can neither exhaust the daemon's descriptors nor lock an operator's ``status`` out."""
IDLE_SECONDS = 30.0
"""A connection that sends no request for this long is closed."""


class DaemonAlreadyRunning(DaemonError, RuntimeError):
    """Another daemon serves this state directory."""


class ApiRefused(DaemonError, RuntimeError):
    """The HTTP API cannot start as asked (a public listener without a token)."""


def private_unix_socket(path: Path, backlog: int) -> socket.socket:
    """A listening Unix socket at ``path`` that only this user may connect to (mode 0600)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # born 0600: no window where others may connect
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def _answers(path: Path) -> bool:
    """Whether something accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def error(status: int, code: str, message: str) -> JSONResponse:
    """The JSON error body every failure of the API answers with."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    503: "SHUTTING_DOWN",
}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _STATUS_CODES.get(exc.status_code, "HTTP_ERROR")
    response = error(exc.status_code, code, str(exc.detail))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object; 413 past the limit, 400 when it is not an object."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise HTTPException(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return data


class _BearerToken:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = error(401, "UNAUTHORIZED", "a valid bearer token is required")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Measured:
    """ASGI middleware: count every request by route template and status, time it."""

    def __init__(self, app: ASGIApp, metrics: SwarmMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.metrics.http_requests.labels(template, scope["method"], str(status)).inc()
            self.metrics.http_seconds.labels(template).observe(time.perf_counter() - started)


Handler = Callable[[Request], Awaitable[Response]]


def build_app(orchestrator: Orchestrator, token: str | None = None) -> ASGIApp:
    """The API of ``orchestrator`` as an ASGI app (token-checked when ``token`` is given)."""
    daemon = orchestrator

    def known(agent: str) -> None:
        if agent not in daemon.supervisor.handles:
            raise HTTPException(404, f"unknown agent {agent!r}")

    def accepting() -> None:
        if daemon.stopping:
            raise HTTPException(503, "the daemon is shutting down")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "pid": os.getpid()})

    async def readyz(request: Request) -> Response:
        handle = daemon.supervisor.handles.get(daemon.entry_agent)
        ready = handle is not None and handle.ready_now and not daemon.stopping
        status = handle.status.value if handle is not None else ProcessStatus.TERMINATED.value
        body = {"ready": ready, "entryAgent": daemon.entry_agent, "status": status}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def agents(request: Request) -> Response:
        body = {
            "swarm": daemon.swarm.name,
            "pid": os.getpid(),
            "agents": daemon.status(),
            "connections": daemon.connections.status(),
        }
        return JSONResponse(body)

    def turn_input(data: dict[str, Any]) -> tuple[str, str, int | None]:
        text, key, timeout = data.get("input"), data.get("instanceKey"), data.get("timeoutMs")
        if not isinstance(text, str) or not text.strip():
            raise HTTPException(400, "input must be non-empty text")
        if key is not None and not isinstance(key, str):
            raise HTTPException(400, "instanceKey must be a string")
        valid_timeout = isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0
        if timeout is not None and not valid_timeout:
            raise HTTPException(400, "timeoutMs must be a positive integer")
        return text, key or DEFAULT_INSTANCE_KEY, timeout

    async def request_turn(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        text, key, timeout = turn_input(await _json_body(request))
        answer = await daemon.router.request(agent, text, instance_key=key, timeout_ms=timeout)
        return JSONResponse(answer.to_wire(), status_code=200 if answer.ok else 502)

    async def send(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        text, key, _ = turn_input(await _json_body(request))
        daemon.send_unwaited(text, agent, key)
        return JSONResponse({"accepted": True, "agent": agent, "instanceKey": key}, 202)

    async def restart(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        handle = await daemon.supervisor.restart_agent(agent, daemon.grace)
        return JSONResponse({"agent": agent, "pid": handle.pid})

    async def requests(request: Request) -> Response:
        rows = [pending.to_json() for pending in daemon.router.pending.values()]
        return JSONResponse({"requests": rows})

    async def cancel(request: Request) -> Response:
        identifier = request.path_params["id"]
        reason = (await _json_body(request)).get("reason") or "cancelled by an operator"
        if not isinstance(reason, str):
            raise HTTPException(400, "reason must be text")
        traces = daemon.cancel(identifier, reason)
        if not traces:
            raise HTTPException(404, f"no running request or trace {identifier!r}")
        return JSONResponse({"cancelled": traces, "reason": reason})

    async def instances(request: Request) -> Response:
        agent = request.query_params.get("agent")
        if agent is not None:
            known(agent)
        return JSONResponse({"instances": list_instances(daemon.state_dir, agent)})

    async def delete_instance(request: Request) -> Response:
        agent, key = request.path_params["agent"], request.path_params["key"]
        known(agent)
        answer = await daemon.delete_instance(agent, key)
        if answer.get("ok"):
            return JSONResponse(answer)
        return error(409, "INSTANCE_NOT_DELETED", str(answer.get("error")))

    async def approvals(request: Request) -> Response:
        agent = request.query_params.get("agent")
        if agent is not None:
            known(agent)
        include_decided = request.query_params.get("all") not in (None, "", "0", "false")
        rows = list_approvals(daemon.state_dir, agent=agent, include_decided=include_decided)
        return JSONResponse({"approvals": rows})

    async def approval(request: Request) -> Response:
        approval_id = request.path_params["id"]
        record = find_approval(daemon.state_dir, approval_id)
        if record is None:
            return error(404, "APPROVAL_NOT_FOUND", f"no approval {approval_id!r}")
        return JSONResponse({"approval": record})

    def deciding(decision: Literal["approve", "reject"]) -> Handler:
        async def decide(request: Request) -> Response:
            accepting()
            approval_id = request.path_params["id"]
            try:
                wanted = decision_from_body(approval_id, decision, await _json_body(request))
            except BadDecision as exc:
                return error(400, "BAD_REQUEST", str(exc))
            wait = request.query_params.get("wait") not in (None, "", "0", "false")
            outcome = await daemon.decide_approval(wanted, wait=wait)
            return JSONResponse(outcome.body, status_code=outcome.status)

        return decide

    async def metrics(request: Request) -> Response:
        from orchestrator.metrics import CONTENT_TYPE

        assert daemon.metrics is not None
        return Response(daemon.metrics.exposition(), media_type=CONTENT_TYPE)

    async def events(request: Request) -> Response:
        agent = request.query_params.get("agent")
        trace = request.query_params.get("trace")
        if agent is not None:
            known(agent)
        return StreamingResponse(
            _event_stream(daemon, request, agent, trace),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    openai = _OpenAICompatible(daemon)
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", openai.models, methods=["GET"]),
        Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/v1/agents", agents, methods=["GET"]),
        Route("/v1/agents/{agent}/requests", request_turn, methods=["POST"]),
        Route("/v1/agents/{agent}/sends", send, methods=["POST"]),
        Route("/v1/agents/{agent}/restart", restart, methods=["POST"]),
        Route("/v1/requests", requests, methods=["GET"]),
        Route("/v1/requests/{id}/cancel", cancel, methods=["POST"]),
        Route("/v1/instances", instances, methods=["GET"]),
        Route("/v1/events", events, methods=["GET"]),
        Route("/v1/approvals", approvals, methods=["GET"]),
        Route("/v1/approvals/{id}", approval, methods=["GET"]),
        Route("/v1/approvals/{id}/approve", deciding("approve"), methods=["POST"]),
        Route("/v1/approvals/{id}/reject", deciding("reject"), methods=["POST"]),
        Route("/v1/agents/{agent}/instances/{key:path}", delete_instance, methods=["DELETE"]),
    ]
    app: ASGIApp = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    if daemon.metrics is not None:
        app = _Measured(app, daemon.metrics)
    return _BearerToken(app, token) if token else app


KEEPALIVE_SECONDS = 15.0
"""An idle event stream sends a comment this often, so proxies and clients keep it open."""


async def _event_stream(
    daemon: Orchestrator, request: Request, agent: str | None, trace: str | None
) -> AsyncIterator[bytes]:
    """Server-sent events: one ``data:`` line per runtime event that passes the filters, as it
    happens, until the client leaves or the daemon stops."""
    async with daemon.live.subscribe() as subscription:
        yield b": connected\n\n"
        reported = 0
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE_SECONDS):
                    event = await subscription.queue.get()
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield b": keepalive\n\n"
                continue
            if event is END_OF_STREAM:
                return
            if subscription.dropped > reported:
                lost = subscription.dropped - reported
                reported = subscription.dropped
                yield f"event: dropped\ndata: {lost}\n\n".encode()
            if matches(event, agent=agent, trace=trace, since=None):
                line = json.dumps(event, ensure_ascii=False, default=str)
                yield f"event: {event.get('type', 'event')}\ndata: {line}\n\n".encode()


class _OpenAICompatible:
    """``/v1/models`` and ``/v1/chat/completions``: the swarm as an OpenAI-compatible server.

    ``model`` names the agent (the swarm's name, or ``goondan``, names the entry agent); the last
    user message is the input; the ``X-Goondan-Instance`` header, else ``user``, selects the
    instance key. ``stream: true`` answers with the standard ``chat.completion.chunk`` SSE
    stream ending in ``data: [DONE]``; until the providers stream, the answer is one chunk.
    """

    def __init__(self, daemon: Orchestrator) -> None:
        self.daemon = daemon
        self.created = int(time.time())

    def _error(self, status: int, code: str, message: str) -> JSONResponse:
        # OpenAI clients read error.message and error.type; code stays ours.
        body = {"error": {"code": code, "message": message, "type": "invalid_request_error"}}
        return JSONResponse(body, status_code=status)

    async def models(self, request: Request) -> Response:
        owner = self.daemon.swarm.name
        data = [
            {"id": name, "object": "model", "created": self.created, "owned_by": owner}
            for name in self.daemon.supervisor.handles
        ]
        return JSONResponse({"object": "list", "data": data})

    def _agent(self, model: object) -> str | None:
        daemon = self.daemon
        if model in daemon.supervisor.handles:
            return str(model)
        if model in (daemon.swarm.name, "goondan"):
            return daemon.entry_agent
        return None

    async def chat_completions(self, request: Request) -> Response:
        data = await _json_body(request)
        agent = self._agent(data.get("model"))
        if agent is None:
            return self._error(404, "AGENT_NOT_FOUND", f"no agent named {data.get('model')!r}")
        text = _last_user_text(data.get("messages"))
        if text is None:
            return self._error(400, "BAD_REQUEST", "messages must end with a user message")
        if self.daemon.stopping:
            return self._error(503, "SHUTTING_DOWN", "the daemon is shutting down")
        user = data.get("user")
        key = request.headers.get("x-goondan-instance") or (
            user if isinstance(user, str) and user else DEFAULT_INSTANCE_KEY
        )
        answer = await self.daemon.router.request(agent, text, instance_key=key)
        if not answer.ok:
            error = answer.error
            code = error.code if error is not None else "AGENT_TURN_FAILED"
            message = error.message if error is not None else "the request failed"
            return self._error(502, code, message)
        turn = answer.turn or {}
        completion_id = f"chatcmpl-{turn.get('traceId') or secrets.token_hex(16)}"
        content = answer.output if isinstance(answer.output, str) else json.dumps(answer.output)
        if data.get("stream") is True:
            return _chunk_stream(completion_id, agent, self.created, content)
        usage = turn.get("tokenUsage") or {}
        prompt, completion = usage.get("promptTokens", 0), usage.get("completionTokens", 0)
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": agent,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )


def _last_user_text(messages: object) -> str | None:
    """The text of the last message when it is the user's (string or text parts)."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return content if isinstance(content, str) and content.strip() else None


def _chunk_stream(completion_id: str, model: str, created: int, content: str) -> Response:
    """The standard SSE stream of ``chat.completion.chunk`` objects, then ``[DONE]``."""

    def chunk(delta: dict[str, str], finish: str | None) -> bytes:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": content}, None)
        yield chunk({}, "stop")
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) → ``(host, port)``."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen wants HOST:PORT, got {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiServer:
    """Serves :func:`build_app` on the state directory's Unix socket, and on TCP if asked."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        *,
        listen: str | None = None,
        token: str | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.path = socket_path(orchestrator.state_dir)
        self.tcp = parse_listen(listen) if listen else None
        if self.tcp is not None and not is_loopback(self.tcp[0]) and not token:
            raise ApiRefused(
                f"refusing to listen on {listen} without a token: "
                "pass --api-token-env NAME (an environment variable holding the token)"
            )
        self.token = token
        self._server: uvicorn.Server | None = None
        self._owned = False
        self.port: int | None = None
        """The TCP port actually bound (useful with port 0)."""
        self.log = structlog.get_logger("goondan.api")

    async def start(self) -> None:
        """Bind the sockets and serve in the background (owned by the daemon's tasks)."""
        import uvicorn

        sockets = [self._unix_socket()]
        if self.tcp is not None:
            tcp = socket.create_server(self.tcp, family=_family(self.tcp[0]), reuse_port=False)
            self.port = tcp.getsockname()[1]
            sockets.append(tcp)
        config = uvicorn.Config(
            build_app(self.orchestrator, self.token),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            http=_guarded_protocol(),
        )
        self._server = _server_class()(config)
        self.orchestrator.tasks.start_soon(self._server.serve(sockets=sockets), "http-api")
        self.log.info("http api listening", socket=str(self.path), tcp=self.tcp, port=self.port)

    def _unix_socket(self) -> socket.socket:
        """Bind ``api.sock``: refuse if a live daemon owns it, replace it if stale."""
        if self.path.exists() or self.path.is_symlink():
            if _answers(self.path):
                raise DaemonAlreadyRunning(
                    f"a daemon is already running for {self.path.parent} (socket {self.path}); "
                    "stop it first, or use another --state-dir"
                )
            self.log.warning("replacing a stale api socket", path=str(self.path))
            self.path.unlink()
        sock = private_unix_socket(self.path, API_LISTEN_BACKLOG)
        self._owned = True
        return sock

    async def close(self) -> None:
        """Stop serving and remove the socket (only ours: never a live daemon's)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._owned:
            self._owned = False
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        """A uvicorn server that leaves the process's signals alone: SIGINT and SIGTERM are
        the daemon's, which drains its agents and then stops this server itself."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server


def _guarded_protocol() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's HTTP/1.1 protocol with idle connections bounded.

        A connection that has not sent a (next) request is idle. Idle ones are closed after
        :data:`IDLE_SECONDS`, and past :data:`MAX_IDLE_CONNECTIONS` the one idle the longest is
        closed at once: a flood of silent clients costs no descriptors beyond the cap, and a
        request always finds room.
        """

        idle_since: ClassVar[dict[GuardedH11Protocol, float]]

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._went_idle()

        def connection_lost(self, exc: Exception | None) -> None:
            self.idle_since.pop(self, None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self.idle_since.pop(self, None)
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._went_idle()

        def _went_idle(self) -> None:
            self.idle_since[self] = time.monotonic()
            if self.timeout_keep_alive_task is None:  # no request yet: uvicorn sets none
                self.timeout_keep_alive_task = self.loop.call_later(
                    IDLE_SECONDS, self.timeout_keep_alive_handler
                )
            excess = len(self.idle_since) - MAX_IDLE_CONNECTIONS
            if excess > 0:
                for oldest in sorted(self.idle_since, key=self.idle_since.__getitem__)[:excess]:
                    self.idle_since.pop(oldest, None)
                    oldest.transport.close()

    GuardedH11Protocol.idle_since = {}
    return GuardedH11Protocol


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
