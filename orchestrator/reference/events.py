"""``reference/events.md``: every runtime event type the event log holds and ``/v1/events``
streams, from the typed declarations in :mod:`ipc.runtime_events`: its family, what it means
and the fields it may carry."""

from __future__ import annotations

import ast
import inspect
import itertools
import typing

import msgspec

from ipc.runtime_events import EventType, RuntimeEvent
from ipc.runtime_events import types as event_types
from ipc.runtime_events.reading import TypedEvent
from orchestrator.reference.markdown import table

COMMON = {f.encode_name for f in msgspec.structs.fields(RuntimeEvent)}
"""The fields every event has (``timestamp``, ``agentName``, the trace ids)."""


def events_page() -> str:
    """The page: the fields every event has, then a section per family with a row per type."""
    parts = [
        "# Runtime events\n\n",
        "Every event type of the event log (`.goondan/runtime-events.jsonl`), `/v1/events`, "
        "`logs` and the studio, generated from their declarations. Each is one JSON object "
        "whose `type` names it; fields not set are absent. Every event has "
        + ", ".join(f"`{name}`" for name in sorted(COMMON))
        + ".\n",
    ]
    families: dict[type, list[type[RuntimeEvent]]] = {}
    for event in typing.get_args(TypedEvent):
        family = next(
            base
            for base in event.__mro__[1:]
            if base is RuntimeEvent or RuntimeEvent in base.__mro__
        )
        families.setdefault(family, []).append(event)
    for family, events in families.items():
        title = family.__name__.removesuffix("Event") or "Other"
        if family is RuntimeEvent:
            title = "Other"
        parts.append(f"\n## {title} events\n\n")
        if family is not RuntimeEvent:
            parts.append(_text(family) + "\n\n")
        rows = [(f"`{_tag(event)}`", _text(event), _fields(event)) for event in events]
        parts.append(table(("type", "meaning", "fields"), rows))
    typed = {_tag(event) for event in typing.get_args(TypedEvent)}
    said = _member_docstrings()
    others = [t for t in EventType if t.value not in typed and t is not EventType.EVENTLOG_OPENED]
    if others:
        parts.append("\n## Types that are not logged\n\n")
        parts.append("Types of what a Turn is started with; no line of the log has them.\n\n")
        names = [(f"`{t.value}`", said.get(t.name, "")) for t in others]
        parts.append(table(("type", "meaning"), names))
    return "".join(parts)


def _member_docstrings() -> dict[str, str]:
    """The docstring under each member of :class:`EventType`, by member name."""
    tree = ast.parse(inspect.getsource(event_types))
    said: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == EventType.__name__:
            body = node.body
            for member, text in itertools.pairwise(body):
                if (
                    isinstance(member, ast.Assign)
                    and isinstance(member.targets[0], ast.Name)
                    and isinstance(text, ast.Expr)
                    and isinstance(text.value, ast.Constant)
                ):
                    said[member.targets[0].id] = " ".join(str(text.value.value).split())
    return said


def _tag(event: type[RuntimeEvent]) -> str:
    return str(event.__struct_config__.tag)


def _text(cls: type) -> str:
    return " ".join((inspect.getdoc(cls) or "").replace("``", "`").split())


def _fields(event: type[RuntimeEvent]) -> str:
    own = [f.encode_name for f in msgspec.structs.fields(event) if f.encode_name not in COMMON]
    return ", ".join(f"`{name}`" for name in own)
