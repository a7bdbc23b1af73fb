"""Conversations on disk, read for display: ``base.jsonl`` plus the events not yet folded.

The format is the agents' (see the module docstring of the agent's conversation store): the
base holds a header, messages, and appended fold segments, each announcing how many messages
follow (a segment cut short is ignored, its messages are still in ``events.jsonl``); the events
file holds ``append``/``replace``/``remove``/``truncate`` events numbered by ``seq``, of which
those up to the base's ``foldedSeq`` are already in it. This reader never writes and never
raises for a torn or malformed line: it shows what can be read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from goondan.usage import Usage
from orchestrator.state_dir import list_instances

MAX_MESSAGES = 5_000
"""Newest messages of one conversation the studio shows."""


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a torn last line, or garbage: skipped as the agent skips it
        if isinstance(data, dict):
            yield data


def _is_message(data: dict[str, Any]) -> bool:
    return isinstance(data.get("id"), str) and data.get("role") in (
        "system",
        "user",
        "assistant",
        "tool",
    )


def read_messages(conversation_dir: Path) -> list[dict[str, Any]]:
    """The messages of one conversation directory, in order, as persisted."""
    messages: list[dict[str, Any]] = []
    folded_seq = 0
    segment: list[dict[str, Any]] | None = None
    expected = segment_seq = 0
    for data in _lines(conversation_dir / "base.jsonl"):
        kind = data.get("kind")
        if kind in ("header", "fold"):
            segment = None  # a segment cut short by a new one: dropped
        if kind == "header":
            seq = data.get("foldedSeq")
            folded_seq = seq if isinstance(seq, int) else 0
            continue
        if kind == "fold":
            count, seq = data.get("count"), data.get("foldedSeq")
            if isinstance(count, int) and isinstance(seq, int) and count >= 0:
                segment, expected, segment_seq = [], count, seq
            else:
                segment = None
        elif _is_message(data):
            if segment is None:
                messages.append(data)
                continue
            segment.append(data)
        if segment is not None and len(segment) == expected:
            messages.extend(segment)
            folded_seq = max(folded_seq, segment_seq)
            segment = None
    for data in _lines(conversation_dir / "events.jsonl"):
        seq = data.get("seq")
        if not isinstance(seq, int) or seq <= folded_seq:
            continue
        kind, message, target = data.get("type"), data.get("message"), data.get("targetId")
        if kind == "append" and isinstance(message, dict) and _is_message(message):
            messages.append(message)
        elif kind == "truncate":
            messages.clear()
        elif kind in ("replace", "remove") and isinstance(target, str):
            position = next((i for i, m in enumerate(messages) if m.get("id") == target), None)
            if position is None:
                continue
            if kind == "remove":
                del messages[position]
            elif isinstance(message, dict) and _is_message(message):
                messages[position] = message
    return messages[-MAX_MESSAGES:]


def instance_usage(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """What an instance's model calls ever used, as its agent keeps it in ``metadata.json``
    (``{inputTokens, outputTokens, totalTokens, cost, calls}``); ``None`` before any call."""
    usage = metadata.get("usage")
    return Usage.from_json(usage).to_json() if isinstance(usage, dict) else None


def _row(metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "agent": metadata.get("agentName"),
        "instanceKey": metadata.get("instanceKey"),
        "status": metadata.get("status"),
        "createdAt": metadata.get("createdAt"),
        "updatedAt": metadata.get("updatedAt"),
        "usage": instance_usage(metadata),
    }


def instances(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    """Every conversation instance on disk (per agent, by key), without file paths."""
    rows = []
    for row in list_instances(state_dir, agent):
        name, key = row.get("agentName"), row.get("instanceKey")
        if not isinstance(name, str) or not isinstance(key, str):
            continue
        rows.append(_row(row))
    rows.sort(key=lambda r: (r["agent"], r["instanceKey"]))
    return rows


def conversation(state_dir: Path, agent: str, key: str) -> dict[str, Any] | None:
    """``agent``'s instance ``key``: its row (as :func:`instances` gives it) and its
    ``messages``; ``None`` when there is no such instance."""
    for row in list_instances(state_dir, agent):
        if row.get("instanceKey") == key:  # list_instances kept only agent's rows
            messages = read_messages(Path(row["directory"]) / "conversation")
            return {**_row(row), "messages": messages}
    return None
