"""Conversations on disk, read for display (the format and its reader are
:mod:`goondan.state_files.conversation`'s); and the instances they belong to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goondan.state_files import conversation as conversation_files
from goondan.usage import Usage
from orchestrator.metadata_rows import MetadataRow, metadata_row
from orchestrator.state_dir import list_instances

MAX_MESSAGES = 5_000
"""Newest messages of one conversation the studio shows."""


def read_messages(conversation_dir: Path) -> list[dict[str, Any]]:
    """The newest :data:`MAX_MESSAGES` messages of one conversation directory, in order, as
    persisted; never raises for a torn or malformed line: it shows what can be read."""
    return conversation_files.read_messages(conversation_dir)[-MAX_MESSAGES:]


def instance_usage(metadata: MetadataRow) -> dict[str, Any] | None:
    """What an instance's model calls ever used, as its agent keeps it in ``metadata.json``
    (``{inputTokens, outputTokens, totalTokens, cost, calls}``); ``None`` before any call."""
    usage = metadata.usage
    return Usage.from_json(usage).to_json() if isinstance(usage, dict) else None


def _row(metadata: MetadataRow) -> dict[str, Any]:
    return {
        "agent": metadata.agent_name,
        "instanceKey": metadata.instance_key,
        "status": metadata.status,
        "createdAt": metadata.created_at,
        "updatedAt": metadata.updated_at,
        "usage": instance_usage(metadata),
    }


def instances(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    """Every conversation instance on disk (per agent, by key), without file paths."""
    rows = []
    for row in map(metadata_row, list_instances(state_dir, agent)):
        if not isinstance(row.agent_name, str) or not isinstance(row.instance_key, str):
            continue
        rows.append(_row(row))
    rows.sort(key=lambda r: (r["agent"], r["instanceKey"]))
    return rows


def conversation(state_dir: Path, agent: str, key: str) -> dict[str, Any] | None:
    """``agent``'s instance ``key``: its row (as :func:`instances` gives it) and its
    ``messages``; ``None`` when there is no such instance."""
    for row in map(metadata_row, list_instances(state_dir, agent)):
        if row.instance_key == key:  # list_instances kept only agent's rows
            messages = read_messages(Path(row.directory) / "conversation")
            return {**_row(row), "messages": messages}
    return None
