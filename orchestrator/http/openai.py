"""The swarm as an OpenAI-compatible server: ``GET /v1/models`` and ``POST /v1/chat/completions``
(see :class:`OpenAICompatible`; streaming as :mod:`orchestrator.http.streams` describes)."""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from goondan.errors import DeliveryCode, HttpCode
from ipc import DEFAULT_INSTANCE_KEY, BudgetExceeded, IpcError, PermitTimeout
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import TokenCounts
from orchestrator.http.body import BadBody, ChatRequest, read_object
from orchestrator.http.exposure import description, exposed, shown
from orchestrator.http.requests import Refusal, admit, body_digest, id_headers, idempotency_key
from orchestrator.http.streams import (
    ANSWER_EVENT_ID,
    Item,
    Notice,
    Piece,
    TurnStream,
    not_answered_here,
    sse,
)
from orchestrator.operations import SwarmOperations
from orchestrator.requests import Admission, Intake, RequestDesk, RequestRecord


def openai_error(
    status: int,
    code: str,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
) -> JSONResponse:
    """An error in the OpenAI shape ``{"error": {message, type, param, code}}``."""
    # OpenAI clients read error.message, error.type and error.param; code stays ours.
    body = {"error": {"code": code, "message": message, "type": kind, "param": param}}
    return JSONResponse(body, status_code=status)


def agent_for_model(daemon: SwarmOperations, model: str) -> str | None:
    """The agent an OpenAI ``model`` names (the swarm's name, or ``goondan``, names the entry
    agent); ``None`` when the ``openai`` door shows no such agent."""
    if model not in daemon.agent_names() and model in (daemon.name, "goondan"):
        model = daemon.entry_agent
    return model if shown(daemon, "openai", model) else None


def serving_agent(daemon: SwarmOperations, model: str) -> str | JSONResponse:
    """The agent ``model`` names, or the OpenAI-shaped refusal: 404 for a model the door does
    not show, 503 while the daemon stops."""
    agent = agent_for_model(daemon, model)
    if agent is None:
        missing = f"no agent named {model!r}"
        return openai_error(404, DeliveryCode.AGENT_NOT_FOUND, missing, param="model")
    if daemon.stopping:
        return openai_error(503, DeliveryCode.SHUTTING_DOWN, "the daemon is shutting down")
    return agent


class ModelRequest(Protocol):
    """A body of an OpenAI door, read: it names the ``model`` that answers it."""

    @property
    def model(self) -> str: ...


AskedT = TypeVar("AskedT", bound=ModelRequest)


@dataclasses.dataclass(frozen=True, slots=True)
class Asked(Generic[AskedT]):
    """An OpenAI door's request, read and given an agent to serve it."""

    data: dict[str, Any]
    """The body as sent (its digest keys a retry with the same Idempotency-Key)."""
    request: AskedT
    agent: str
    """The agent its ``model`` names."""
    idempotency_key: str | None


async def read_asked(
    request: Request, daemon: SwarmOperations, read: Callable[[dict[str, Any]], AskedT]
) -> Asked[AskedT] | JSONResponse:
    """The body of ``request`` read with ``read``, and the agent its model names; or the OpenAI
    error: 400 for a bad body or Idempotency-Key, else as :func:`serving_agent` refuses."""
    try:
        data = await read_object(request)
        asked = read(data)
        key = idempotency_key(request)
    except BadBody as exc:
        return openai_error(400, HttpCode.BAD_REQUEST, exc.message, param=exc.field)
    agent = serving_agent(daemon, asked.model)
    if isinstance(agent, JSONResponse):
        return agent
    return Asked(data, asked, agent, key)


def refusal_error(refused: Response) -> JSONResponse:
    """A refusal of the request desk (:class:`~orchestrator.http.requests.Refusal`), in the
    OpenAI error shape."""
    detail = json.loads(bytes(refused.body))["error"]
    return openai_error(refused.status_code, detail["code"], detail["message"])


def failure_error(answer: DelegateAnswer) -> JSONResponse:
    """A failed Turn as OpenAI answers the like: 429 for a used-up budget or a rate limit,
    409 for a busy instance, else 502."""
    error = answer.error
    code = error.code if error is not None else DeliveryCode.AGENT_TURN_FAILED
    message = error.message if error is not None else "the request failed"
    if code == BudgetExceeded.code:
        # As OpenAI answers a used-up quota; retrying the same request cannot help, and
        # the SDKs honour x-should-retry.
        response = openai_error(429, code, message, "insufficient_quota")
        response.headers["x-should-retry"] = "false"
        return response
    if code in (DeliveryCode.E_MODEL_RATE_LIMITED, PermitTimeout.code):
        return openai_error(429, code, message, "rate_limit_exceeded")  # clients back off
    if code == DeliveryCode.INSTANCE_BUSY:  # policy.concurrency: reject
        return openai_error(409, code, message, "conflict_error")
    return openai_error(502, code, message)


def turn_tokens(answer: DelegateAnswer) -> tuple[int, int]:
    """``(input, output)`` tokens of the answer's Turn."""
    counts = TokenCounts.read((answer.turn or {}).get("tokenUsage"))
    return counts.input_tokens, counts.output_tokens


class OpenAICompatible:
    """``/v1/models`` and ``/v1/chat/completions``: the swarm as an OpenAI-compatible server.

    ``model`` names the agent (the swarm's name, or ``goondan``, names the entry agent); the last
    user message is the input; the ``X-Goondan-Instance`` header, else ``user``, selects the
    instance key. ``stream: true`` answers with the standard ``chat.completion.chunk`` SSE
    stream of the model's text as it is produced, ending in ``data: [DONE]`` (see the module
    docstring).
    """

    def __init__(self, daemon: SwarmOperations, desk: RequestDesk) -> None:
        self.daemon = daemon
        self.desk = desk
        self.created = int(time.time())

    async def models(self, request: Request) -> Response:
        owner = self.daemon.name
        data = [
            {
                "id": view.name,
                "object": "model",
                "created": self.created,
                "owned_by": owner,
                "description": description(self.daemon, view.name),
            }
            for view in exposed(self.daemon, "openai")
        ]
        return JSONResponse({"object": "list", "data": data})

    async def chat_completions(self, request: Request) -> Response:
        read = await read_asked(request, self.daemon, ChatRequest.read)
        if isinstance(read, Response):
            return read
        chat, agent = read.request, read.agent
        key = request.headers.get("x-goondan-instance") or chat.user or DEFAULT_INSTANCE_KEY
        asked = Intake("chat", agent, chat.text, key, relay=chat.relay, deltas=chat.stream)
        intake = dataclasses.replace(
            asked,
            idempotency_key=read.idempotency_key,
            body_digest=body_digest("chat", agent, read.data, key),
        )
        try:
            admission = await admit(self.desk, intake)
        except Refusal as refusal:
            return refusal_error(refusal.response)
        if chat.stream:
            response = await self._streamed(chat, admission)
        else:
            answer = await self.desk.answer(admission.request_id)
            if answer is None or not answer.ok:
                response = failure_error(answer or not_answered_here())
            else:
                response = JSONResponse(self.completion_of(answer, admission.record))
        response.headers.update(id_headers(admission))
        return response

    def completion_of(self, answer: DelegateAnswer, record: RequestRecord) -> dict[str, Any]:
        """The ``chat.completion`` body of a Turn's answer (an error body when it failed)."""
        if not answer.ok:
            return json.loads(bytes(failure_error(answer).body))  # type: ignore[no-any-return]
        turn = answer.turn or {}
        completion_id = f"chatcmpl-{turn.get('traceId') or secrets.token_hex(16)}"
        content = answer.output if isinstance(answer.output, str) else json.dumps(answer.output)
        prompt, completion = turn_tokens(answer)
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": record.agent,
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
            "requestId": record.request_id,
        }

    async def _streamed(self, chat: ChatRequest, admission: Admission) -> Response:
        turn = TurnStream(self.desk, admission.request_id)
        first = await turn.first()
        if isinstance(first, DelegateAnswer) and not first.ok:
            return failure_error(first)
        return sse(_chunk_events(turn, first, self.created, chat.include_usage), turn.aclose)


async def _chunk_events(
    turn: TurnStream,
    first: Item,
    created: int,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The standard SSE stream of ``chat.completion.chunk`` objects, then ``[DONE]``."""
    completion_id = f"chatcmpl-{turn.trace_id}"

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": turn.agent,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

    def content(piece: Piece) -> bytes:
        mark = {
            "agent": piece.agent,
            "instanceKey": piece.delta.instance_key,
            "stepId": piece.delta.step_id,
        }
        delta = {"content": piece.text}
        body = chunk([{"index": 0, "delta": delta, "finish_reason": None}], goondan=mark)
        return f"id: {piece.seq}\n".encode() + body if piece.seq else body

    async def items() -> AsyncIterator[Item]:
        yield first
        if not isinstance(first, DelegateAnswer):
            async for item in turn.rest():
                yield item

    try:
        yield chunk(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
        )
        streamed = False
        async for item in items():
            if item is None:
                yield b": keepalive\n\n"
            elif isinstance(item, Notice):  # never asked for here
                continue
            elif isinstance(item, Piece):
                streamed = True
                yield content(item)
            elif not item.ok:  # the response has started: the error goes in the stream
                error = item.error or IpcError(
                    "the request failed", code=DeliveryCode.AGENT_TURN_FAILED
                )
                failure = {"code": error.code, "message": error.message, "type": "api_error"}
                yield b"data: " + json.dumps({"error": failure}).encode() + b"\n\n"
            else:
                if not streamed:  # a Turn whose model did not stream still answers
                    text = item.output if isinstance(item.output, str) else json.dumps(item.output)
                    yield chunk([{"index": 0, "delta": {"content": text}, "finish_reason": None}])
                stop = chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
                yield f"id: {ANSWER_EVENT_ID}\n".encode() + stop
                if include_usage:
                    prompt, completion = turn_tokens(item)
                    usage = {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                    }
                    yield chunk([], usage=usage)
        if turn.dropped:
            structlog.get_logger("goondan.api").warning(
                "streamed deltas dropped for a slow client", agent=turn.agent, dropped=turn.dropped
            )
        yield b"data: [DONE]\n\n"
    finally:
        await turn.aclose()
