"""Calls to a swarm's RemoteAgents: A2A agents elsewhere that its agents delegate to.

A ``delegate`` (or ``send``) whose target is a RemoteAgent never reaches an agent process:
the router hands it here (see :mod:`orchestrator.router_remote`), and the answer comes back
to the caller as any target's would. One call, through the official ``a2a-sdk`` client:

1. fetch the agent card at ``cardUrl`` as is (a redirect is refused, the body must be JSON
   of at most :data:`MAX_CARD_BYTES`) and read it with the SDK's own card parser;
2. send the text as a user message whose ``contextId`` is the target instance key of the
   handoff (the caller's own instance key unless it named another), so one conversation of
   ours stays one conversation there;
3. follow the task (streamed when the card says it streams) until it ends: ``completed``
   answers the text of its artifacts (else of its status message, or of a direct message
   reply); ``failed``, ``rejected``, ``canceled``, ``auth-required`` and ``input-required``
   are answered ``REMOTE_AGENT_FAILED`` saying which, as is anything the transport reports.

Every response body is capped (:data:`MAX_BODY_BYTES`) as it is read, the whole call is
bounded by the request's timeout (and the RemoteAgent's ``timeoutSeconds``), and a call
cancelled once its task is known (the request's trace cancelled, or its timeout) cancels the
remote task too, in the background and bounded. The bearer token is resolved when the swarm
starts, withheld from every process the daemon starts, and added only to requests whose
origin is the card's own: a card naming another host for its interface gets no token there.
No message of this module carries it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
import structlog

from bundle.secrets import Secret, resolve_value
from bundle.spec_base import ValueSource
from bundle.spec_remote import A2A_EXTRA, RemoteAgentSpec, a2a_client_installed
from goondan.errors import ConfigCode, ConfigError, DeliveryCode
from ipc import IpcError, RequestTimeout

if TYPE_CHECKING:
    from a2a.client import Client
    from a2a.types.a2a_pb2 import AgentCard, StreamResponse, Task

    from bundle import Bundle
    from bundle.loader import Resource

MAX_CARD_BYTES = 1024 * 1024
"""The largest agent card read; a bigger body is refused."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest response body (or event stream) read from a remote agent."""
MAX_ANSWER_CHARS = 1024 * 1024
"""The longest answer handed to the caller (it travels to the caller's process)."""
CONNECT_SECONDS = 10.0
"""How long one connection to the remote may take to open."""
CANCEL_SECONDS = 10.0
"""How long cancelling a remote task may take, in the background."""

log = structlog.get_logger("goondan.remote_agents")


class RemoteAgentFailed(IpcError):
    """The remote agent could not be reached, or its task did not complete."""

    code = DeliveryCode.REMOTE_AGENT_FAILED


class RemoteAgentsUnavailable(ConfigError):
    """The swarm lists RemoteAgents and the ``a2a`` extra is not installed."""

    code = ConfigCode.E_CONFIG_PACKAGE_NOT_INSTALLED


@dataclass(frozen=True)
class RemoteTarget:
    """One RemoteAgent, ready to be called."""

    name: str
    card_url: str
    timeout_seconds: float | None = None
    token: Secret | None = field(default=None, repr=False)
    """The bearer token (masked in every ``str``/``repr``)."""

    @property
    def origin(self) -> tuple[str, str, int]:
        """Scheme, host and port of the card: the only origin the token is sent to."""
        return origin_of(httpx.URL(self.card_url))


def origin_of(url: httpx.URL) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port filled in from the scheme."""
    port = url.port or (443 if url.scheme == "https" else 80)
    return (url.scheme, url.host.lower(), port)


def remote_targets(bundle: Bundle, swarm: Resource) -> dict[str, RemoteTarget]:
    """The RemoteAgents ``swarm`` lists, their tokens resolved now: a token that is not set
    stops the start (``SecretUnavailable``), as does a missing ``a2a`` extra."""
    remotes = bundle.swarm_remote_agents(swarm)
    if remotes and not a2a_client_installed():
        names = ", ".join(r.name for r in remotes)
        raise RemoteAgentsUnavailable(
            f"the swarm delegates to RemoteAgent {names}, which needs the a2a-sdk: {A2A_EXTRA}"
        )
    targets = {}
    for remote in remotes:
        spec: RemoteAgentSpec = remote.spec
        token = None
        if spec.auth is not None:
            source = ValueSource(value_from=spec.auth.bearer.value_from)
            token = resolve_value(source, field="token")
        targets[remote.name] = RemoteTarget(remote.name, spec.card_url, spec.timeout_seconds, token)
    return targets


class RemoteAgents:
    """The swarm's RemoteAgents by name, and the calls to them."""

    def __init__(self, targets: dict[str, RemoteTarget] | None = None) -> None:
        self.targets = dict(targets or {})
        self._calls: set[asyncio.Task[object]] = set()
        """The tasks waiting in :meth:`ask` (stopped by :meth:`aclose`)."""
        self._cancels: set[asyncio.Task[None]] = set()

    def __contains__(self, name: object) -> bool:
        return name in self.targets

    def secrets(self) -> list[str]:
        """The tokens' values, for the daemon to withhold from every process it starts."""
        return [t.token.reveal() for t in self.targets.values() if t.token is not None]

    async def ask(self, name: str, text: str, *, context_id: str, timeout_seconds: float) -> str:
        """The answer of RemoteAgent ``name`` to ``text`` in conversation ``context_id``.

        Raises :class:`RemoteAgentFailed` (or ``RequestTimeout`` past ``timeout_seconds`` or
        the RemoteAgent's own ``timeoutSeconds``); cancelled, it cancels the remote task."""
        target = self.targets[name]
        limit = min(timeout_seconds, target.timeout_seconds or timeout_seconds)
        call = _Call(target, text, context_id)
        waiting = asyncio.current_task()
        if waiting is not None:
            self._calls.add(waiting)
        try:
            async with asyncio.timeout(limit):
                return await call.run()
        except TimeoutError:
            self._cancel_soon(call)
            raise RequestTimeout(
                f"the remote A2A agent did not answer within {limit:g} s"
            ) from None
        except asyncio.CancelledError:
            self._cancel_soon(call)
            raise
        finally:
            if waiting is not None:
                self._calls.discard(waiting)

    def _cancel_soon(self, call: _Call) -> None:
        if call.sent:
            task = asyncio.create_task(_cancel_remote(call))
            self._cancels.add(task)
            task.add_done_callback(self._cancels.discard)

    async def aclose(self) -> None:
        """Stop the calls still waiting, then wait (bounded) for the remote tasks they
        started to be cancelled."""
        calls = list(self._calls)
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls, timeout=CANCEL_SECONDS)
        if self._cancels:
            await asyncio.wait(list(self._cancels), timeout=CANCEL_SECONDS)
            for task in self._cancels:
                task.cancel()


class _OriginBearer(httpx.Auth):
    """``Authorization: Bearer`` on requests to one origin only."""

    def __init__(self, token: Secret, origin: tuple[str, str, int]) -> None:
        self._token = token
        self._origin = origin

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if origin_of(request.url) == self._origin:
            request.headers["Authorization"] = f"Bearer {self._token.reveal()}"
        yield request


class _CappedStream(httpx.AsyncByteStream):
    """A response body that fails once more than ``limit`` bytes arrived."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise httpx.ReadError(f"the response is larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx.AsyncBaseTransport):
    """The default transport, every response body capped."""

    def __init__(self, limit: int) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _http(target: RemoteTarget) -> AsyncIterator[httpx.AsyncClient]:
    auth = _OriginBearer(target.token, target.origin) if target.token is not None else None
    async with httpx.AsyncClient(
        transport=_CappedTransport(MAX_BODY_BYTES),
        auth=auth,
        follow_redirects=False,
        timeout=httpx.Timeout(None, connect=CONNECT_SECONDS),
    ) as client:
        yield client


async def fetch_card(client: httpx.AsyncClient, target: RemoteTarget) -> AgentCard:
    """The agent card at ``target.card_url``, read with the SDK's parser; raises
    :class:`RemoteAgentFailed` for a redirect, an error status, a body too large or not a
    card."""
    from a2a.client.card_resolver import parse_agent_card

    where = f"the agent card at {target.card_url}"
    try:
        async with client.stream("GET", target.card_url) as response:
            if response.is_redirect:
                raise RemoteAgentFailed(
                    f"{where} redirects to {response.headers.get('location', '?')!r}; "
                    "set cardUrl to the card's own address"
                )
            if response.status_code != 200:
                raise RemoteAgentFailed(f"{where} answered HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise RemoteAgentFailed(f"{where} is larger than {MAX_CARD_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise RemoteAgentFailed(f"{where} could not be fetched: {_said(exc)}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise RemoteAgentFailed(f"{where} is not JSON") from None
    if not isinstance(data, dict):
        raise RemoteAgentFailed(f"{where} is not a JSON object")
    try:
        return parse_agent_card(data)
    except Exception as exc:  # protobuf's ParseError, or what a malformed card raises
        raise RemoteAgentFailed(f"{where} is not an agent card: {exc}") from None


def _said(exc: BaseException) -> str:
    """What an exception says, or its type when it says nothing."""
    return str(exc) or type(exc).__name__


@dataclass(eq=False)
class _Call:
    """One message to a remote agent and the task it started."""

    target: RemoteTarget
    text: str
    context_id: str
    message_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    sent: bool = False
    """The message went out: a task may run there, for a cancellation to cancel."""
    task_id: str = ""
    """Known once the remote reports its task (else looked up by :attr:`message_id`)."""
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    """Text of the streamed artifacts, by artifact id, in order."""

    async def run(self) -> str:
        try:
            async with _http(self.target) as http:
                card = await fetch_card(http, self.target)
                return await self._exchange(http, card)
        except IpcError:
            raise
        except Exception as exc:  # the SDK's and the transport's own errors
            raise RemoteAgentFailed(
                f"the remote A2A agent failed: {_said(exc)}",
                details={"error": type(exc).__name__},
            ) from None

    async def _exchange(self, http: httpx.AsyncClient, card: AgentCard) -> str:
        from a2a.client import ClientConfig, ClientFactory
        from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
        from a2a.utils.constants import TransportProtocol

        config = ClientConfig(
            httpx_client=http,
            streaming=True,
            supported_protocol_bindings=[TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON],
        )
        client = ClientFactory(config).create(card)
        message = Message(
            message_id=self.message_id,
            context_id=self.context_id,
            role=Role.ROLE_USER,
            parts=[Part(text=self.text)],
        )
        self.sent = True
        async for event in client.send_message(SendMessageRequest(message=message)):
            answer = self._take(event)
            if answer is not None:
                return _bounded(answer)
        raise RemoteAgentFailed("the remote A2A agent stopped answering before its task ended")

    def _take(self, event: StreamResponse) -> str | None:
        """The answer once ``event`` ends the exchange; ``None`` while the task runs."""
        from a2a.helpers import get_artifact_text, get_message_text

        if event.HasField("message"):
            return get_message_text(event.message)
        if event.HasField("artifact_update"):
            update = event.artifact_update
            self.task_id = self.task_id or update.task_id
            pieces = self.artifacts.setdefault(update.artifact.artifact_id, [])
            if not update.append:
                pieces.clear()
            pieces.append(get_artifact_text(update.artifact, delimiter=""))
            return None
        if event.HasField("task"):
            task = event.task
            self.task_id = task.id
            for artifact in task.artifacts:
                self.artifacts[artifact.artifact_id] = [get_artifact_text(artifact)]
            return self._settle(task.status.state, _status_text(task))
        if event.HasField("status_update"):
            update = event.status_update
            self.task_id = self.task_id or update.task_id
            status = update.status
            said = get_message_text(status.message) if status.HasField("message") else ""
            return self._settle(status.state, said)
        return None

    def _settle(self, state: int, said: str) -> str | None:
        """The answer of a task in ``state`` (its status message ``said``), ``None`` while it
        runs; raises for a state that ends it without one."""
        from a2a.types.a2a_pb2 import TaskState

        if state == TaskState.TASK_STATE_COMPLETED:
            texts = ["".join(pieces) for pieces in self.artifacts.values()]
            return "\n".join(t for t in texts if t) or said
        refusal = _REFUSALS.get(TaskState.Name(state))
        if refusal is None:
            return None  # submitted, working: wait for more
        what, hint = refusal
        reason = f": {said}" if said else ""
        raise RemoteAgentFailed(
            f"the remote A2A agent {what}{reason}{hint}",
            details={"state": TaskState.Name(state), "taskId": self.task_id},
        )


_REFUSALS: dict[str, tuple[str, str]] = {
    "TASK_STATE_FAILED": ("failed the task", ""),
    "TASK_STATE_REJECTED": ("rejected the task", ""),
    "TASK_STATE_CANCELED": ("cancelled the task", ""),
    "TASK_STATE_AUTH_REQUIRED": (
        "needs other credentials for this task",
        " (check the RemoteAgent's auth)",
    ),
    "TASK_STATE_INPUT_REQUIRED": (
        "asks for more input before it can answer",
        " (answer it in a new request with the same instanceKey)",
    ),
}
"""Task states that end a call without an answer: what the remote did, and a hint."""


def _status_text(task: Task) -> str:
    from a2a.helpers import get_message_text

    status = task.status
    return get_message_text(status.message) if status.HasField("message") else ""


def _bounded(answer: str) -> str:
    if len(answer) > MAX_ANSWER_CHARS:
        raise RemoteAgentFailed(
            f"the remote A2A agent answered {len(answer)} characters, more than the "
            f"{MAX_ANSWER_CHARS} a delegate answer may carry"
        )
    return answer


async def _cancel_remote(call: _Call) -> None:
    """Cancel the task ``call`` started (best effort, bounded, logged). A call cancelled before
    the remote named its task finds it among its context's tasks by the message that started
    it; the remote may not have recorded it yet, so it is looked for a few times."""
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import CancelTaskRequest

    target = call.target
    try:
        async with asyncio.timeout(CANCEL_SECONDS), _http(target) as http:
            card = await fetch_card(http, target)
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            for pause in CANCEL_LOOKUP_PAUSES:
                task_id = call.task_id or await _task_of(client, call)
                if task_id:
                    await client.cancel_task(CancelTaskRequest(id=task_id))
                    log.info("remote task cancelled", remote_agent=target.name, task_id=task_id)
                    return
                await asyncio.sleep(pause)
        log.warning("remote task not found to cancel", remote_agent=target.name)
    except Exception as exc:
        log.warning(
            "remote task not cancelled",
            remote_agent=target.name,
            task_id=call.task_id,
            error=_said(exc),
        )


CANCEL_LOOKUP_PAUSES = (0.1, 0.3, 1.0, 2.0, 0.0)
"""Pauses between looks for a task the remote has not named yet (the last look is last)."""


async def _task_of(client: Client, call: _Call) -> str:
    """The id of the unfinished task of ``call``'s context that ``call``'s message started
    (``""`` when there is none, yet)."""
    from a2a.types.a2a_pb2 import ListTasksRequest, TaskState

    finished = {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
    listed = await client.list_tasks(ListTasksRequest(context_id=call.context_id))
    for task in listed.tasks:
        if task.status.state not in finished and any(
            m.message_id == call.message_id for m in task.history
        ):
            return str(task.id)
    return ""
