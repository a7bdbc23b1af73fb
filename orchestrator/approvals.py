"""Operators' side of tool calls parked for approval: find them on disk, decide through the
agent that owns them.

Each agent writes its parked calls under its instances
(``agents/<agent>/instances/<instance>/approvals/<approvalId>.json``, format in
``goondan.state_files.approvals``); the daemon only reads them, so listing works whether or
not the agent runs. A decision goes to the agent (started first if it is not running: at boot it takes
up its parked Turns), which records it and wakes the Turn: one writer per file.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from goondan.errors import DeliveryCode
from goondan.state_files import approvals as approval_files
from goondan.state_files.approvals import Approval
from goondan.time import utc_timestamp
from ipc import IpcError
from ipc.protocol import APPROVAL_ALREADY_DECIDED, APPROVAL_INVALID_ARGUMENTS, APPROVAL_NOT_FOUND
from ipc.questions import ApprovalDecision, ApprovalDecisionResult
from ipc.runtime_events import EventType
from orchestrator.operations.answers import ApprovalAnswer, ApprovalRow
from orchestrator.operations.encoding import convert
from orchestrator.operations.protocol import DecisionOutcome

T = TypeVar("T")

APPROVAL_ID = re.compile(r"^apr_[0-9a-f]{16}$")
"""What an approval id looks like (anything else names no file, by construction)."""
MAX_REASON_CHARS = 2000
"""A rejection's reason reaches the model; a longer one is refused (400)."""
APPROVAL_EVENTS: frozenset[str] = frozenset(
    {EventType.APPROVAL_REQUESTED, EventType.APPROVAL_RESUMED, EventType.APPROVAL_DECIDED}
    | {EventType.APPROVAL_EXPIRED, EventType.APPROVAL_CANCELLED}
)
"""The runtime events of how a parked call fares (what a request's caller is told of)."""


def approval_row(record: Approval) -> ApprovalRow:
    """``record`` as the API lists it. A pending record past its deadline is shown
    ``expired``: the agent records it so as soon as it runs (it may be stopped right now), and
    a decision is refused either way."""
    status = record.status
    if status == "pending" and record.expires_at_unix <= time.time():
        status = "expired"
    return ApprovalRow(
        approval_id=record.approval_id,
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        arguments=record.arguments,
        agent_name=record.agent_name,
        instance_key=record.instance_key,
        trace_id=record.trace_id,
        turn_id=record.turn_id,
        requested_at=record.requested_at,
        expires_at=utc_timestamp(record.expires_at_unix),
        expires_at_unix=record.expires_at_unix,
        status=status,
        started=record.started,
        settled=record.settled,
        decided_at=_given(record.decided_at),
        decided_arguments=_given(record.decided_arguments),
        reason=_given(record.reason),
        decided_by=_given(record.decided_by),
    )


def _given(value: T | None) -> T | UnsetType:
    return UNSET if value is None else value


def _shown(row: ApprovalRow) -> ApprovalRow:
    """``row`` with a pending status past its deadline shown ``expired`` (see
    :func:`approval_row`)."""
    if row.status == "pending" and row.expires_at_unix <= time.time():
        return msgspec.structs.replace(row, status="expired")
    return row


def list_approvals(
    state_dir: Path, *, agent: str | None = None, include_decided: bool = False
) -> list[ApprovalRow]:
    """The approvals on disk, oldest request first: the pending ones, or every one."""
    rows = [
        approval_row(record)
        for record in approval_files.read_records(state_dir)
        if agent is None or record.agent_name == agent
    ]
    shown = [row for row in rows if include_decided or row.status == "pending"]
    return sorted(shown, key=lambda row: row.requested_at)


def approval_line(row: ApprovalRow) -> str:
    """One line of ``approvals``: id, where, tool, arguments, then when it expires or how it
    was decided and by whom (records from before decisions named their maker have no one)."""
    where = f"{row.agent_name}@{row.instance_key}"
    arguments = json.dumps(row.arguments, ensure_ascii=False)
    if len(arguments) > 200:
        arguments = arguments[:200] + "…"
    line = f"{row.approval_id}  {where}  {row.tool_name}  {arguments}"
    return f"{line}  {approval_state(row)}"


def approval_state(row: ApprovalRow) -> str:
    """``expires <when>`` of a pending approval, else ``<status> [by <who>] [at <when>]``."""
    if row.status == "pending":
        return f"expires {row.expires_at}"
    state = str(row.status)
    if isinstance(row.decided_by, dict):
        state += f" by {describe_decider(row.decided_by)}"
    if row.decided_at:
        state += f" at {row.decided_at}"
    return state


def print_approvals(rows: list[ApprovalRow]) -> None:
    """``approvals``: one :func:`approval_line` each through a pipe, a table on a terminal
    (arguments cut to its width)."""
    import sys

    from orchestrator.tables import Column, Table

    if not sys.stdout.isatty():
        for row in rows:
            print(approval_line(row))
        return
    table = Table(
        (
            Column("APPROVAL", 20, cut=False),
            Column("WHERE", 20),
            Column("TOOL", 16),
            Column("STATE", 24),
            Column("ARGUMENTS"),
        )
    )
    for row in rows:
        table.add_row(
            row.approval_id,
            f"{row.agent_name}@{row.instance_key}",
            row.tool_name,
            approval_state(row),
            json.dumps(row.arguments, ensure_ascii=False),
        )
    table.print()


def describe_decider(decided_by: dict[str, Any]) -> str:
    """A recorded ``decidedBy`` in words (also for records written by other versions)."""
    parts = []
    if decided_by.get("token") is not None:
        parts.append(f"token {decided_by['token']}")
    elif decided_by.get("anonymous"):
        parts.append("anonymous")
    if decided_by.get("uid") is not None:
        user = decided_by.get("user")
        parts.append(f"uid {decided_by['uid']}" + (f" ({user})" if user else ""))
    if decided_by.get("pid") is not None:
        parts.append(f"pid {decided_by['pid']}")
    via = decided_by.get("via")
    if via == "unix":
        parts.append("on api.sock")
    elif decided_by.get("address") is not None:
        parts.append(f"from {decided_by['address']}")
    return " ".join(parts) or "unknown"


def find_approval(state_dir: Path, approval_id: str) -> ApprovalRow | None:
    """The record of ``approval_id``, or ``None``."""
    if not APPROVAL_ID.match(approval_id):
        return None
    records = approval_files.read_records(state_dir, approval_id)
    return approval_row(records[0]) if records else None


class BadDecision(ValueError):
    """A decision body that is not what the route takes (HTTP 400)."""


_STATUS_OF: dict[str, int] = {
    APPROVAL_NOT_FOUND: 404,
    APPROVAL_ALREADY_DECIDED: 409,
    APPROVAL_INVALID_ARGUMENTS: 400,
}


def decision_from_body(
    approval_id: str,
    decision: Literal["approve", "reject"],
    body: dict[str, Any],
    decided_by: dict[str, Any] | None = None,
) -> ApprovalDecision:
    """The decision an HTTP body asks for, made by ``decided_by`` (recorded with it); raises
    :class:`BadDecision`.

    approve: ``{arguments?: object}`` (in place of the model's arguments);
    reject: ``{reason: non-empty text}`` (the model reads it).
    """
    if decision == "approve":
        unknown = set(body) - {"arguments"}
        arguments = body.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise BadDecision("arguments must be a JSON object")
        if unknown:
            raise BadDecision(f"unknown fields: {', '.join(sorted(unknown))}")
        return ApprovalDecision(approval_id, "approve", arguments, decided_by=decided_by)
    unknown = set(body) - {"reason"}
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadDecision("reason must be non-empty text: the model is told why")
    if len(reason) > MAX_REASON_CHARS:
        raise BadDecision(f"reason must be at most {MAX_REASON_CHARS} characters")
    if unknown:
        raise BadDecision(f"unknown fields: {', '.join(sorted(unknown))}")
    return ApprovalDecision(approval_id, "reject", reason=reason.strip(), decided_by=decided_by)


def outcome_of(answer: ApprovalDecisionResult) -> DecisionOutcome:
    """The HTTP outcome of the agent's answer."""
    error = answer.error
    if error is None:
        try:
            row = convert(answer.approval or {}, ApprovalRow)
        except msgspec.ValidationError as exc:  # an agent of another version
            return DecisionOutcome.refused(
                503, DeliveryCode.AGENT_UNAVAILABLE, f"unreadable answer: {exc}"
            )
        return DecisionOutcome(200, ApprovalAnswer(approval=_shown(row)))
    return DecisionOutcome.refused(_STATUS_OF.get(error.code, 503), error.code, error.message)


def unavailable(error: IpcError) -> DecisionOutcome:
    """The agent that owns the approval could not be reached: try again later."""
    return DecisionOutcome.refused(503, error.code, f"{error.message}; nothing was decided, retry")
