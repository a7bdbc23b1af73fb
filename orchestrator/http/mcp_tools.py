"""The MCP front door's tools: one per agent the ``mcp`` door shows, each call a Turn.

Imported only when the ``mcp`` extra is installed (:mod:`orchestrator.http.mcp_server` loads it
on the first ``/mcp`` request). A tool is named after its agent and described by
:class:`~orchestrator.http.front_doors.DoorView`; it takes ``{input, instanceKey?}`` and
answers the Turn's text as text content and its answer body (``requestId``, ``status``,
``output``, ``turn``) as structured content. A failed Turn is a tool result with ``isError``
(the error's code and message in both), never a protocol error; a tool nobody shows is the
protocol's ``Invalid params`` error, and arguments that do not fit the schema are an
``isError`` result naming the field (the SDK's and the 2025-11-25 specification's rule, so a
model can correct its call).

Each call is one request of the desk, its id in the result; with the ``_meta`` key
:data:`IDEMPOTENCY_META_KEY` a call made again follows the first one's request instead of
running another Turn.

While the Turn runs, a client that sent a progress token gets ``notifications/progress`` on
each Step, tool call and piece of text. A tool call of the agent parked for an operator's
approval is asked through elicitation when the client declared it (accept approves, decline
or cancel rejects); the answer is an operator's decision only when the caller may decide
(:func:`~orchestrator.http.approvers.vet_decider`: never an agent's own process). Otherwise
the call waits, and says in a progress and a log message what it waits for and how to
decide it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp_types as types
import structlog
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from msgspec import UnsetType
from starlette.requests import Request
from starlette.responses import Response

from goondan.defaults import DEFAULT_INSTANCE_KEY
from goondan.errors import DeliveryCode, HttpCode
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import AnyEvent
from ipc.runtime_events.types import EventType
from orchestrator.approvals import decision_from_body
from orchestrator.http.approvers import vet_decider
from orchestrator.http.body import BadBody, Fields
from orchestrator.http.requests import Refusal, admit, body_digest
from orchestrator.http.retry import check_key
from orchestrator.http.streams import Notice, Piece, TurnStream, answer_json, not_answered_here
from orchestrator.operations import SwarmOperations
from orchestrator.requests import Intake, RequestDesk

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "What to ask the agent."},
        "instanceKey": {
            "type": "string",
            "description": "The conversation to continue (default: "
            f"{DEFAULT_INSTANCE_KEY!r}); the same key continues the same conversation.",
        },
    },
    "required": ["input"],
    "additionalProperties": False,
}
"""What every agent's tool takes."""
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "requestId": {"type": "string"},
        "status": {"type": "string"},
        "output": {},
        "turn": {"type": ["object", "null"]},
    },
    "required": ["requestId", "status"],
}
"""The answer body a successful call carries as structured content."""
IDEMPOTENCY_META_KEY = "goondan.ai/idempotencyKey"
"""The ``_meta`` key of a call's idempotency key (as ``Idempotency-Key`` on the request API):
a call again with the same key and arguments within the retention runs no second Turn, it
follows the first call's request (waiting for it while it runs)."""
REJECTED_BY_CLIENT = "rejected by the user of the MCP client ({action})"
"""The reason a rejection through elicitation gives the model."""

_log = structlog.get_logger("goondan.mcp")


class ShownAgents(Protocol):
    """Which agents the ``mcp`` door shows, and how each is described
    (:class:`orchestrator.http.front_doors.DoorView`)."""

    def agents(self) -> list[str]:
        """The agents shown, by name."""
        ...

    def shows(self, agent: str) -> bool:
        """Whether ``agent`` is shown."""
        ...

    def describe(self, agent: str) -> str:
        """What ``agent`` does, as its callers are told."""
        ...


@dataclass(frozen=True, slots=True)
class Arguments:
    """A tool call's arguments, checked as the request API checks its body."""

    input: str
    instance_key: str

    @classmethod
    def read(cls, arguments: Mapping[str, Any] | None) -> Arguments:
        """The arguments of a call; raises :class:`~orchestrator.http.body.BadBody` naming
        the argument that does not fit."""
        fields = Fields(dict(arguments or {}), ("input", "instanceKey"))
        return cls(fields.required_text("input"), fields.instance_key())


def error_result(code: str, message: str, **extra: Any) -> types.CallToolResult:
    """An ``isError`` result carrying ``{error: {code, message, ...}}`` as structured content."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"error": {"code": code, "message": message, **extra}},
        is_error=True,
    )


def answer_result(answer: DelegateAnswer, request_id: str) -> types.CallToolResult:
    """The tool result of a Turn's answer: its text and its body, or its error."""
    body = answer_json(answer, request_id)
    if not answer.ok:
        error = answer.error or IpcError("the request failed", code=DeliveryCode.AGENT_TURN_FAILED)
        text = f"{error.code}: {error.message} (request {request_id})"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=body,
            is_error=True,
        )
    output = answer.output
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=body
    )


class AgentTools:
    """The tools of a swarm for one MCP server (see the module docstring)."""

    def __init__(self, daemon: SwarmOperations, desk: RequestDesk, shown: ShownAgents) -> None:
        self.daemon = daemon
        self.desk = desk
        self.shown = shown

    def server(self) -> Server[Any]:
        """A low-level MCP server answering ``tools/list`` and ``tools/call``."""
        return Server(
            self.daemon.name,
            version=_version(),
            title=f"the {self.daemon.name} swarm",
            instructions="Each tool is an agent of the swarm: call it with `input` (and an "
            "`instanceKey` to continue a conversation); the answer is the agent's reply.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every agent the ``mcp`` door shows, as a tool."""
        tools = [
            types.Tool(
                name=agent,
                description=self.shown.describe(agent),
                input_schema=INPUT_SCHEMA,
                output_schema=OUTPUT_SCHEMA,
            )
            for agent in self.shown.agents()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Run a Turn of the agent the tool names and answer with it."""
        agent = params.name
        if not self.shown.shows(agent):
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {agent}", {"tool": agent})
        try:
            arguments = Arguments.read(params.arguments)
            key = idempotency_key_of(ctx.meta)
        except BadBody as exc:
            return error_result(HttpCode.BAD_REQUEST, exc.message, field=exc.field)
        if self.daemon.stopping:
            return error_result(DeliveryCode.SHUTTING_DOWN, "the daemon is shutting down")
        # Text and Steps are only ever reported as progress: without the client's progress
        # token nobody reads them, so the Turn does not stream them to this call at all.
        progress = progress_token_from_params(ctx.params) is not None
        asked = Intake(
            "mcp",
            agent,
            arguments.input,
            arguments.instance_key,
            deltas=progress,
            approvals=True,
            activity=progress,
        )
        body = {"input": arguments.input, "instanceKey": arguments.instance_key}
        intake = dataclasses.replace(
            asked,
            idempotency_key=key,
            body_digest=body_digest("mcp", agent, body, arguments.instance_key),
        )
        try:
            admission = await admit(self.desk, intake)
        except Refusal as refusal:
            detail = json.loads(bytes(refusal.response.body))["error"]
            return error_result(detail["code"], detail["message"])
        call = _Call(self, ctx, admission.request_id, progress)
        answer = await call.follow()
        return answer_result(answer, admission.request_id)


def idempotency_key_of(meta: Mapping[str, Any] | None) -> str | None:
    """The call's idempotency key from its ``_meta`` (``None`` without one); raises
    :class:`~orchestrator.http.body.BadBody` naming it when it may not be one."""
    key = (meta or {}).get(IDEMPOTENCY_META_KEY)
    if key is None:
        return None
    field = f"_meta.{IDEMPOTENCY_META_KEY}"
    if not isinstance(key, str):
        raise BadBody(field, f"{field} must be a string")
    try:
        return check_key(key)
    except ValueError as exc:
        raise BadBody(field, str(exc)) from None


def _version() -> str:
    """This runtime's version, as the server names it to clients."""
    import importlib.metadata

    try:
        return importlib.metadata.version("goondan-py")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class _Call:
    """One ``tools/call`` following its request: progress, approvals, then the answer."""

    def __init__(
        self,
        tools: AgentTools,
        ctx: ServerRequestContext[Any, Any],
        request_id: str,
        progress: bool = True,
    ) -> None:
        self.tools = tools
        self.ctx = ctx
        self.request_id = request_id
        self.reports = progress
        """Whether the client asked for progress (a progress token): its text and Steps."""
        self.progress = 0
        self.asking: dict[str, anyio.CancelScope] = {}
        """Elicitations open, by approval id (closed when it is decided elsewhere)."""

    async def report(self, message: str) -> None:
        """One progress notification (nothing without the client's progress token)."""
        self.progress += 1
        await self.ctx.session.report_progress(self.progress, None, message)

    async def follow(self) -> DelegateAnswer:
        """The request's answer, reporting its work while it runs."""
        reports = self.reports
        turn = TurnStream(
            self.tools.desk, self.request_id, deltas=reports, approvals=True, activity=reports
        )
        try:
            await self.report(f"accepted as request {self.request_id}")
            async with anyio.create_task_group() as group:
                answer = await self._follow(turn, group)
                group.cancel_scope.cancel()  # no question stays open past the answer
        finally:
            await turn.aclose()
        return answer

    async def _follow(self, turn: TurnStream, group: anyio.abc.TaskGroup) -> DelegateAnswer:
        async for item in turn.items():
            if item is None:
                await self.report("still running")
            elif isinstance(item, Piece):
                await self.report(item.text)
            elif isinstance(item, Notice):
                await self._notice(item.event, group)
            else:
                return item
        return not_answered_here()

    async def _notice(self, event: AnyEvent, group: anyio.abc.TaskGroup) -> None:
        kind = event.type
        where = event.agent_name
        if kind == EventType.STEP_STARTED:
            index = getattr(event, "step_index", None)
            number = index + 1 if isinstance(index, int) else "?"
            await self.report(f"{where}: step {number} started")
        elif kind in (EventType.TOOL_CALLED, EventType.TOOL_COMPLETED, EventType.TOOL_FAILED):
            verb = "calls" if kind == EventType.TOOL_CALLED else "finished"
            await self.report(f"{where} {verb} {getattr(event, 'tool_name', 'a tool')}")
        elif kind in (EventType.APPROVAL_REQUESTED, EventType.APPROVAL_RESUMED):
            approval_id = getattr(event, "approval_id", None)
            if isinstance(approval_id, str) and approval_id not in self.asking:
                scope = anyio.CancelScope()
                self.asking[approval_id] = scope
                group.start_soon(self._approval, event, approval_id, scope)
        elif kind in _ENDED:
            approval_id = getattr(event, "approval_id", None)
            asking = self.asking.get(approval_id) if isinstance(approval_id, str) else None
            if asking is not None:  # decided elsewhere: the question is moot
                asking.cancel()
            status = getattr(event, "status", None) or kind.split(".")[1]
            await self.report(f"approval {approval_id} {status}")

    async def _approval(self, event: AnyEvent, approval_id: str, scope: anyio.CancelScope) -> None:
        """Ask the client's user about a parked call, or say what the call waits for."""
        with scope:
            tool = getattr(event, "tool_name", None) or "a tool"
            args = getattr(event, "args", None)
            what = f"{event.agent_name} wants to call {tool}"
            if args is not None and not isinstance(args, UnsetType):
                shown_args = json.dumps(args, ensure_ascii=False, default=str)
                what += f" with {shown_args[:500]}"
            decider = await self._decider(approval_id)
            if isinstance(decider, str):
                why_not = decider
            else:
                try:
                    await self._elicit(approval_id, what, decider)
                    return
                except Exception as exc:  # the client could not answer after all: wait
                    why_not = f"the client's elicitation failed ({exc})"
            how = (
                f"waiting for an operator to decide approval {approval_id} ({what}): "
                f"`goondan approve {approval_id}` or `goondan reject {approval_id} --reason ...`, "
                f"or POST /v1/approvals/{approval_id}/approve (or /reject)"
            )
            if why_not:
                how += f"; not asked here: {why_not}"
            await self.report(how)
            await self._log(how)

    async def _decider(self, approval_id: str) -> dict[str, Any] | str:
        """Who decides ``approval_id`` through elicitation (the caller, as the decision
        records it), or why the client is not asked (empty when it did not declare
        elicitation)."""
        session = self.ctx.session
        wants = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        if not session.check_client_capability(wants) or not session.can_send_request:
            return ""
        request = self.ctx.request
        if not isinstance(request, Request):
            return "the caller cannot be identified"
        decider = await vet_decider(self.tools.daemon, request, approval_id)
        if isinstance(decider, Response):
            return "the caller may not decide approvals (it is one of the swarm's own processes)"
        return decider.to_json()

    async def _elicit(self, approval_id: str, what: str, decider: dict[str, Any]) -> None:
        """Ask the client's user, and carry out what they answer as ``decider``'s decision."""
        message = f"Approve this tool call? {what} (approval {approval_id})"
        schema: dict[str, Any] = {"type": "object", "properties": {}}
        result = await self.ctx.session.elicit_form(
            message, schema, related_request_id=self.ctx.request_id
        )
        if result.action == "accept":
            body: dict[str, Any] = {}
            decision = decision_from_body(approval_id, "approve", body, decider)
        else:
            reason = REJECTED_BY_CLIENT.format(action=result.action)
            body = {"reason": reason}
            decision = decision_from_body(approval_id, "reject", body, decider)
        outcome = await self.tools.daemon.decide(decision)
        _log.info(
            "approval decided through mcp elicitation",
            approval_id=approval_id,
            decision=decision.decision,
            status=outcome.status,
        )

    async def _log(self, text: str) -> None:
        """A ``notifications/message`` on the call's stream (handshake-era clients only: the
        2026-07-28 revision sends log messages only to a request that asked for them)."""
        session = self.ctx.session
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        note = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level="warning", data=text, logger="goondan.approvals"
            )
        )
        await session.send_notification(note, related_request_id=self.ctx.request_id)


_ENDED = frozenset(
    {EventType.APPROVAL_DECIDED, EventType.APPROVAL_EXPIRED, EventType.APPROVAL_CANCELLED}
)
"""Events that end a parked call's wait."""
