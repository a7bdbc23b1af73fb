"""The daemon's HTTP API: Starlette routes served by uvicorn.

It always listens on ``<state>/api.sock``, a Unix socket created with mode 0600 (only the
daemon's user may connect): the CLI's ``status``, ``send``, ``restart``, ``instances``,
``approve``, ``reject`` and ``logs --follow`` go through it. A live socket there makes a second daemon on the same state
refuse to start; a stale one (its daemon was killed) is replaced. ``run --listen HOST:PORT``
adds a TCP listener. A TCP listener off loopback
refuses to start without a bearer token, and with a token every request on TCP must carry it
(``Authorization: Bearer <token>``), else 401; ``api.sock`` is checked by its mode and the
peer's credentials instead. Approvals are decided by operators only (see
:mod:`orchestrator.http.approvers`): a decision records who made it, and one coming from a process
of the swarm's agents is refused (403).

Every error is JSON ``{"error": {"code", "message"}}``: unknown route 404, wrong method 405,
body over :data:`~orchestrator.http.body.MAX_BODY_BYTES` 413, a body refused at the door 400 (with ``field`` naming
what is wrong: see :mod:`orchestrator.http.body`), missing token 401, a decision from an
agent's process 403. Web pages are kept out by :mod:`orchestrator.http.guard`: a ``Host`` the
TCP listener does not answer to 421, an ``Origin`` not allowed 403, a ``POST`` or ``DELETE``
without ``Content-Type: application/json`` 415.

Slow and many clients starve nobody (:class:`goondan.http_server.GuardedServer`, on both
listeners): a request head must arrive within 10 s and a body keep 4 KiB/s (408 otherwise);
stalled connections are shed (503) to make room; one TCP address holds at most a quarter of
the connections the daemon's descriptors allow (503 with ``Retry-After`` past it); and a burst
past capacity waits in the listen backlog.

Routes (all JSON):

``GET  /healthz``                                the process is up
``GET  /readyz``                                 200 when the entry agent is ready, else 503
``GET  /v1/agents``                              one status row per agent (and per Connection)
``POST /v1/agents/{agent}/requests``             ``{input, instanceKey?, timeoutMs?, stream?,
                                                 relay?, approvals?}``: run a Turn, answer with
                                                 the delegate answer (200, or 502 when the
                                                 request failed; 409 ``INSTANCE_BUSY`` when the
                                                 conversation's Turn runs and the agent's
                                                 ``policy.concurrency`` is ``reject``)
``POST /v1/agents/{agent}/sends``                the same without waiting: 202
``POST /v1/agents/{agent}/restart``              stop gracefully, start again (``?fresh=1``:
                                                 its conversations deleted in between)
``GET  /v1/requests``                            the requests waiting for an answer
``GET  /v1/requests/{id}?wait=SECONDS``          an accepted request by its id: ``{requestId,
                                                 state, answer?}`` (see
                                                 :mod:`orchestrator.http.requests`)
``GET  /v1/requests/{id}/events``                its stream again, after ``Last-Event-ID``
``POST /v1/requests/{id}/cancel``                ``{reason?}``: cancel a request (by request id
                                                 or trace id): answered ``CANCELLED`` now, its
                                                 Turns stop at their next safe point; 404 when
                                                 nothing of that id runs
``GET  /v1/instances?agent=``                    the conversation instances on disk
``GET  /v1/usage?traces=N``                     tokens and cost per agent, instance, recent
                                                 trace and rate-limit pool, with what is left
                                                 of each budget (``?trace=ID``: one trace)
``DELETE /v1/agents/{agent}/instances/{key}``    delete one conversation
``POST /v1/agents/{agent}/instances/{key}/restart`` reload one conversation from disk; its running
                                                 Turn is answered ``CANCELLED``
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
``GET  /openapi.json``                           this API as an OpenAPI 3.1 document
                                                 (:mod:`orchestrator.http.openapi`)
``GET  /v1/models``, ``POST /v1/chat/completions`` the OpenAI-compatible front door (the agent
                                                 is the model)
``POST /v1/responses``, ``GET /v1/responses/{id}`` the OpenAI Responses API
                                                 (:mod:`orchestrator.http.responses_api`)
``GET|POST|DELETE /mcp``                         the MCP server (Streamable HTTP; each agent a
                                                 tool: :mod:`orchestrator.http.mcp_server`)
``GET  /a2a/{agent}/.well-known/agent-card.json`` an agent's A2A card (the entry agent's also
                                                 at ``/.well-known/agent-card.json``)
``POST /a2a/{agent}``                            its A2A JSON-RPC endpoint (the A2A front door,
                                                 :mod:`orchestrator.http.a2a`)

Streamed answers are served by :mod:`orchestrator.http.streams`, the OpenAI-compatible front
door by :mod:`orchestrator.http.openai`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import structlog
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from goondan.errors import DaemonError, DeliveryCode, HttpCode
from goondan.http_server import GuardedServer
from goondan.loopback import is_loopback
from orchestrator.approvals import BadDecision, decision_from_body
from orchestrator.callers import ApiToken, Identify, connection_app
from orchestrator.http.approvers import vet_decider
from orchestrator.http.body import BadBody, Fields, read_object
from orchestrator.http.client import socket_path
from orchestrator.http.front_doors import api_document, front_door_routes
from orchestrator.http.guard import HostAllowList, JsonOnly, guard
from orchestrator.http.openai import OpenAICompatible
from orchestrator.http.requests import hand_over, request_events, request_state, run_turn
from orchestrator.http.responses import AnswerResponse, error
from orchestrator.http.responses_api import response_of
from orchestrator.http.servers import address_family
from orchestrator.http.streams import event_stream, sse
from orchestrator.limits.usage import TRACES_KEPT
from orchestrator.operations import OperationRefused, SwarmOperations
from orchestrator.operations.answers import (
    ApprovalAnswer,
    Approvals,
    Cancelled,
    ErrorBody,
    ErrorDetail,
    Health,
    InstanceDeleted,
    InstanceRestarted,
    Instances,
    Readiness,
    Requests,
)
from orchestrator.requests import RequestDesk, RequestStore
from orchestrator.status import ProcessStatus
from orchestrator.tasks import TaskOwner

if TYPE_CHECKING:
    from orchestrator.http.metrics import SwarmMetrics

API_LISTEN_BACKLOG = 4096
"""Connections the kernel queues before the server accepts them (many CLI calls at once)."""


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


_STATUS_CODES = {
    400: HttpCode.BAD_REQUEST,
    401: HttpCode.UNAUTHORIZED,
    404: HttpCode.NOT_FOUND,
    405: HttpCode.METHOD_NOT_ALLOWED,
    413: HttpCode.PAYLOAD_TOO_LARGE,
    503: DeliveryCode.SHUTTING_DOWN,
}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _STATUS_CODES.get(exc.status_code, HttpCode.HTTP_ERROR)
    response = error(exc.status_code, code, str(exc.detail))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _bad_body(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadBody)
    detail = ErrorDetail(code=HttpCode.BAD_REQUEST, message=exc.message)
    if exc.field is not None:
        detail.field = exc.field
    return AnswerResponse(ErrorBody(error=detail), 400)


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
            seconds = time.perf_counter() - started
            self.metrics.observe_http(template, scope["method"], status, seconds)


Handler = Callable[[Request], Awaitable[Response]]


def build_app(
    swarm: SwarmOperations,
    tokens: Sequence[ApiToken] = (),
    *,
    metrics: SwarmMetrics | None = None,
    hosts: HostAllowList | None = None,
    cors_origins: Sequence[str] = (),
    desk: RequestDesk | None = None,
    tasks: TaskOwner | None = None,
) -> ASGIApp:
    """The API of ``swarm`` as an ASGI app (on TCP, token-checked when there are ``tokens``,
    and served only to the names in ``hosts``); pages of ``cors_origins`` may use it from a
    browser, no other page may. With ``metrics``, ``/metrics`` serves them and every request
    is counted. Every request knows its :class:`~orchestrator.callers.Caller`. Requests are
    accepted through ``desk`` (default: one keeping its records in memory only); the front
    doors' background work (MCP sessions) runs in ``tasks``."""
    daemon = swarm
    requests_desk = desk if desk is not None else RequestDesk(swarm, RequestStore(None))
    openai = OpenAICompatible(daemon, requests_desk)

    def known(agent: str) -> None:
        if agent not in daemon.agent_names():
            raise HTTPException(404, f"unknown agent {agent!r}")

    def accepting() -> None:
        if daemon.stopping:
            raise HTTPException(503, "the daemon is shutting down")

    async def healthz(request: Request) -> Response:
        return AnswerResponse(Health(ok=True, pid=os.getpid()))

    async def readyz(request: Request) -> Response:
        entry = daemon.agent(daemon.entry_agent)
        ready = entry is not None and entry.ready and not daemon.stopping
        status = entry.status if entry is not None else ProcessStatus.NOT_STARTED
        body = Readiness(ready=ready, entry_agent=daemon.entry_agent, status=status.value)
        return AnswerResponse(body, 200 if ready else 503)

    async def agents(request: Request) -> Response:
        status = daemon.status()
        status.pid = os.getpid()
        return AnswerResponse(status)

    async def usage(request: Request) -> Response:
        trace_id = request.query_params.get("trace")
        if trace_id is not None:
            entry = daemon.trace_usage(trace_id)
            if entry is None:
                raise HTTPException(404, f"no usage recorded for trace {trace_id!r}")
            return AnswerResponse(entry)
        count = request.query_params.get("traces", "50")
        if not count.isdigit():
            raise HTTPException(400, "traces must be a whole number")
        return AnswerResponse(daemon.usage_report(traces=min(int(count), TRACES_KEPT)))

    async def request_turn(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        return await run_turn(requests_desk, request, agent)

    async def send(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        return await hand_over(requests_desk, request, agent)

    async def request_by_id(request: Request) -> Response:
        return await request_state(
            requests_desk, request, {"chat": openai.completion_of, "responses": response_of}
        )

    async def events_by_id(request: Request) -> Response:
        return await request_events(requests_desk, request)

    async def restart(request: Request) -> Response:
        agent = request.path_params["agent"]
        known(agent)
        accepting()
        fresh = request.query_params.get("fresh") in ("1", "true")
        try:
            return AnswerResponse(await daemon.restart(agent, fresh=fresh))
        except OperationRefused as exc:
            raise HTTPException(409, str(exc)) from None

    async def requests(request: Request) -> Response:
        return AnswerResponse(Requests(requests=daemon.pending()))

    async def cancel(request: Request) -> Response:
        identifier = request.path_params["id"]
        fields = Fields(await read_object(request), ("reason",))
        reason = fields.text("reason") or "cancelled by an operator"
        # An accepted request's id names its trace.
        traces = daemon.cancel(requests_desk.trace_of(identifier) or identifier, reason)
        if not traces:
            raise HTTPException(404, f"no running request or trace {identifier!r}")
        return AnswerResponse(Cancelled(cancelled=traces, reason=reason))

    async def instances(request: Request) -> Response:
        agent = request.query_params.get("agent")
        if agent is not None:
            known(agent)
        return AnswerResponse(Instances(instances=daemon.instances(agent)))

    async def delete_instance(request: Request) -> Response:
        agent, key = request.path_params["agent"], request.path_params["key"]
        known(agent)
        answer = await daemon.delete_instance(agent, key)
        if answer.ok:
            return AnswerResponse(InstanceDeleted(ok=True, deleted=answer.deleted))
        return error(409, HttpCode.INSTANCE_NOT_DELETED, str(answer.error))

    async def restart_instance(request: Request) -> Response:
        agent, key = request.path_params["agent"], request.path_params["key"]
        known(agent)
        accepting()
        answer = await daemon.restart_instance(agent, key)
        if answer.ok:
            restarted = InstanceRestarted(
                agent=agent,
                instance_key=key,
                ok=True,
                loaded=answer.loaded,
                stopped_turns=answer.stopped_turns,
            )
            return AnswerResponse(restarted)
        return error(409, HttpCode.INSTANCE_NOT_RESTARTED, str(answer.error))

    async def approvals(request: Request) -> Response:
        agent = request.query_params.get("agent")
        if agent is not None:
            known(agent)
        include_decided = request.query_params.get("all") not in (None, "", "0", "false")
        rows = daemon.approvals(agent=agent, include_decided=include_decided)
        return AnswerResponse(Approvals(approvals=rows))

    async def approval(request: Request) -> Response:
        approval_id = request.path_params["id"]
        record = daemon.approval(approval_id)
        if record is None:
            return error(404, HttpCode.APPROVAL_NOT_FOUND, f"no approval {approval_id!r}")
        return AnswerResponse(ApprovalAnswer(approval=record))

    def deciding(decision: Literal["approve", "reject"]) -> Handler:
        async def decide(request: Request) -> Response:
            accepting()
            approval_id = request.path_params["id"]
            decider = await vet_decider(daemon, request, approval_id)
            if isinstance(decider, Response):
                return decider
            try:
                body = await read_object(request)
                wanted = decision_from_body(approval_id, decision, body, decider.to_json())
            except BadDecision as exc:
                return error(400, HttpCode.BAD_REQUEST, str(exc))
            wait = request.query_params.get("wait") not in (None, "", "0", "false")
            outcome = await daemon.decide(wanted, wait=wait)
            return AnswerResponse(outcome.body, outcome.status)

        return decide

    async def scrape(request: Request) -> Response:
        from orchestrator.http.metrics import CONTENT_TYPE

        if metrics is None:
            raise HTTPException(404, "no metrics are kept")
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def openapi(request: Request) -> Response:
        return Response(api_document(), media_type="application/json")

    async def events(request: Request) -> Response:
        agent = request.query_params.get("agent")
        trace = request.query_params.get("trace")
        if agent is not None:
            known(agent)
        return sse(event_stream(daemon, request, agent, trace))

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", scrape, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/models", openai.models, methods=["GET"]),
        Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/v1/agents", agents, methods=["GET"]),
        Route("/v1/agents/{agent}/requests", request_turn, methods=["POST"]),
        Route("/v1/agents/{agent}/sends", send, methods=["POST"]),
        Route("/v1/agents/{agent}/restart", restart, methods=["POST"]),
        Route("/v1/requests", requests, methods=["GET"]),
        Route("/v1/requests/{id}", request_by_id, methods=["GET"]),
        Route("/v1/requests/{id}/events", events_by_id, methods=["GET"]),
        Route("/v1/requests/{id}/cancel", cancel, methods=["POST"]),
        Route("/v1/instances", instances, methods=["GET"]),
        Route("/v1/usage", usage, methods=["GET"]),
        Route("/v1/events", events, methods=["GET"]),
        Route("/v1/approvals", approvals, methods=["GET"]),
        Route("/v1/approvals/{id}", approval, methods=["GET"]),
        Route("/v1/approvals/{id}/approve", deciding("approve"), methods=["POST"]),
        Route("/v1/approvals/{id}/reject", deciding("reject"), methods=["POST"]),
        Route("/v1/agents/{agent}/instances/{key:path}", delete_instance, methods=["DELETE"]),
        Route(
            "/v1/agents/{agent}/instances/{key:path}/restart", restart_instance, methods=["POST"]
        ),
        *front_door_routes(daemon, requests_desk, tasks),
    ]
    handlers = {HTTPException: _http_error, BadBody: _bad_body}
    app: ASGIApp = Starlette(routes=routes, exception_handlers=handlers)
    app = guard(Identify(JsonOnly(app), tokens), hosts=hosts, cors_origins=cors_origins)
    if metrics is not None:  # outermost: refusals are counted too
        app = _Measured(app, metrics)
    return app


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) → ``(host, port)``."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen wants HOST:PORT, got {value!r}")
    return host, int(port)


class ApiServer:
    """Serves :func:`build_app` on the state directory's Unix socket, and on TCP if asked."""

    def __init__(
        self,
        swarm: SwarmOperations,
        state_dir: Path,
        *,
        listen: str | None = None,
        token: ApiToken | None = None,
        allowed_hosts: Sequence[str] = (),
        cors_origins: Sequence[str] = (),
        metrics: SwarmMetrics | None = None,
        tasks: TaskOwner,
        desk: RequestDesk | None = None,
    ) -> None:
        self.swarm = swarm
        self.desk = desk
        """Where requests are accepted (recorded in the state directory)."""
        self.path = socket_path(state_dir)
        self.allowed_hosts, self.cors_origins = allowed_hosts, cors_origins
        self.metrics = metrics
        self.tasks = tasks
        """Owns the server's task (the daemon's, cancelled last at shutdown)."""
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
        hosts = None
        if self.tcp is not None:
            try:  # before binding: a bad entry leaves nothing to clean up
                hosts = HostAllowList.of(self.tcp[0], self.tcp[1], self.allowed_hosts)
            except ValueError as exc:
                raise ApiRefused(str(exc)) from None
        sockets = [self._unix_socket()]
        if self.tcp is not None and hosts is not None:
            tcp = socket.create_server(
                self.tcp, family=address_family(self.tcp[0]), reuse_port=False
            )
            self.port = tcp.getsockname()[1]
            hosts = dataclasses.replace(hosts, port=self.port)  # port 0: the one bound
            sockets.append(tcp)
        app = build_app(
            self.swarm,
            [self.token] if self.token else [],
            metrics=self.metrics,
            hosts=hosts,
            cors_origins=self.cors_origins,
            desk=self.desk,
            tasks=self.tasks,
        )
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            # Callers are known by their socket (orchestrator.callers), never by headers: a
            # loopback peer's X-Forwarded-For must not rewrite who it is, and the layer costs.
            proxy_headers=False,
        )
        # Deadlines for heads and bodies, bounded connections per peer, bursts queued or
        # refused with 503 (goondan.http_server); each connection's app knows its peer.
        self._server = GuardedServer(config, wrap=connection_app, log=self.log)
        self.tasks.start_soon(self._server.serve(sockets=sockets), "http-api")
        address = f"{self.tcp[0]}:{self.port}" if self.tcp is not None else None
        self.log.info("http api listening", socket=str(self.path), tcp=address, port=self.port)

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
