"""A tool call parked for an operator's approval, as its record on disk.

On disk, per instance (``agents/<agent>/instances/<instance>/approvals/<approvalId>.json``)::

    {"v": 1, "approvalId", "toolCallId", "toolName", "arguments", "agentName", "instanceKey",
     "traceId", "turnId", "requestedAt", "expiresAt", "expiresAtUnix",
     "status": "pending" | "approved" | "rejected" | "expired" | "cancelled",
     "decidedAt"?, "decidedArguments"?, "reason"?, "decidedBy"?,
     "started": false, "settled": false}

``decidedBy`` is who decided, as the daemon found them at the other end of its API
(``{"via": "unix", "pid", "uid", "gid", "user"?}`` on ``api.sock``, ``{"via": "tcp",
"address", "token" | "anonymous"}`` on TCP); records written before it was kept have none,
and are read as they are.

``started`` and ``settled`` are the agent's marks of carrying a decision out (see the agent's
approval gate).

The agent that parked the call is the only writer (:func:`write_approval`, through
:func:`goondan.files.write_atomic`, so a record is whole and durable before anyone is told of
it); the daemon, the CLI and the studio read the records (:func:`read_rows`) to list them,
whether or not the agent runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from goondan.files import write_atomic
from goondan.state_files import ConversationStorageError
from goondan.time import utc_timestamp

DIRECTORY = "approvals"
"""The directory of an instance's records."""
FORMAT_VERSION = 1

Status = Literal["pending", "approved", "rejected", "expired", "cancelled"]
JsonObject = dict[str, Any]


@dataclass(kw_only=True, slots=True)
class Approval:
    """One parked tool call, as stored."""

    approval_id: str
    tool_call_id: str
    tool_name: str
    arguments: JsonObject
    agent_name: str
    instance_key: str
    trace_id: str
    turn_id: str
    requested_at: str
    expires_at_unix: float
    status: Status = "pending"
    decided_at: str | None = None
    decided_arguments: JsonObject | None = None
    """The operator's arguments, when an approval edited them."""
    reason: str | None = None
    decided_by: JsonObject | None = None
    """Who decided (an approval or a rejection), as the daemon identified them."""
    started: bool = False
    settled: bool = False
    path: Path = field(default=Path(), compare=False)
    """The record's file (not stored in it)."""

    @property
    def run_arguments(self) -> JsonObject:
        """The arguments an approved call runs with."""
        return self.decided_arguments if self.decided_arguments is not None else self.arguments

    def to_json(self) -> JsonObject:
        """The stored (and listed) form."""
        out: JsonObject = {
            "v": FORMAT_VERSION,
            "approvalId": self.approval_id,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "arguments": self.arguments,
            "agentName": self.agent_name,
            "instanceKey": self.instance_key,
            "traceId": self.trace_id,
            "turnId": self.turn_id,
            "requestedAt": self.requested_at,
            "expiresAt": utc_timestamp(self.expires_at_unix),
            "expiresAtUnix": self.expires_at_unix,
            "status": self.status,
            "started": self.started,
            "settled": self.settled,
        }
        if self.decided_at is not None:
            out["decidedAt"] = self.decided_at
        if self.decided_arguments is not None:
            out["decidedArguments"] = self.decided_arguments
        if self.reason is not None:
            out["reason"] = self.reason
        if self.decided_by is not None:
            out["decidedBy"] = self.decided_by
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Approval:
        """Read a stored record; raises ``KeyError``/``TypeError``/``ValueError`` when it is
        not one."""
        status = data.get("status", "pending")
        if status not in ("pending", "approved", "rejected", "expired", "cancelled"):
            raise ValueError(f"unknown status {status!r}")
        arguments = data.get("arguments")
        decided = data.get("decidedArguments")
        decided_by = data.get("decidedBy")
        return cls(
            approval_id=str(data["approvalId"]),
            tool_call_id=str(data["toolCallId"]),
            tool_name=str(data["toolName"]),
            arguments=arguments if isinstance(arguments, dict) else {},
            agent_name=str(data.get("agentName", "")),
            instance_key=str(data["instanceKey"]),
            trace_id=str(data.get("traceId", "")),
            turn_id=str(data.get("turnId", "")),
            requested_at=str(data.get("requestedAt", "")),
            expires_at_unix=float(data["expiresAtUnix"]),
            status=status,
            decided_at=data.get("decidedAt"),
            decided_arguments=decided if isinstance(decided, dict) else None,
            reason=data.get("reason"),
            decided_by=decided_by if isinstance(decided_by, dict) else None,
            started=bool(data.get("started", False)),
            settled=bool(data.get("settled", False)),
            path=path,
        )


def read_approvals(instances_root: Path, log: Any = None) -> list[Approval]:
    """Every readable record under ``instances_root`` (an agent's ``instances/``); an
    unreadable one is skipped (with a warning on ``log``, a structlog logger, when given)."""
    found: list[Approval] = []
    for path in record_files(instances_root):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found.append(Approval.from_json(data, path))
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            if log is not None:
                log.warning("unreadable approval record skipped", file=str(path), error=str(exc))
    return found


def record_files(instances_root: Path) -> list[Path]:
    """``instances_root/*/approvals/apr_*.json``, sorted (no glob: its pattern machinery was a
    good part of an agent's boot)."""
    found: list[str] = []
    try:
        instances = [entry.path for entry in os.scandir(instances_root) if entry.is_dir()]
    except OSError:  # no instance yet
        return []
    for instance in instances:
        try:
            with os.scandir(os.path.join(instance, DIRECTORY)) as records:
                found += [
                    r.path
                    for r in records
                    if r.name.startswith("apr_") and r.name.endswith(".json") and r.is_file()
                ]
        except OSError:
            continue
    return sorted(Path(path) for path in found)


def encode_approval(approval: Approval) -> bytes:
    """The bytes of ``approval``'s record."""
    return json.dumps(approval.to_json(), ensure_ascii=False).encode("utf-8")


def write_approval(approval: Approval) -> bytes:
    """Write ``approval`` to its file (``approval.path``) atomically and return the bytes
    written; raises :class:`ConversationStorageError` naming the file."""
    path = approval.path
    data = encode_approval(approval)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc
    return data


def read_rows(state_dir: Path, approval_id: str | None = None) -> list[JsonObject]:
    """The records of every agent under ``state_dir`` as stored (without their ``v``), or
    of ``approval_id`` only, in the order of their paths; a record being replaced right now,
    or damaged, is left out (its agent logs the latter)."""
    rows = []
    for path in record_files_under(state_dir, approval_id):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and isinstance(data.get("approvalId"), str):
            data.pop("v", None)
            rows.append(data)
    return rows


def record_files_under(state_dir: Path, approval_id: str | None = None) -> list[Path]:
    """``agents/*/instances/*/approvals/<id>.json`` under ``state_dir`` (every ``apr_*``
    record when ``approval_id`` is ``None``), sorted."""
    name = f"{approval_id}.json" if approval_id is not None else "apr_*.json"
    return sorted((state_dir / "agents").glob(f"*/instances/*/{DIRECTORY}/{name}"))
