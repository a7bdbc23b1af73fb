"""One call to a RemoteAgent over A2A: its HTTP client, the agent card, the task followed.

What :class:`orchestrator.remote_agents.RemoteAgents` runs for each delegate to a RemoteAgent
(that module's text says how a call goes). It is a module of its own because it needs the HTTP
client and the SDK the ``a2a`` extra installs: a swarm without RemoteAgents never imports it.
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

from bundle.secrets import Secret
from ipc import IpcError
from orchestrator.remote_targets import (
    CANCEL_SECONDS,
    CONNECT_SECONDS,
    MAX_ANSWER_CHARS,
    MAX_BODY_BYTES,
    MAX_CARD_BYTES,
    RemoteAgentFailed,
    RemoteTarget,
    log,
)

if TYPE_CHECKING:
    from a2a.client import Client
    from a2a.types.a2a_pb2 import AgentCard, StreamResponse, Task


def origin_of(url: httpx.URL) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port filled in from the scheme: the token of a
    RemoteAgent goes only to its card's own origin."""
    port = url.port or (443 if url.scheme == "https" else 80)
    return (url.scheme, url.host.lower(), port)


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
    auth = (
        _OriginBearer(target.token, origin_of(httpx.URL(target.card_url)))
        if target.token is not None
        else None
    )
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
class RemoteCall:
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
        """The remote agent's answer; raises :class:`RemoteAgentFailed` for anything else."""
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


async def cancel_remote(call: RemoteCall) -> None:
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


async def _task_of(client: Client, call: RemoteCall) -> str:
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
