"""The HTTP API's requests: run a Turn (``POST /v1/agents/{agent}/requests``), hand one over
(``.../sends``), and find one again by its id (``GET /v1/requests/{id}``, ``.../events``).

Every request accepted is recorded first (:mod:`orchestrator.requests`) and has an id, sent as
the ``X-Goondan-Request-Id`` header before the answer (streams included) and as ``requestId``
in it. ``Idempotency-Key`` (1–255 printable ASCII characters) makes a retry safe: the same key
with the same body within the retention starts no second Turn: it is answered the first one's
answer (waiting for it while it runs), with ``Idempotent-Replayed: true``; with another body
it is refused 422 ``IDEMPOTENCY_KEY_REUSED``.

``GET /v1/requests/{id}?wait=SECONDS`` answers ``{requestId, state, answer?}``, waiting up to
SECONDS (at most :data:`MAX_WAIT_SECONDS`) for a running one; an id unknown, or past its
retention, is 404 ``REQUEST_NOT_FOUND``. ``GET /v1/requests/{id}/events`` streams a request as
the POST with ``stream`` does; with ``Last-Event-ID`` it replays what came after that event,
then follows until the answer.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from goondan.errors import DeliveryCode, HttpCode
from ipc.delegation import DelegateAnswer
from orchestrator.http.body import BadBody, Fields, read_object
from orchestrator.http.responses import AnswerResponse, answer_status, error
from orchestrator.http.retry import IDEMPOTENCY_HEADER
from orchestrator.http.streams import (
    ANSWER_EVENT_ID,
    TurnStream,
    answer_json,
    native_events,
    not_answered_here,
    sse,
    sse_event,
)
from orchestrator.operations.answers import Accepted, RequestState
from orchestrator.operations.encoding import encode
from orchestrator.requests import Admission, Intake, KeyReused, RequestDesk, StoreFull
from orchestrator.requests.store import Kind, digest

REQUEST_ID_HEADER = "X-Goondan-Request-Id"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
MAX_WAIT_SECONDS = 300.0
"""The longest ``?wait=`` honoured (a longer one waits this long)."""
REQUEST_FIELDS = ("input", "instanceKey", "timeoutMs", "stream", "relay", "approvals")
"""What ``POST /v1/agents/{agent}/requests`` takes."""
SEND_FIELDS = ("input", "instanceKey")
"""What ``POST /v1/agents/{agent}/sends`` takes (nobody waits: no timeout, no stream)."""


class Refusal(Exception):
    """A request refused before it was accepted: the response says why."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (``None`` without one; a structured-field string's
    quotes are taken off); raises :class:`BadBody` naming the header for one that is empty,
    too long, not printable ASCII (or starts or ends with a space), or repeated."""
    values = request.headers.getlist(IDEMPOTENCY_HEADER)
    if not values:
        return None
    if len(values) > 1:
        raise BadBody(IDEMPOTENCY_HEADER, "send one Idempotency-Key header")
    key = values[0]
    if len(key) >= 2 and key[0] == key[-1] == '"':  # a structured-field string
        key = key[1:-1]
    printable = all(" " <= c <= "~" for c in key) and key == key.strip(" ")
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not printable:
        raise BadBody(
            IDEMPOTENCY_HEADER,
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters",
        )
    return key


def body_digest(kind: Kind, agent: str, body: Mapping[str, Any], *extra: str) -> str:
    """What a request asked, as one digest (its JSON body's keys sorted)."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return digest(kind, agent, canonical, *extra)


def intake_of(request: Request, data: Mapping[str, Any], asked: Intake) -> Intake:
    """``asked`` with the request's ``Idempotency-Key`` and the digest of its body ``data``
    (raises :class:`BadBody` for a bad key)."""
    return dataclasses.replace(
        asked,
        idempotency_key=idempotency_key(request),
        body_digest=body_digest(asked.kind, asked.agent, data),
    )


def id_headers(admission: Admission) -> dict[str, str]:
    """The headers that name an accepted request (and say when it was an earlier one's)."""
    headers = {REQUEST_ID_HEADER: admission.request_id}
    if not admission.fresh:
        headers[REPLAYED_HEADER] = "true"
    return headers


async def admit(desk: RequestDesk, intake: Intake) -> Admission:
    """Admit ``intake``; raises :class:`Refusal` when it is not accepted."""
    try:
        return await desk.admit(intake)
    except KeyReused as exc:
        raise Refusal(error(422, HttpCode.IDEMPOTENCY_KEY_REUSED, str(exc))) from None
    except StoreFull as exc:
        raise Refusal(error(503, HttpCode.SERVER_BUSY, str(exc))) from None
    except OSError as exc:
        message = f"the request could not be recorded, so it was not accepted: {exc.strerror}"
        raise Refusal(error(503, DeliveryCode.E_INTERNAL, message)) from None


def answered(answer: DelegateAnswer, admission: Admission) -> Response:
    """The JSON answer of a Turn: 200, or the status its failure maps to
    (:func:`~orchestrator.http.responses.answer_status`)."""
    body = encode(answer_json(answer, admission.request_id))
    response = Response(body, answer_status(answer), media_type="application/json")
    response.headers.update(id_headers(admission))
    return response


async def run_turn(desk: RequestDesk, request: Request, agent: str) -> Response:
    """``POST /v1/agents/{agent}/requests``: the Turn's answer, as JSON or as events."""
    data = await read_object(request)
    fields = Fields(data, REQUEST_FIELDS)
    text, key, timeout = fields.required_text("input"), fields.instance_key(), fields.timeout_ms()
    stream = fields.flag("stream") or "text/event-stream" in request.headers.get("accept", "")
    relay, approvals = fields.flag("relay"), fields.flag("approvals")
    asked = Intake("request", agent, text, key, timeout, relay, stream, approvals)
    intake = intake_of(request, data, asked)
    try:
        admission = await admit(desk, intake)
    except Refusal as refusal:
        return refusal.response
    if stream or approvals:
        turn = TurnStream(desk, admission.request_id, deltas=stream, approvals=approvals)
        first = await turn.first()
        if isinstance(first, DelegateAnswer) and not first.ok:
            return answered(first, admission)
        response = sse(native_events(turn, first), turn.aclose)
        response.headers.update(id_headers(admission))
        return response
    answer = await desk.answer(admission.request_id)
    return answered(answer or not_answered_here(), admission)


async def hand_over(desk: RequestDesk, request: Request, agent: str) -> Response:
    """``POST /v1/agents/{agent}/sends``: 202 once the request is recorded."""
    data = await read_object(request)
    fields = Fields(data, SEND_FIELDS)
    text, key = fields.required_text("input"), fields.instance_key()
    intake = intake_of(request, data, Intake("send", agent, text, key))
    try:
        admission = await admit(desk, intake)
    except Refusal as refusal:
        return refusal.response
    accepted = Accepted(
        accepted=True, agent=agent, instance_key=key, request_id=admission.request_id
    )
    response = AnswerResponse(accepted, 202)
    response.headers.update(id_headers(admission))
    return response


def wait_seconds(request: Request) -> float:
    """``?wait=`` in seconds (0 without it), at most :data:`MAX_WAIT_SECONDS`; raises
    :class:`BadBody` naming it when it is not a number of seconds."""
    raw = request.query_params.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds) or seconds < 0:
        raise BadBody("wait", "wait must be a number of seconds, 0 or more")
    return min(seconds, MAX_WAIT_SECONDS)


def not_found(request_id: str) -> Response:
    """404 ``REQUEST_NOT_FOUND``."""
    return error(
        404,
        HttpCode.REQUEST_NOT_FOUND,
        f"no request {request_id!r}: never accepted here, or its answer was kept "
        "past the retention and let go",
    )


async def request_state(
    desk: RequestDesk,
    request: Request,
    render: Mapping[Kind, Any],
) -> Response:
    """``GET /v1/requests/{id}?wait=SECONDS``; ``render[kind](answer, record)`` makes the
    body of a front door whose answer is not the Turn's answer as such."""
    request_id = request.path_params["id"]
    wait = wait_seconds(request)
    await desk.opened()
    record = await desk.find(request_id)
    if record is None:
        return not_found(request_id)
    answer = await desk.answer(request_id, wait=wait) if record.state == "running" else None
    if answer is None and record.state == "done" and record.answer is not None:
        answer = DelegateAnswer.from_wire(record.answer)
    if answer is None:
        body = RequestState(request_id=request_id, state="running")
    else:
        made = render.get(record.kind)
        shown = made(answer, record) if made is not None else answer_json(answer, request_id)
        body = RequestState(request_id=request_id, state="done", answer=shown)
    response = AnswerResponse(body)
    response.headers[REQUEST_ID_HEADER] = request_id
    return response


def last_event_id(request: Request) -> int | str:
    """The ``Last-Event-ID`` a reconnecting client sends: an event's number, the answer's id,
    or 0 (replay all) for none or one that is no id of ours."""
    raw = request.headers.get("last-event-id", "").strip()
    if raw == ANSWER_EVENT_ID:
        return raw
    if raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    return 0


async def request_events(desk: RequestDesk, request: Request) -> Response:
    """``GET /v1/requests/{id}/events``: the request's events after ``Last-Event-ID``, then
    what comes, until the answer (204 once a client has had the answer)."""
    request_id = request.path_params["id"]
    await desk.opened()
    record = await desk.find(request_id)
    if record is None:
        return not_found(request_id)
    after = last_event_id(request)
    headers = {REQUEST_ID_HEADER: request_id}
    if after == ANSWER_EVENT_ID:
        return Response(status_code=204, headers=headers)
    if record.state == "done" and record.answer is not None:
        answer = DelegateAnswer.from_wire(record.answer)
        event = sse_event("answer", answer_json(answer, request_id), ANSWER_EVENT_ID)
        return Response(event, media_type="text/event-stream", headers=headers)
    assert isinstance(after, int)
    turn = TurnStream(desk, request_id, after=after, deltas=True, approvals=True)
    first = await turn.first()
    response = sse(native_events(turn, first), turn.aclose)
    response.headers.update(headers)
    return response
