"""The swarm's agents as AG-UI agents: ``POST /ag-ui/{agent}`` (the agents the ``agUi`` door
shows), encoded with the official ``ag-ui-protocol`` types and encoder (the ``agui`` extra,
imported when a run comes; without it the route answers 501 naming
``pip install 'goondan-py[agui]'``).

A run. The body is a ``RunAgentInput`` (validated with the package's model; a bad one is 400
in the API's error shape, ``field`` naming the first wrong field). ``threadId`` is the
conversation's instance key; the last user message is the Turn's input, with ``context``
added after it as lines ``description: value``; earlier messages are the front end's copy of
the conversation, which the agent keeps itself. ``tools`` (front-end tools), ``state`` and
``forwardedProps`` are accepted and not used: the agent's tools are those goondan.yaml gives
it. The request is accepted like every other (recorded first; ``Idempotency-Key`` and
``X-Goondan-Request-Id`` as on ``POST /v1/agents/{agent}/requests``; kind ``agui``).

The answer is the AG-UI event stream (SSE, ``Accept`` honoured: 406 for one that takes no
``text/event-stream``): ``RUN_STARTED``; ``STEP_STARTED``/``STEP_FINISHED`` per Step of the
agent (named by the Step's id); ``TEXT_MESSAGE_START``/``CONTENT``/``END`` for its streamed
text (one message per Step, id ``msg_<stepId>``, so a message keeps its id when the stream
is picked up again); ``TOOL_CALL_START``/``ARGS``/``END`` and ``TOOL_CALL_RESULT`` for its own
tool calls; then ``RUN_FINISHED`` with the answer as ``result`` (and token ``usage``), or
``RUN_ERROR`` with the failure's code. Only the asked agent's own Steps, text and tool calls
are shown, not those of the agents it delegates to. Keepalives are SSE comments. (The
mapping of a run's items onto events: :mod:`orchestrator.http.ag_ui_events`.)

Approvals (human in the loop, AG-UI's interrupts). When a tool call of the run's trace is
parked for approval (in the agent or in one it delegated to: either way the run waits), the
run ends with ``RUN_FINISHED`` whose ``outcome`` is ``interrupt``: one ``Interrupt`` per
parked call, its ``id`` the approval's id, ``reason`` ``tool_approval``, ``toolCallId``, and
``metadata.goondan`` naming the agent, tool, arguments and request. The Turn keeps waiting.
The front end answers with a new run on the same thread whose ``resume`` holds a
``ResumeEntry`` per interrupt: ``status: resolved`` with ``payload: {approved: true,
arguments?}`` (run the call, with these arguments if given) or ``{approved: false, reason?}``
(the model is told the reason); ``status: cancelled`` rejects it. Each is the operator's
decision of ``POST /v1/approvals/{id}/approve|reject`` (the same check of who decides; 403
for an agent's process), and an approval decided already (through another door) is taken as
it stands. The resumed run streams the rest of the same Turn (what came after the interrupt),
ending as any run does; it starts no Turn, and its ``messages`` are not read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from goondan.errors import DeliveryCode, HttpCode
from ipc.runtime_events import given
from orchestrator.approvals import BadDecision, decision_from_body
from orchestrator.http.ag_ui_events import PausedRun, RunEvents, encoded
from orchestrator.http.approvers import vet_decider
from orchestrator.http.body import BadBody, read_object
from orchestrator.http.openapi import Operation
from orchestrator.http.requests import (
    REQUEST_ID_HEADER,
    Refusal,
    admit,
    id_headers,
    idempotency_key,
    intake_of,
)
from orchestrator.http.responses import AnswerResponse, error
from orchestrator.http.streams import TurnStream, sse
from orchestrator.operations import SwarmOperations
from orchestrator.requests import Intake, RequestDesk

if TYPE_CHECKING:
    from ag_ui.core import ResumeEntry, RunAgentInput
    from ag_ui.encoder import EventEncoder

Verdict = Literal["approve", "reject"]
"""What an answer to an interrupt decides."""
EXTRA = "agui"
"""The optional extra that brings the ``ag-ui-protocol`` package."""
REMEMBERED_INTERRUPTS = 4096
"""Interrupts whose run is remembered for a resume (the oldest go first; a resume of one
forgotten still finds a request that runs, by the approval's trace)."""
CANCELLED_REASON = "cancelled from the AG-UI front end"
REJECTED_REASON = "rejected from the AG-UI front end"

_log = structlog.get_logger("goondan.api")


AG_UI_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/ag-ui/{agent}"): Operation(
        "Run the agent as an AG-UI agent: a RunAgentInput in, the AG-UI event stream out "
        "(an approval is an interrupt; a run with resume entries decides it).",
        body={"type": "object", "required": ["threadId", "runId", "messages"]},
        stream=True,
        tag="agui",
        idempotent_key=True,
        external="https://docs.ag-ui.com/concepts/events",
    )
}
"""The door's route, as the OpenAPI document describes it."""


def ag_ui_routes(
    daemon: SwarmOperations, desk: RequestDesk, shows: Callable[[str], bool]
) -> list[BaseRoute]:
    """``POST /ag-ui/{agent}``, serving the agents ``shows`` says the ``agUi`` door shows
    (:func:`orchestrator.http.front_doors.shown`, which lists this door's routes)."""
    door = AgUiDoor(daemon, desk, shows)
    return [Route("/ag-ui/{agent}", door.run, methods=["POST"])]


@dataclass(eq=False)
class AgUiDoor:
    """``POST /ag-ui/{agent}``: runs of the swarm's agents as AG-UI event streams (see the
    module docstring)."""

    daemon: SwarmOperations
    desk: RequestDesk
    shows: Callable[[str], bool]
    """Whether the door shows an agent."""
    paused: OrderedDict[str, PausedRun] = field(default_factory=OrderedDict)
    """Approval id → where the run it interrupted stopped."""

    async def run(self, request: Request) -> Response:
        """A run: a new Turn, or (with ``resume``) the rest of one an interrupt paused."""
        try:
            from ag_ui.core import RunAgentInput
            from ag_ui.encoder import EventEncoder
        except ImportError:
            message = (
                "the AG-UI front door needs the ag-ui-protocol package: "
                f"pip install 'goondan-py[{EXTRA}]'"
            )
            return error(501, HttpCode.HTTP_ERROR, message)
        agent = request.path_params["agent"]
        if not self.shows(agent):
            return error(404, DeliveryCode.AGENT_NOT_FOUND, f"no AG-UI agent named {agent!r}")
        if self.daemon.stopping:
            return error(503, DeliveryCode.SHUTTING_DOWN, "the daemon is shutting down")
        if not accepts_event_stream(request.headers.get("accept")):
            message = "this route answers text/event-stream (the AG-UI event stream)"
            return error(406, HttpCode.HTTP_ERROR, message)
        data = await read_object(request)
        run_input = read_input(RunAgentInput, data)
        encoder = EventEncoder(accept=request.headers.get("accept") or "text/event-stream")
        if run_input.resume:
            return await self._resume(request, agent, run_input, encoder)
        text = turn_input(run_input)
        asked = Intake(
            "agui",
            agent,
            text,
            run_input.thread_id,
            deltas=True,
            approvals=True,
            activity=True,
        )
        try:
            admission = await admit(self.desk, intake_of(request, data, asked))
        except Refusal as refusal:
            return refusal.response
        turn = TurnStream(
            self.desk, admission.request_id, deltas=True, approvals=True, activity=True
        )
        response = self._stream(turn, run_input, encoder)
        response.headers.update(id_headers(admission))
        return response

    def _stream(
        self, turn: TurnStream, run_input: RunAgentInput, encoder: EventEncoder
    ) -> Response:
        mapper = RunEvents(turn, run_input, self._remember)
        frames = encoded(mapper.events(), encoder)
        return sse(frames, turn.aclose)  # the package's encoder writes SSE only

    def _remember(self, approval_id: str, paused: PausedRun) -> None:
        self.paused[approval_id] = paused
        self.paused.move_to_end(approval_id)
        while len(self.paused) > REMEMBERED_INTERRUPTS:
            self.paused.popitem(last=False)

    def _paused_run(self, approval_id: str, trace_id: str | None) -> PausedRun | None:
        """The run ``approval_id`` interrupted: remembered, or a request running here on the
        approval's trace (picked up from its start)."""
        paused = self.paused.get(approval_id)
        if paused is not None:
            return paused
        for running in self.desk.running.values():
            if trace_id and running.record.trace_id == trace_id:
                return PausedRun(running.record.request_id, 0)
        return None

    async def _resume(
        self, request: Request, agent: str, run_input: RunAgentInput, encoder: EventEncoder
    ) -> Response:
        """Decide each interrupt ``resume`` answers (every entry checked before any is
        decided), then stream the rest of the run they paused."""
        idempotency_key(request)  # checked as on every route; a resume is safe to repeat
        resumed: PausedRun | None = None
        decisions: list[tuple[str, Verdict, dict[str, Any]]] = []
        for index, entry in enumerate(run_input.resume or ()):
            where = f"resume[{index}]"
            paused = self._paused_of(entry.interrupt_id, agent, run_input.thread_id, where)
            if resumed is not None and resumed.request_id != paused.request_id:
                raise BadBody(f"{where}.interruptId", "every entry must answer the same run")
            resumed = paused if resumed is None else max(resumed, paused, key=lambda p: p.seq)
            decisions.append((entry.interrupt_id, *decision_of(entry, where)))
        assert resumed is not None  # resume is not empty
        for index, (approval_id, verdict, body) in enumerate(decisions):
            refused = await self._decide(request, approval_id, verdict, body, f"resume[{index}]")
            if refused is not None:
                return refused
        turn = TurnStream(
            self.desk,
            resumed.request_id,
            after=resumed.seq,
            deltas=True,
            approvals=True,
            activity=True,
        )
        response = self._stream(turn, run_input, encoder)
        response.headers[REQUEST_ID_HEADER] = resumed.request_id
        return response

    def _paused_of(self, approval_id: str, agent: str, thread_id: str, where: str) -> PausedRun:
        """The run of ``agent``'s thread that interrupt ``approval_id`` paused; raises
        :class:`BadBody` naming the entry's ``interruptId`` for none."""
        record = self.daemon.approval(approval_id)
        paused = self._paused_run(approval_id, given(record.trace_id)) if record else None
        if paused is None:
            raise BadBody(
                f"{where}.interruptId", f"no interrupt {approval_id!r} of a run that can go on"
            )
        found = self.desk.record(paused.request_id)
        if found is None or (found.agent, found.instance_key) != (agent, thread_id):
            raise BadBody(
                f"{where}.interruptId", f"interrupt {approval_id!r} is not of this agent's thread"
            )
        return paused

    async def _decide(
        self,
        request: Request,
        approval_id: str,
        verdict: Verdict,
        body: dict[str, Any],
        where: str,
    ) -> Response | None:
        """Carry out one answer as an operator's decision; the response refusing it, or
        ``None`` once decided (or found decided already)."""
        decider = await vet_decider(self.daemon, request, approval_id)
        if isinstance(decider, Response):
            return decider
        try:
            wanted = decision_from_body(approval_id, verdict, body, decider.to_json())
        except BadDecision as exc:
            raise BadBody(f"{where}.payload", str(exc)) from None
        outcome = await self.daemon.decide(wanted, wait=False)
        if outcome.status == 200:
            return None
        if outcome.status == 409:  # decided through another door, or expired: as it stands
            _log.info("an AG-UI resume found its approval decided", approval_id=approval_id)
            return None
        return AnswerResponse(outcome.body, outcome.status)


def accepts_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header takes ``text/event-stream`` (no header takes anything;
    a range given ``q=0`` is refused)."""
    if accept is None or not accept.strip():
        return True
    for part in accept.split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        if media.lower() not in ("text/event-stream", "text/*", "*/*"):
            continue
        weights = [p.partition("=")[2] for p in params if p.lower().startswith("q=")]
        try:
            if not weights or float(weights[0]) > 0:
                return True
        except ValueError:
            continue
    return False


def read_input(model: type[RunAgentInput], data: dict[str, Any]) -> RunAgentInput:
    """``data`` as a ``RunAgentInput``; raises :class:`BadBody` naming the first wrong field
    (``messages[0].content``) or an empty ``threadId``/``runId``."""
    from pydantic import ValidationError

    try:
        run_input = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = _field_path(first["loc"])
        raise BadBody(place or None, f"{place or 'the body'}: {first['msg']}") from None
    for name, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not value.strip():
            raise BadBody(name, f"{name} must be non-empty text")
    return run_input


_TYPE_NAMES = frozenset(("str", "int", "float", "bool", "list", "dict", "none"))
"""Names pydantic gives the members of a plain union in an error's location."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the wire names it: ``messages[0].content``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("user", "assistant", "system", "developer", "tool", "activity"):
            continue  # the member of a tagged union pydantic tried, not a field of the body
        elif "[" in part or part in _TYPE_NAMES:
            continue  # a union member's name (str, list[...]), not a field either
        else:
            path += f".{part}" if path else part
    return path


def turn_input(run_input: RunAgentInput) -> str:
    """The Turn's input: the last user message's text, then the run's ``context``; raises
    :class:`BadBody` when no user message has text."""
    from ag_ui.core import TextPart

    text = ""
    for index in range(len(run_input.messages) - 1, -1, -1):
        message = run_input.messages[index]
        if message.role != "user":
            continue
        content = message.content
        if isinstance(content, str):
            text = content
        else:
            text = "\n".join(part.text for part in content if isinstance(part, TextPart))
        if not text.strip():
            raise BadBody(f"messages[{index}].content", "the last user message has no text")
        break
    else:
        raise BadBody("messages", "messages must hold a user message: the Turn's input")
    lines = [f"{item.description}: {item.value}" for item in run_input.context or ()]
    return "\n\n".join([text, "\n".join(lines)]) if lines else text


def decision_of(entry: ResumeEntry, where: str) -> tuple[Verdict, dict[str, Any]]:
    """``("approve" | "reject", body of the approvals route)`` a resume entry asks for;
    raises :class:`BadBody` naming the entry's payload when it is not one."""
    if entry.status == "cancelled":
        return "reject", {"reason": CANCELLED_REASON}
    payload = entry.payload  # the AG-UI client's JSON, any value: checked here field by field
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise BadBody(f"{where}.payload", "payload must be an object with approved: true or false")
    unknown = sorted(set(payload) - {"approved", "arguments", "reason"})
    if unknown:
        raise BadBody(f"{where}.payload.{unknown[0]}", f"unknown field {unknown[0]!r}")
    if payload["approved"]:
        body = {"arguments": payload["arguments"]} if "arguments" in payload else {}
        return "approve", body
    reason = payload.get("reason")
    return "reject", {"reason": reason if isinstance(reason, str) and reason else REJECTED_REASON}
