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
from msgspec import UnsetType

from goondan.errors import DeliveryCode
from goondan.state_files import approvals as approval_files
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


def _rows(state_dir: Path, approval_id: str | None = None) -> list[ApprovalRow]:
    """The records as stored, read into rows (one that is not a record is left out)."""
    rows = []
    for data in approval_files.read_rows(state_dir, approval_id):
        try:
            rows.append(_shown(convert(data, ApprovalRow)))
        except msgspec.ValidationError:
            continue
    return rows


def _given(value: T | UnsetType) -> T | None:
    """``value``, or ``None`` for a field the record lacks (as it was always shown)."""
    return None if isinstance(value, UnsetType) else value


def _shown(row: ApprovalRow) -> ApprovalRow:
    """``row``, a pending one past its deadline shown ``expired``: the agent records it so as
    soon as it runs (it may be stopped right now), and a decision is refused either way."""
    if row.status == "pending" and row.expires_at_unix <= time.time():
        return msgspec.structs.replace(row, status="expired")
    return row


def list_approvals(
    state_dir: Path, *, agent: str | None = None, include_decided: bool = False
) -> list[ApprovalRow]:
    """The approvals on disk, oldest request first: the pending ones, or every one."""
    rows = [
        row
        for row in _rows(state_dir)
        if (agent is None or row.agent_name == agent)
        and (include_decided or row.status == "pending")
    ]
    return sorted(rows, key=lambda row: str(_given(row.requested_at) or ""))


def approval_line(row: ApprovalRow) -> str:
    """One line of ``approvals``: id, where, tool, arguments, then when it expires or how it
    was decided and by whom (records from before decisions named their maker have no one)."""
    where = f"{row.agent_name}@{row.instance_key}"
    arguments = json.dumps(_given(row.arguments), ensure_ascii=False)
    if len(arguments) > 200:
        arguments = arguments[:200] + "…"
    line = f"{row.approval_id}  {where}  {row.tool_name}  {arguments}"
    return f"{line}  {approval_state(row)}"


def approval_state(row: ApprovalRow) -> str:
    """``expires <when>`` of a pending approval, else ``<status> [by <who>] [at <when>]``."""
    if row.status == "pending":
        return f"expires {_given(row.expires_at)}"
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
            json.dumps(_given(row.arguments), ensure_ascii=False),
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
    rows = _rows(state_dir, approval_id)
    return rows[0] if rows else None


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
