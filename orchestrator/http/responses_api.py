"""The swarm as an OpenAI Responses API server: ``POST /v1/responses`` and
``GET /v1/responses/{id}``.

``model`` names an agent as on ``/v1/chat/completions`` (its name; the swarm's name, or
``goondan``, names the entry agent; only agents the ``openai`` door shows). ``input`` is text or
a list of message items; the last item must be a user message, whose text is the Turn's input
(the conversation itself lives in the agent's instance, so earlier items are history the agent
already holds). ``instructions``, and the text of ``system``/``developer`` messages in ``input``,
are put before that text, separated by a blank line: the agent's own system prompt stays.

A response is an accepted request (:mod:`orchestrator.requests`): its id is ``resp_`` and the
random part of the request id, so ``GET /v1/responses/{id}`` is a look-up of the request (after
a dropped connection, or a daemon restart), and ``previous_response_id`` continues the
conversation instance that response ran in. Without it the instance is the
``X-Goondan-Instance`` header, else ``user``, else the default one, as on chat.

``include: ["goondan.tool_calls"]`` adds the agent's tool calls to ``output``: a
``function_call`` item (``name``, ``arguments``, ``call_id``) and a ``function_call_output``
item per call, before the message (the calls already ran: a client has nothing to run).
``stream: true`` answers the standard typed events (see :class:`ResponseEvents`);
``background: true`` answers at once, ``in_progress``, for ``GET /v1/responses/{id}`` later;
``POST /v1/responses/{id}/cancel`` stops a Turn still running.
Errors have the OpenAI shape; a failed Turn maps as on chat (429, 409, 502).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from goondan.errors import HttpCode
from ipc import DEFAULT_INSTANCE_KEY
from ipc.delegation import DelegateAnswer
from orchestrator.http.openai import (
    failure_error,
    openai_error,
    read_asked,
    refusal_error,
)
from orchestrator.http.openapi import OPENAI_API, Operation
from orchestrator.http.requests import (
    REQUEST_ID_HEADER,
    Refusal,
    admit,
    body_digest,
    id_headers,
)
from orchestrator.http.responses_shapes import (
    ResponsesRequest,
    answer_text,
    message_id,
    message_item,
    request_id_of,
    response_json,
    response_of,
    tool_items,
)
from orchestrator.http.streams import (
    ANSWER_EVENT_ID,
    Notice,
    Piece,
    TurnStream,
    not_answered_here,
    sse,
    sse_event,
)
from orchestrator.operations import SwarmOperations
from orchestrator.requests import Admission, Intake, RequestDesk, RequestRecord

INSTANCE_HEADER = "X-Goondan-Instance"
CANCEL_WAIT_SECONDS = 30.0
"""How long a cancel waits for the Turn to stop before it answers (``in_progress`` then)."""


# -- streaming ---------------------------------------------------------------------------------


class ResponseEvents:
    """The typed server-sent events of one streamed response, numbered by ``sequence_number``
    (each event's ``id:`` too).

    ``response.created``, ``response.in_progress``; per Step of the agent that talks, a
    ``message`` item (``response.output_item.added``, ``response.content_part.added``,
    ``response.output_text.delta``..., ``response.output_text.done``,
    ``response.content_part.done``, ``response.output_item.done``); with tool calls asked for,
    their items as they happen; then ``response.completed`` holding every item, or
    ``response.failed`` with the error.

    Each event's ``id:`` is the number, in the request's feed, of the last piece of the Turn
    it fully carries (none before the first; ``answer`` for the last event): after a dropped
    connection, ``GET /v1/requests/{id}/events`` with that ``Last-Event-ID`` streams what came
    after it (:mod:`orchestrator.http.requests`).
    """

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.step: str | None = None
        self.text: str | None = None
        """The open message's text so far (``None``: no message is open)."""
        self.messages = 0
        self.feed_id: int | str = 0
        """The ``id:`` of the events now: the feed number of the last piece they carry."""

    def event(self, kind: str, **fields: Any) -> bytes:
        """One event of ``kind``, numbered."""
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(kind, body, self.feed_id)

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``."""
        begun = response_json(self.record, None)
        return [
            self.event("response.created", response=begun),
            self.event("response.in_progress", response=begun),
        ]

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.output[-1]["id"], "output_index": len(self.output) - 1}

    def delta(self, step: str, text: str, seq: int = 0) -> list[bytes]:
        """Text of the agent's Step ``step``, number ``seq`` in the feed (a new Step opens a
        new message)."""
        events = self.close() if step != self.step else []
        self.step = step
        self.feed_id = seq or self.feed_id
        if self.text is None:
            item = message_item(
                message_id(self.record.request_id, self.messages), "", "in_progress"
            )
            self.messages += 1
            self.output.append(item)
            self.text = ""
            index = len(self.output) - 1
            events.append(self.event("response.output_item.added", output_index=index, item=item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                self.event(
                    "response.content_part.added", **self._where(), content_index=0, part=part
                )
            )
        self.text += text
        events.append(
            self.event(
                "response.output_text.delta",
                **self._where(),
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return events

    def close(self, whole: str | None = None) -> list[bytes]:
        """Close the open message, if any (with ``whole`` as its text: the answer's, when
        deltas were lost to a slow client)."""
        if self.text is None:
            return []
        text, self.text, self.step = whole or self.text, None, None
        done = message_item(self.output[-1]["id"], text)
        self.output[-1] = done
        where = self._where()
        return [
            self.event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            ),
            self.event(
                "response.content_part.done", **where, content_index=0, part=done["content"][0]
            ),
            self.event("response.output_item.done", output_index=where["output_index"], item=done),
        ]

    def items(self, items: list[dict[str, Any]], seq: int = 0) -> list[bytes]:
        """Whole items (a tool call, its output) of the feed's event ``seq``: added and done
        at once."""
        events = self.close() if items else []
        self.feed_id = seq or self.feed_id
        for item in items:
            self.output.append(item)
            index = len(self.output) - 1
            events.append(self.event("response.output_item.added", output_index=index, item=item))
            if item["type"] == "function_call":
                where = {"item_id": item["id"], "output_index": index}
                events.append(
                    self.event("response.function_call_arguments.done", **where, **_args(item))
                )
            events.append(self.event("response.output_item.done", output_index=index, item=item))
        return events

    def finish(
        self, answer: DelegateAnswer, settled: RequestRecord | None = None, dropped: int = 0
    ) -> list[bytes]:
        """``response.completed`` (a Turn that streamed no text has its answer as one delta
        first), or ``response.failed``; ``settled`` is the request's record once answered;
        ``dropped`` deltas lost to a slow client leave the last message the answer's text."""
        streamed_none = answer.ok and self.messages == 0
        events = self.delta("", answer_text(answer)) if streamed_none else []
        events += self.close(answer_text(answer) if dropped and answer.ok else None)
        body = response_json(settled or self.record, answer, self.output)
        self.feed_id = ANSWER_EVENT_ID
        if answer.ok:
            events.append(self.event("response.completed", response=body))
        else:
            body["output"] = self.output
            events.append(self.event("response.failed", response=body))
        return events


def _args(item: dict[str, Any]) -> dict[str, Any]:
    return {"name": item["name"], "arguments": item["arguments"]}


def _tool_event(notice: Notice, agent: str) -> dict[str, Any] | None:
    """The tool event of the request's own agent a notice carries (``None`` for others)."""
    event = notice.event.to_builtins()
    return event if event.get("agentName") == agent else None


async def stream_events(
    turn: TurnStream,
    record: RequestRecord,
    first: Piece | Notice | DelegateAnswer | None,
    settled: Callable[[], RequestRecord],
) -> AsyncIterator[bytes]:
    """The response's events (see :class:`ResponseEvents`) as the Turn goes; ``settled``
    gives the request's record once it is answered."""
    events = ResponseEvents(record)

    async def items() -> AsyncIterator[Piece | Notice | DelegateAnswer | None]:
        yield first
        if not isinstance(first, DelegateAnswer):
            async for item in turn.rest():
                yield item

    try:
        for chunk in events.start():
            yield chunk
        async for item in items():
            if item is None:
                yield b": keepalive\n\n"
                continue
            if isinstance(item, Piece):
                out = events.delta(item.delta.step_id, item.text, item.seq)
            elif isinstance(item, Notice):
                event = _tool_event(item, record.agent)
                out = events.items(tool_items(event), item.seq) if event is not None else []
            else:
                out = events.finish(item, settled(), turn.dropped)
            for chunk in out:
                yield chunk
        if turn.dropped:
            structlog.get_logger("goondan.api").warning(
                "streamed deltas dropped for a slow client", agent=turn.agent, dropped=turn.dropped
            )
    finally:
        await turn.aclose()


# -- the routes --------------------------------------------------------------------------------


class ResponsesApi:
    """``POST /v1/responses`` and ``GET /v1/responses/{id}`` (see the module docstring)."""

    def __init__(self, daemon: SwarmOperations, desk: RequestDesk) -> None:
        self.daemon = daemon
        self.desk = desk

    def routes(self) -> list[BaseRoute]:
        """The door's routes."""
        return [
            Route("/v1/responses", self.create, methods=["POST"]),
            Route("/v1/responses/{id}", self.retrieve, methods=["GET"]),
            Route("/v1/responses/{id}/cancel", self.cancel, methods=["POST"]),
        ]

    async def create(self, request: Request) -> Response:
        """``POST /v1/responses``."""
        read = await read_asked(request, self.daemon, ResponsesRequest.read)
        if isinstance(read, Response):
            return read
        asked, agent = read.request, read.agent
        instance = await self._instance(request, asked, agent)
        if isinstance(instance, Response):
            return instance
        watch = asked.tool_calls and not asked.background
        intake = Intake(
            "responses",
            agent,
            asked.turn_input,
            instance,
            deltas=asked.stream,
            activity=watch,
            idempotency_key=read.idempotency_key,
            body_digest=body_digest("responses", agent, read.data, instance),
            echo=asked.echo(),
        )
        try:
            admission = await admit(self.desk, intake)
        except Refusal as refusal:
            return refusal_error(refusal.response)
        response = await self._answer(asked, admission, watch)
        response.headers.update(id_headers(admission))
        return response

    async def _instance(
        self, request: Request, asked: ResponsesRequest, agent: str
    ) -> str | Response:
        """The conversation instance: the previous response's, else the header's, the
        ``user``'s or the default one (a 400 when they disagree)."""
        named = request.headers.get(INSTANCE_HEADER) or asked.user
        previous = asked.previous_response_id
        if previous is None:
            return named or DEFAULT_INSTANCE_KEY
        record = await self._find(previous)
        if record is None:
            return openai_error(
                400,
                HttpCode.REQUEST_NOT_FOUND,
                f"no response {previous!r}: never answered here, or past its retention",
                param="previous_response_id",
            )
        if record.agent != agent:
            return openai_error(
                400,
                HttpCode.BAD_REQUEST,
                f"{previous} was answered by {record.agent!r}: continue it with that model",
                param="model",
            )
        if named is not None and named != record.instance_key:
            return openai_error(
                400,
                HttpCode.BAD_REQUEST,
                f"{previous} continues instance {record.instance_key!r}, not {named!r}",
                param="user",
            )
        return record.instance_key

    async def _find(self, response: str) -> RequestRecord | None:
        request_id = request_id_of(response)
        if request_id is None:
            return None
        await self.desk.opened()
        record = await self.desk.find(request_id)
        return record if record is not None and record.kind == "responses" else None

    async def _answer(self, asked: ResponsesRequest, admission: Admission, watch: bool) -> Response:
        record = admission.record
        if asked.background:  # (a retry of one done already finds it done)
            return JSONResponse(standing(self._settled(record)))
        if asked.stream or watch:
            turn = TurnStream(self.desk, record.request_id, deltas=asked.stream, activity=watch)
            first = await turn.first()
            if isinstance(first, DelegateAnswer) and not first.ok:
                return failure_error(first)
            if asked.stream:
                events = stream_events(turn, record, first, lambda: self._settled(record))
                return sse(events, turn.aclose)
            return await self._collected(turn, record, first)
        answer = await self.desk.answer(record.request_id)
        if answer is None or not answer.ok:
            return failure_error(answer or not_answered_here())
        return JSONResponse(response_json(self._settled(record), answer))

    def _settled(self, record: RequestRecord) -> RequestRecord:
        """The request's record as it stands now (answered: with when)."""
        return self.desk.record(record.request_id) or record

    async def _collected(
        self,
        turn: TurnStream,
        record: RequestRecord,
        first: Piece | Notice | DelegateAnswer | None,
    ) -> Response:
        """The whole response with the tool calls' items, once the Turn answered."""
        output: list[dict[str, Any]] = []
        answer = first if isinstance(first, DelegateAnswer) else None

        def take(item: Piece | Notice | DelegateAnswer | None) -> None:
            if isinstance(item, Notice):
                event = _tool_event(item, record.agent)
                output.extend(tool_items(event) if event is not None else [])

        take(first)
        try:
            if answer is None:
                async for item in turn.rest():
                    if isinstance(item, DelegateAnswer):
                        answer = item
                    take(item)
        finally:
            await turn.aclose()
        if answer is None or not answer.ok:
            return failure_error(answer or not_answered_here())
        output.append(message_item(message_id(record.request_id), answer_text(answer)))
        return JSONResponse(response_json(self._settled(record), answer, output))

    async def retrieve(self, request: Request) -> Response:
        """``GET /v1/responses/{id}``: the response as it stands (``in_progress`` while its
        Turn runs)."""
        wanted = request.path_params["id"]
        if request.query_params.get("stream") not in (None, "", "false"):
            message = "retrieving a response as a stream is not supported here"
            return openai_error(400, HttpCode.BAD_REQUEST, message, param="stream")
        record = await self._find(wanted)
        if record is None:
            missing = f"no response {wanted!r}: never answered here, or past its retention"
            return openai_error(404, HttpCode.REQUEST_NOT_FOUND, missing, param="response_id")
        headers = {REQUEST_ID_HEADER: record.request_id}
        return JSONResponse(standing(record), headers=headers)

    async def cancel(self, request: Request) -> Response:
        """``POST /v1/responses/{id}/cancel``: stop its Turn (``cancelled`` once it stopped;
        one that ended already is answered as it stands)."""
        wanted = request.path_params["id"]
        record = await self._find(wanted)
        if record is None:
            missing = f"no response {wanted!r}: never answered here, or past its retention"
            return openai_error(404, HttpCode.REQUEST_NOT_FOUND, missing, param="response_id")
        if record.state == "running":
            self.daemon.cancel(record.trace_id, "cancelled through the Responses API")
            await self.desk.answer(record.request_id, wait=CANCEL_WAIT_SECONDS)
        headers = {REQUEST_ID_HEADER: record.request_id}
        return JSONResponse(standing(self._settled(record)), headers=headers)


def standing(record: RequestRecord) -> dict[str, Any]:
    """The response of ``record`` as it stands: ``in_progress`` while it runs."""
    done = record.state == "done" and record.answer is not None
    return response_json(record, DelegateAnswer.from_wire(record.answer) if done else None)


RESPONSES_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/v1/responses"): Operation(
        "A Turn as an OpenAI response (the agent is the model; previous_response_id continues "
        "its conversation).",
        {"type": "object", "required": ["id", "object", "status"]},
        body={"type": "object", "required": ["model", "input"]},
        stream=True,
        tag="openai",
        idempotent_key=True,
        external=f"{OPENAI_API}/responses/create",
    ),
    ("GET", "/v1/responses/{id}"): Operation(
        "A response by its id (after a dropped connection or a restart too).",
        {"type": "object", "required": ["id", "object", "status"]},
        tag="openai",
        external=f"{OPENAI_API}/responses/get",
    ),
    ("POST", "/v1/responses/{id}/cancel"): Operation(
        "Cancel a background response.",
        {"type": "object", "required": ["id", "object", "status"]},
        tag="openai",
        external=f"{OPENAI_API}/responses/cancel",
    ),
}
"""The door's routes, as the OpenAPI document describes them."""


def responses_routes(daemon: SwarmOperations, desk: RequestDesk) -> list[BaseRoute]:
    """The routes of the Responses door."""
    return ResponsesApi(daemon, desk).routes()


__all__ = [
    "RESPONSES_OPERATIONS",
    "ResponseEvents",
    "ResponsesApi",
    "response_of",
    "responses_routes",
]
