"""A2A tasks as the request desk's records: one accepted request is one task (see
:mod:`orchestrator.http.a2a`). Imports the ``a2a-sdk``; only the A2A front door imports it."""

from __future__ import annotations

import json
import secrets
import time

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from goondan.errors import DeliveryCode
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import AnyEvent, ApprovalEvent, EventType
from orchestrator.http.streams import Piece
from orchestrator.operations.answers import ApprovalRow
from orchestrator.requests import RequestRecord

ANSWER_ARTIFACT = "answer"
"""The name of the artifact that carries a Turn's answer."""
WAITING = frozenset({EventType.APPROVAL_REQUESTED.value, EventType.APPROVAL_RESUMED.value})
"""The ``approval.*`` events after which the task waits for an operator (``input-required``);
the others (decided, expired, cancelled) put it back to ``working``."""


def status(state: TaskState, seconds: float | None = None) -> TaskStatus:
    """A status in ``state`` since ``seconds`` since the epoch (now when ``None``)."""
    made = TaskStatus(state=state)
    made.timestamp.FromNanoseconds(int((time.time() if seconds is None else seconds) * 1e9))
    return made


def agent_message(record: RequestRecord, text: str, suffix: str, **metadata: str) -> Message:
    """A message of the agent in the task ``record`` (``suffix`` makes its id)."""
    message = Message(
        message_id=f"{record.request_id}-{suffix}",
        context_id=record.instance_key,
        task_id=record.request_id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )
    if metadata:
        message.metadata.update(metadata)
    return message


def user_message(record: RequestRecord) -> Message:
    """The message that started the task: its input."""
    return Message(
        message_id=f"{record.request_id}-input",
        context_id=record.instance_key,
        task_id=record.request_id,
        role=Role.ROLE_USER,
        parts=[Part(text=record.input)],
    )


def answer_text(answer: DelegateAnswer) -> str:
    """A Turn's output as text (a structured one as JSON)."""
    output = answer.output
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def answer_artifact(record: RequestRecord, answer: DelegateAnswer) -> Artifact:
    """The artifact of a Turn that answered: its text."""
    return Artifact(
        artifact_id=f"{record.request_id}-{ANSWER_ARTIFACT}",
        name=ANSWER_ARTIFACT,
        parts=[Part(text=answer_text(answer), media_type="text/plain")],
    )


def approval_text(approval_id: str, tool: str) -> str:
    """What the caller is told of a call parked for approval: which, and how to decide it."""
    return (
        f"The call of {tool} waits for an operator's approval {approval_id}. Decide it with "
        f"`goondan approve {approval_id}` (or `goondan reject {approval_id} --reason ...`), "
        f"in the studio, or with POST /v1/approvals/{approval_id}/approve (or /reject); "
        "the task goes on once it is decided."
    )


def waiting_status(record: RequestRecord, approval_id: str, tool: str) -> TaskStatus:
    """``input-required``: the Turn waits for the decision on ``approval_id``."""
    message = agent_message(
        record,
        approval_text(approval_id, tool),
        f"approval-{approval_id}",
        approvalId=approval_id,
        toolName=tool,
    )
    made = status(TaskState.TASK_STATE_INPUT_REQUIRED)
    made.message.CopyFrom(message)
    return made


def working_status() -> TaskStatus:
    """``working``: the Turn runs."""
    return status(TaskState.TASK_STATE_WORKING)


def progress_status(record: RequestRecord, piece: Piece) -> TaskStatus:
    """``working``, with a piece of the text the Turn's model produces as it comes (the
    answer itself arrives whole as the artifact)."""
    made = status(TaskState.TASK_STATE_WORKING)
    suffix = f"text-{piece.seq}" if piece.seq else f"text-{secrets.token_hex(4)}"
    made.message.CopyFrom(agent_message(record, piece.text, suffix, agent=piece.agent))
    return made


def notice_status(record: RequestRecord, event: AnyEvent) -> TaskStatus:
    """The task's status after an ``approval.*`` event of its trace."""
    if event.type not in WAITING or not isinstance(event, ApprovalEvent):
        return working_status()
    approval_id = event.approval_id if isinstance(event.approval_id, str) else ""
    tool = event.tool_name if isinstance(event.tool_name, str) else "a tool"
    return waiting_status(record, approval_id, tool)


def final_status(record: RequestRecord, answer: DelegateAnswer) -> TaskStatus:
    """``completed``, or ``canceled`` / ``failed`` with the error's message (and code)."""
    if answer.ok:
        return status(TaskState.TASK_STATE_COMPLETED, record.finished_at)
    error = answer.error
    code = error.code if error is not None else DeliveryCode.AGENT_TURN_FAILED
    text = error.message if error is not None else "the request failed"
    state = (
        TaskState.TASK_STATE_CANCELED
        if code == DeliveryCode.CANCELLED
        else TaskState.TASK_STATE_FAILED
    )
    made = status(state, record.finished_at)
    made.message.CopyFrom(agent_message(record, text, "error", code=str(code)))
    return made


def task_of(
    record: RequestRecord,
    answer: DelegateAnswer | None = None,
    waiting: ApprovalRow | None = None,
) -> Task:
    """The task of ``record``: answered (``answer``), waiting for ``waiting``'s decision, or
    working."""
    task = Task(
        id=record.request_id, context_id=record.instance_key, history=[user_message(record)]
    )
    if answer is not None:
        task.status.CopyFrom(final_status(record, answer))
        if answer.ok:
            task.artifacts.append(answer_artifact(record, answer))
    elif waiting is not None:
        task.status.CopyFrom(waiting_status(record, waiting.approval_id, waiting.tool_name))
    else:
        task.status.CopyFrom(working_status())
    return task


def status_event(record: RequestRecord, status: TaskStatus) -> TaskStatusUpdateEvent:
    """A status update of the task ``record``."""
    return TaskStatusUpdateEvent(
        task_id=record.request_id, context_id=record.instance_key, status=status
    )


def artifact_event(record: RequestRecord, answer: DelegateAnswer) -> TaskArtifactUpdateEvent:
    """The answer's artifact, whole (its last chunk)."""
    return TaskArtifactUpdateEvent(
        task_id=record.request_id,
        context_id=record.instance_key,
        artifact=answer_artifact(record, answer),
        last_chunk=True,
    )
