"""The A2A request handler of the swarm: the SDK's :class:`RequestHandler` interface answered
from the request desk (see :mod:`orchestrator.http.a2a` for the mapping and why it is not the
SDK's default handler). Imports the ``a2a-sdk``; only the A2A front door imports it."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from typing import NoReturn

from a2a.helpers.proto_helpers import get_data_parts
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler, validate_request_params
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length
from starlette.requests import Request

from ipc.delegation import DelegateAnswer
from ipc.runtime_events import ApprovalEvent
from orchestrator.http.a2a_tasks import (
    WAITING,
    artifact_event,
    final_status,
    notice_status,
    progress_status,
    status_event,
    task_of,
    working_status,
)
from orchestrator.http.requests import body_digest
from orchestrator.http.streams import Notice, Piece, TurnStream
from orchestrator.operations import SwarmOperations
from orchestrator.operations.answers import ApprovalRow
from orchestrator.requests import (
    Admission,
    Intake,
    KeyReused,
    RequestDesk,
    RequestRecord,
    StoreFull,
)

AGENT_STATE = "goondan.agent"
"""Where the call context carries the agent the endpoint's path names."""
MAX_CONTEXT_ID = 256
"""Characters a ``contextId`` (the conversation's instance key) may have."""
CANCEL_WAIT_SECONDS = 10.0
"""How long ``CancelTask`` waits for the cancelled Turn's answer before answering with the
task as it stands (a Turn stops at its next safe point)."""
KEY_PREFIX = "a2a-message:"
"""An A2A message's id as the request's idempotency key (kept apart from HTTP keys)."""


class AgentContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, plus the agent the endpoint's path names."""

    def build(self, request: Request) -> ServerCallContext:
        """The call context of ``request`` (with the agent under :data:`AGENT_STATE`)."""
        context = super().build(request)
        context.state[AGENT_STATE] = request.path_params.get("agent", "")
        return context


def _invalid(field: str, message: str) -> InvalidParamsError:
    """Invalid params naming ``field`` (the SDK's field-violation shape)."""
    return InvalidParamsError(
        message=message, data={"errors": [{"field": field, "message": message}]}
    )


def message_text(message: Message) -> str:
    """The text a message asks the agent: its text parts (data parts as JSON), in order;
    raises invalid params naming the part that is neither, or when there is no text."""
    texts: list[str] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(get_data_parts([part])[0], ensure_ascii=False))
        else:
            raise _invalid(
                f"message.parts[{index}]",
                "only text and data parts are taken: files reach an agent through its tools",
            )
    text = "\n".join(texts)
    if not text.strip():
        raise _invalid("message.parts", "the message has no text")
    return text


def context_key(message: Message) -> str:
    """The conversation a message continues (its ``contextId``), or a new one."""
    given = message.context_id
    if not given:
        return f"a2a-{secrets.token_hex(12)}"
    if len(given) > MAX_CONTEXT_ID or not given.isprintable():
        raise _invalid(
            "message.contextId",
            f"contextId must be 1 to {MAX_CONTEXT_ID} printable characters",
        )
    return given


def _ended(wait: Notice, turn: TurnStream) -> bool:
    """Whether the approval ``wait`` began is over already in what ``turn`` holds next (a
    message sent again is replayed its request's events: a wait decided since is no wait)."""
    begun = wait.event
    if not isinstance(begun, ApprovalEvent):
        return False
    return any(
        isinstance(later, Notice)
        and isinstance(later.event, ApprovalEvent)
        and later.event.type not in WAITING
        and later.event.approval_id == begun.approval_id
        for later in turn.pieces
    )


class SwarmRequestHandler(RequestHandler):
    """A2A methods over the request desk: a task is an accepted request (see the door's
    module docstring)."""

    def __init__(self, daemon: SwarmOperations, desk: RequestDesk) -> None:
        self.daemon = daemon
        self.desk = desk

    # -- messages ----------------------------------------------------------------------------

    async def _admit(
        self, params: SendMessageRequest, context: ServerCallContext, stream: bool = False
    ) -> tuple[Admission, TurnStream]:
        """Record the message's request (or find the one its ``messageId`` started) and
        follow it (with its text as it is produced when the caller ``stream`` s)."""
        validate_history_length(params.configuration)
        agent = str(context.state.get(AGENT_STATE, ""))
        message = params.message
        if message.task_id:
            raise UnsupportedOperationError(
                message="a message starts a task of its own: continue the conversation with "
                "its contextId, and decide a task's approval through the approvals API"
            )
        text, key = message_text(message), context_key(message)
        asked = Intake("a2a", agent, text, key, deltas=stream, approvals=True)
        intake = dataclasses.replace(
            asked,
            idempotency_key=KEY_PREFIX + message.message_id,
            # The contextId as sent: a retry without one finds the context made for it.
            body_digest=body_digest("a2a", agent, {"text": text}, message.context_id),
        )
        try:
            admission = await self.desk.admit(intake)
        except KeyReused:
            raise _invalid(
                "message.messageId", "this messageId was sent with another message"
            ) from None
        except StoreFull as exc:
            raise InternalError(message=str(exc)) from None
        except OSError as exc:
            raise InternalError(
                message=f"the request could not be recorded, so it was not accepted: {exc.strerror}"
            ) from None
        turn = TurnStream(self.desk, admission.request_id, deltas=stream, approvals=True)
        return admission, turn

    @validate_request_params
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """``SendMessage``: the task once it completes, fails, or waits for an approval
        (at once with ``returnImmediately``)."""
        admission, turn = await self._admit(params, context)
        record = admission.record
        try:
            if params.configuration.return_immediately:
                return apply_history_length(await self._now(record), params.configuration)
            task = await self._until_settled(record, turn)
        finally:
            await turn.aclose()
        return apply_history_length(task, params.configuration)

    async def _until_settled(self, record: RequestRecord, turn: TurnStream) -> Task:
        async for item in turn.items():
            if isinstance(item, DelegateAnswer):
                return task_of(self.desk.record(record.request_id) or record, item)
            if isinstance(item, Notice) and item.event.type in WAITING and not _ended(item, turn):
                task = task_of(record)
                task.status.CopyFrom(notice_status(record, item.event))
                return task
        return await self._now(record)  # the daemon stops: the task as it stands

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """``SendStreamingMessage``: the task, ``working`` (then again with each piece of
        the model's text as it comes), each approval wait and its end, then the answer's
        artifact and the final status."""
        admission, turn = await self._admit(params, context, stream=True)
        record = admission.record
        if admission.fresh:
            first = task_of(record)
            first.status.state = TaskState.TASK_STATE_SUBMITTED
        else:  # the message sent again: its task as it stands, then what comes
            first = await self._now(record)
        async for event in self._follow(record, turn, first, started=admission.fresh):
            yield event

    async def _follow(
        self, record: RequestRecord, turn: TurnStream, first: Task, started: bool
    ) -> AsyncIterator[Event]:
        """``first``, ``working`` if the task ``started`` now, then its events until its
        answer."""
        try:
            yield first
            if started:
                yield status_event(record, working_status())
            async for item in turn.items():
                if isinstance(item, Piece):
                    yield status_event(record, progress_status(record, item))
                elif isinstance(item, Notice):
                    yield status_event(record, notice_status(record, item.event))
                elif isinstance(item, DelegateAnswer):
                    done = self.desk.record(record.request_id) or record
                    if item.ok:
                        yield artifact_event(done, item)
                    yield status_event(done, final_status(done, item))
        finally:
            await turn.aclose()

    # -- tasks -------------------------------------------------------------------------------

    async def _record(self, task_id: str, context: ServerCallContext) -> RequestRecord:
        """The request of task ``task_id`` through this agent's endpoint."""
        await self.desk.opened()
        record = await self.desk.find(task_id)
        agent = context.state.get(AGENT_STATE)
        if record is None or record.kind != "a2a" or record.agent != agent:
            raise TaskNotFoundError(message=f"no task {task_id!r} of this agent")
        return record

    def _waiting(self, record: RequestRecord) -> ApprovalRow | None:
        """The pending approval the task's Turn waits for, if any."""
        pending = self.daemon.approvals(agent=None, include_decided=False)
        found = [row for row in pending if row.trace_id == record.trace_id]
        return found[0] if found else None

    async def _now(self, record: RequestRecord) -> Task:
        """The task of ``record`` as it stands."""
        current = await self.desk.find(record.request_id) or record
        answer = None
        if current.state == "done" and current.answer is not None:
            answer = DelegateAnswer.from_wire(current.answer)
        return task_of(current, answer, None if answer is not None else self._waiting(current))

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """``GetTask``: from the request's record (kept across restarts)."""
        validate_history_length(params)
        record = await self._record(params.id, context)
        return apply_history_length(await self._now(record), params)

    @validate_request_params
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """``CancelTask``: cancels the request's Turn (its agents stop at their next safe
        point); the task once it is answered ``canceled``."""
        record = await self._record(params.id, context)
        if record.state == "done":
            raise TaskNotCancelableError(message=f"task {params.id!r} has ended already")
        traces = self.daemon.cancel(record.trace_id, "cancelled by its A2A caller")
        if not traces:
            raise TaskNotCancelableError(message=f"task {params.id!r} is not running here")
        await self.desk.answer(record.request_id, wait=CANCEL_WAIT_SECONDS)
        return await self._now(record)

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """``SubscribeToTask``: a running task's events again (after a dropped stream)."""
        record = await self._record(params.id, context)
        feed = self.desk.feed(record.request_id)
        if record.state == "done" or feed is None:
            raise UnsupportedOperationError(
                message=f"task {params.id!r} is not running here: ask for it with GetTask"
            )
        # What came before the snapshot is in it; what comes after follows it.
        turn = TurnStream(self.desk, record.request_id, after=feed.seq, deltas=True, approvals=True)
        first = await self._now(record)
        async for event in self._follow(record, turn, first, started=False):
            yield event

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """Not offered: a task is found by its id."""
        raise UnsupportedOperationError(message="tasks are not listed: ask for one by its id")

    # -- not offered ---------------------------------------------------------------------------

    async def _no_push_notifications(self, params: object, context: ServerCallContext) -> NoReturn:
        """Push notifications are not offered."""
        raise PushNotificationNotSupportedError

    on_create_task_push_notification_config = _no_push_notifications
    on_get_task_push_notification_config = _no_push_notifications
    on_list_task_push_notification_configs = _no_push_notifications
    on_delete_task_push_notification_config = _no_push_notifications

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """No extended card: the public one says everything."""
        raise UnsupportedOperationError(message="there is no extended agent card")
