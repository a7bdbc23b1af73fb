"""The swarm's agents as A2A agents (Agent2Agent protocol 1.0, on the official ``a2a-sdk``).

Routes (every agent the ``a2a`` door shows: ``Agent.spec.expose``, ``Swarm.spec.expose``):

``GET  /a2a/{agent}/.well-known/agent-card.json``  the agent's card
``GET  /.well-known/agent-card.json``              the entry agent's card
``POST /a2a/{agent}``                              its JSON-RPC endpoint

The card (:mod:`orchestrator.http.a2a_card`) names the agent, its description, the endpoint's
absolute URL (from the request's scheme and ``Host``), goondan's version, streaming, text in
and out, a skill for the agent and one per function of its Tools, and the bearer scheme when
the caller reached the daemon with its token: that is every caller of a TCP listener that has
one, while a card read on ``api.sock`` (whose URL names the socket's host) needs none.

Mapping. A task is one request of the request desk (:mod:`orchestrator.requests`), kind
``a2a``: its id is the request's id, its ``contextId`` the conversation's instance key (a
message without one starts a new conversation; another message with the same ``contextId``
continues it), and the message's ``messageId`` is the request's idempotency key, so a message
sent again after a dropped connection finds its task instead of starting a second Turn.
``SendMessage`` answers the task once it is ``completed`` (the answer as the artifact
``answer``), ``failed`` or ``canceled`` (the error's message and code in the status message),
or waits for an approval (``input-required``); ``configuration.returnImmediately`` answers
at once with the task ``working``. ``SendStreamingMessage`` streams the task (``submitted``),
``working`` (again with each piece of the model's text as it is produced, as the status
message: the answer itself comes whole as the artifact), each approval wait (``input-required``, then ``working`` once decided), the
answer's artifact and the final status, as server-sent events. ``GetTask`` reads the
request's record, so a task is found after its connection dropped and after a restart of the
daemon (within the desk's retention). ``CancelTask`` cancels the request's trace
(:meth:`~orchestrator.operations.SwarmOperations.cancel`). ``SubscribeToTask`` follows a
running task again. The 0.3 method names (``message/send``, ``message/stream``,
``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``) are taken too, through the SDK's
compatibility adapter. Listing tasks, push notifications and the extended card are not
offered (the SDK's "unsupported operation" error).

Approvals. A tool call parked for approval in the task's Turn (in any agent it reaches) puts
the task in ``input-required``; its status message names the approval id and how to decide
it (``goondan approve``, the studio, ``POST /v1/approvals/{id}/approve``). The decision,
through any of them, resumes the Turn, and the task goes on to its end: a stream shows it,
``GetTask`` finds it.

Why the SDK's JSON-RPC machinery but not its default request handler. The SDK's
:class:`~a2a.server.routes.jsonrpc_dispatcher.JsonRpcDispatcher` parses JSON-RPC, routes the
methods (1.0 and 0.3), checks the ``A2A-Version`` header and required fields, and answers
errors and streams in the protocol's shapes: this door uses it as it is, behind the API's
guards (token, Host, Origin, JSON-only) like every route. Its ``DefaultRequestHandler``,
though, keeps tasks in a registry of its own (task ids it makes, a task store, an executor
run per task in memory): beside the request desk, which already records every request
before it is accepted, runs it once per key, keeps its answer and picks it up again after a
restart, that would be a second record of the same work whose ids are not the request's, and
which a restart forgets. So the door implements the SDK's
:class:`~a2a.server.request_handlers.RequestHandler` interface over the desk
(:mod:`orchestrator.http.a2a_server`).

Bodies: at most :data:`~orchestrator.http.body.MAX_BODY_BYTES` (413); a body that nests too
deep, holds a lone surrogate or a number msgpack cannot carry is refused with the JSON-RPC
"invalid request" error naming the field (:func:`orchestrator.http.body.check_value`).
Without the ``a2a`` extra these routes answer 501 naming it.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message

from goondan.errors import DeliveryCode, HttpCode
from orchestrator.callers import caller_of
from orchestrator.http.body import BadBody, check_value, read_body
from orchestrator.http.openapi import Operation
from orchestrator.http.responses import error
from orchestrator.operations import SwarmOperations
from orchestrator.requests import RequestDesk

EXTRA_MISSING = (
    "the A2A front door needs the a2a extra: pip install 'goondan-py[a2a]' (the official a2a-sdk)"
)
OWN_PACKAGES = frozenset({"goondan", "bundle", "ipc", "orchestrator"})
"""Packages whose import failing is a fault of the runtime, never a missing extra."""
CARD_PATH = "/.well-known/agent-card.json"
A2A_SPEC = "https://a2a-protocol.org/latest/specification/"
"""Where A2A clients look for an agent's card, below the agent's base URL."""


A2A_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", CARD_PATH): Operation(
        "The entry agent's A2A agent card.", {"type": "object"}, tag="a2a", external=A2A_SPEC
    ),
    ("GET", "/a2a/{agent}" + CARD_PATH): Operation(
        "An agent's A2A agent card: its skills, endpoint and security scheme.",
        {"type": "object"},
        tag="a2a",
        external=A2A_SPEC,
    ),
    ("POST", "/a2a/{agent}"): Operation(
        "The agent's A2A JSON-RPC endpoint: SendMessage, SendStreamingMessage, GetTask, "
        "CancelTask (a task is an accepted request; its context the conversation).",
        {"type": "object"},
        body={"type": "object", "required": ["jsonrpc", "method"]},
        stream=True,
        tag="a2a",
        external=A2A_SPEC,
    ),
}
"""The door's routes, as the OpenAPI document describes them."""


def a2a_routes(
    daemon: SwarmOperations,
    desk: RequestDesk,
    shows: Callable[[str], bool],
    describe: Callable[[str], str],
) -> list[BaseRoute]:
    """The A2A front door's routes (answering 501 without the ``a2a`` extra), serving the
    agents ``shows`` says the ``a2a`` door shows, each doing what ``describe`` says
    (a :class:`~orchestrator.http.exposure.DoorView`'s ``shows`` and ``describe``)."""
    if importlib.util.find_spec("a2a") is None:
        structlog.get_logger("goondan.api").info(
            "the A2A front door is off: its extra is not installed", missing="a2a"
        )
        return _missing_routes()
    # The SDK (and the OpenTelemetry API it imports) loads on the first A2A request, not
    # when the daemon starts: most daemons never see one.
    door = _FirstUse(lambda: A2ADoor(daemon, desk, shows, describe))
    return [
        Route(CARD_PATH, door.entry_card, methods=["GET"]),
        Route("/a2a/{agent}" + CARD_PATH, door.card, methods=["GET"]),
        Route("/a2a/{agent}", door.rpc, methods=["POST"]),
    ]


class _FirstUse:
    """The door, made on the first request that needs it."""

    def __init__(self, make: Callable[[], A2ADoor]) -> None:
        self._make = make
        self._door: A2ADoor | None = None

    def _get(self) -> A2ADoor | None:
        if self._door is None:
            try:
                self._door = self._make()
            except ImportError as exc:
                if (exc.name or "").partition(".")[0] in OWN_PACKAGES:
                    raise  # a fault of ours, not a missing extra
                return None
        return self._door

    async def card(self, request: Request) -> Response:
        door = self._get()
        return await door.card(request) if door is not None else _missing()

    async def entry_card(self, request: Request) -> Response:
        door = self._get()
        return await door.entry_card(request) if door is not None else _missing()

    async def rpc(self, request: Request) -> Response:
        door = self._get()
        return await door.rpc(request) if door is not None else _missing()


def _missing() -> Response:
    return error(501, HttpCode.HTTP_ERROR, EXTRA_MISSING)


def _missing_routes() -> list[BaseRoute]:
    async def missing(request: Request) -> Response:
        return _missing()

    return [
        Route(CARD_PATH, missing, methods=["GET"]),
        Route("/a2a/{agent}" + CARD_PATH, missing, methods=["GET"]),
        Route("/a2a/{agent}", missing, methods=["POST"]),
    ]


def replayed(request: Request, body: bytes) -> Request:
    """``request`` again, its body (already read) handed out once more."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await request.receive()  # the client's disconnect, when it comes
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


class A2ADoor:
    """The A2A front door over ``daemon`` and ``desk`` (raises ``ImportError`` without the
    ``a2a-sdk``), serving the agents ``shows`` says it shows."""

    def __init__(
        self,
        daemon: SwarmOperations,
        desk: RequestDesk,
        shows: Callable[[str], bool],
        describe: Callable[[str], str],
    ) -> None:
        from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher

        from orchestrator.http.a2a_server import AgentContextBuilder, SwarmRequestHandler

        self.daemon = daemon
        self.shows, self.describe = shows, describe
        self.handler = SwarmRequestHandler(daemon, desk)
        self.dispatcher = JsonRpcDispatcher(
            self.handler, context_builder=AgentContextBuilder(), enable_v0_3_compat=True
        )

    def _unknown(self, agent: str) -> Response:
        return error(404, DeliveryCode.AGENT_NOT_FOUND, f"no agent named {agent!r} here")

    def _card(self, agent: str, request: Request) -> Response:
        from a2a.server.request_handlers.response_helpers import agent_card_to_dict

        from orchestrator.http.a2a_card import agent_card

        if not self.shows(agent):
            return self._unknown(agent)
        bearer = caller_of(request).token is not None
        card = agent_card(self.daemon, agent, self.describe(agent), request, bearer)
        return JSONResponse(agent_card_to_dict(card))

    async def card(self, request: Request) -> Response:
        """``GET /a2a/{agent}/.well-known/agent-card.json``."""
        return self._card(request.path_params["agent"], request)

    async def entry_card(self, request: Request) -> Response:
        """``GET /.well-known/agent-card.json``: the entry agent's card."""
        return self._card(self.daemon.entry_agent, request)

    async def rpc(self, request: Request) -> Response:
        """``POST /a2a/{agent}``: one JSON-RPC request, answered by the SDK's dispatcher."""
        agent = request.path_params["agent"]
        if not self.shows(agent):
            return self._unknown(agent)
        if self.daemon.stopping:
            return error(503, DeliveryCode.SHUTTING_DOWN, "the daemon is shutting down")
        body = await read_body(request)
        refusal = _refusal(body)
        if refusal is not None:
            return refusal
        return await self.dispatcher.handle_requests(replayed(request, body))


def _refusal(body: bytes) -> Response | None:
    """The JSON-RPC error of a body that is JSON but could not travel on to an agent (a body
    that is no JSON at all is the dispatcher's parse error)."""
    from a2a.server.request_handlers.response_helpers import build_error_response
    from a2a.utils.errors import InvalidRequestError

    try:
        data = json.loads(body)
    except RecursionError:
        data = None
        fault = BadBody(None, "the body nests too deep")
    except ValueError:
        return None
    else:
        try:
            check_value(data)
            return None
        except BadBody as exc:
            fault = exc
    request_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    detail = {"field": fault.field} if fault.field is not None else None
    refused = InvalidRequestError(message=fault.message, data=detail)
    return JSONResponse(build_error_response(request_id, refused))
