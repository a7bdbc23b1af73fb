"""Another team's agent: a real A2A server on loopback, built from the ``a2a-sdk``'s own server
classes (its request handler, task store, card and JSON-RPC routes) around a small
:class:`PartnerExecutor`, served by uvicorn in the test's event loop.

What the partner answers depends on the text it is sent:

- ``fail ...``, ``reject ...``, ``auth ...``, ``more ...``: its task ends ``failed``,
  ``rejected``, ``auth-required`` or ``input-required``, its status message saying why;
- ``hang ...``: its task works until it is cancelled (``cancelled`` is set then);
- anything else: it completes with an artifact ``partner heard: <text> (message N of
  <contextId>)``, N counting the messages of that context, so a test sees a conversation
  go on.

``seen`` records each message's context and ``Authorization`` header. Besides the agent, the
app serves other cards (:data:`HOSTILE_PATHS`): a redirect, HTML, a huge body, one that
never ends, a card whose JSON-RPC interface lies on another origin, one that does not stream,
one whose JSON-RPC endpoint answers a huge body.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

CARD_PATH = "/.well-known/agent-card.json"
RPC_PATH = "/a2a"
HOSTILE_PATHS = {
    "redirect": "/cards/redirect.json",
    "html": "/cards/page.html",
    "huge": "/cards/huge.json",
    "slow": "/cards/slow.json",
    "elsewhere": "/cards/elsewhere.json",
    "blocking": "/cards/blocking.json",
    "huge-rpc": "/cards/huge-rpc.json",
}
HUGE_RPC_PATH = "/rpc/huge"


@dataclass
class Seen:
    """One message as the partner received it."""

    text: str
    context_id: str
    authorization: str | None


@dataclass
class PartnerExecutor(AgentExecutor):
    """The partner's agent logic (see the module's docstring)."""

    seen: list[Seen] = field(default_factory=list)
    arrivals: asyncio.Queue[Seen] = field(default_factory=asyncio.Queue)
    """Each message as it arrives, for a test to wait on."""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a ``hang`` task is working (a test cancels it then)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        text = context.get_user_input()
        headers = context.call_context.state.get("headers", {})
        context_id = context.context_id or ""
        arrived = Seen(text, context_id, headers.get("authorization"))
        self.seen.append(arrived)
        self.arrivals.put_nowait(arrived)
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        verb = text.split(" ", 1)[0]
        said = updater.new_agent_message([Part(text=f"partner says no to: {text}")])
        if verb == "fail":
            await updater.failed(said)
        elif verb == "reject":
            await updater.reject(said)
        elif verb == "auth":
            await updater.requires_auth(said)
        elif verb == "more":
            await updater.requires_input(said)
        elif verb == "hang":
            self.hanging.set()
            await asyncio.Event().wait()  # until the task is cancelled
        else:
            count = sum(1 for s in self.seen if s.context_id == context_id)
            answer = f"partner heard: {text} (message {count} of {context_id})"
            await updater.add_artifact([Part(text=answer)], name="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.set()
        if context.task_id and context.context_id:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def partner_card(base: str, rpc_url: str | None = None, streaming: bool = True) -> AgentCard:
    """The partner's card: JSON-RPC at ``rpc_url`` (default its own), streaming unless not."""
    return AgentCard(
        name="partner",
        description="Another team's agent, for tests.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=rpc_url or f"{base}{RPC_PATH}",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="echo", name="echo", description="Repeats.", tags=["test"]),
        ],
    )


@dataclass(eq=False)
class Partner:
    """The partner server, running: its URLs and what it saw."""

    base: str
    executor: PartnerExecutor
    elsewhere: str = ""
    """Base URL of the other origin the ``elsewhere`` card points at."""
    elsewhere_executor: PartnerExecutor | None = None
    """The agent at that other origin."""

    @property
    def card_url(self) -> str:
        """Its agent card."""
        return f"{self.base}{CARD_PATH}"

    def hostile(self, kind: str) -> str:
        """The URL of a hostile card (a key of :data:`HOSTILE_PATHS`)."""
        return f"{self.base}{HOSTILE_PATHS[kind]}"


def _hostile_routes(base: str, elsewhere: str, other_origin: str) -> list[Route]:
    async def redirect(request: Request) -> Response:
        return RedirectResponse(f"{other_origin}{CARD_PATH}", status_code=302)

    async def html(request: Request) -> Response:
        return Response("<html><body>not a card</body></html>", media_type="text/html")

    async def huge(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"name": "'
            for _ in range(64):  # 64 MiB: far past any limit
                yield b"x" * (1024 * 1024)
            yield b'"}'

        return StreamingResponse(body(), media_type="application/json")

    async def slow(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"{"
            await asyncio.Event().wait()  # never finishes
            yield b"}"

        return StreamingResponse(body(), media_type="application/json")

    async def card_elsewhere(request: Request) -> Response:
        card = partner_card(base, rpc_url=f"{elsewhere}{RPC_PATH}")
        return JSONResponse(MessageToDict(card))

    async def card_blocking(request: Request) -> Response:
        return JSONResponse(MessageToDict(partner_card(base, streaming=False)))

    async def card_huge_rpc(request: Request) -> Response:
        card = partner_card(base, rpc_url=f"{base}{HUGE_RPC_PATH}", streaming=False)
        return JSONResponse(MessageToDict(card))

    return [
        Route(HOSTILE_PATHS["redirect"], redirect),
        Route(HOSTILE_PATHS["html"], html),
        Route(HOSTILE_PATHS["huge"], huge),
        Route(HOSTILE_PATHS["slow"], slow),
        Route(HOSTILE_PATHS["elsewhere"], card_elsewhere),
        Route(HOSTILE_PATHS["blocking"], card_blocking),
        Route(HOSTILE_PATHS["huge-rpc"], card_huge_rpc),
        Route(HUGE_RPC_PATH, huge, methods=["POST"]),
    ]


def _agent_app(base: str, executor: PartnerExecutor, extra: list[Route]) -> Starlette:
    card = partner_card(base)
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, RPC_PATH), *extra]
    return Starlette(routes=routes)


def _listening_socket() -> socket.socket:
    # Bound and listening before the server runs: connections wait in the backlog, so the
    # test needs no wait for the server to be up.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@asynccontextmanager
async def _serving(app: Starlette, sock: socket.socket) -> AsyncIterator[None]:
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield
    finally:
        server.should_exit = True
        server.force_exit = True
        async with asyncio.timeout(10):
            await task
        sock.close()


@asynccontextmanager
async def partner() -> AsyncIterator[Partner]:
    """The partner on a free loopback port, with a second partner on another port (another
    origin) that the ``elsewhere`` card sends its JSON-RPC to."""
    own, other = _listening_socket(), _listening_socket()
    base = f"http://127.0.0.1:{own.getsockname()[1]}"
    # Same host, another port: another origin, where the token must not go.
    elsewhere = f"http://127.0.0.1:{other.getsockname()[1]}"
    executor, other_executor = PartnerExecutor(), PartnerExecutor()
    app = _agent_app(base, executor, _hostile_routes(base, elsewhere, elsewhere))
    other_app = _agent_app(elsewhere, other_executor, [])
    async with _serving(app, own), _serving(other_app, other):
        yield Partner(base, executor, elsewhere, other_executor)
