"""Tool names as the model sees them: ``{resource}__{export}``."""

from __future__ import annotations

from typing import NamedTuple

SEPARATOR = "__"


class ToolName(NamedTuple):
    """A full tool name split into its parts."""

    resource: str
    """``metadata.name`` of the Tool resource (or the extension's namespace)."""
    export: str
    """Name of one export of that Tool."""

    def __str__(self) -> str:
        return f"{self.resource}{SEPARATOR}{self.export}"


def parse_tool_name(full_name: str) -> ToolName | None:
    """Split ``full_name`` at the first ``__``; ``None`` when it has none.

    Either side may come back empty or (on the export side) hold another ``__``; use
    :func:`is_valid_tool_name` to check the whole name against the naming rules.
    """
    resource, sep, export = full_name.partition(SEPARATOR)
    if not sep:
        return None
    return ToolName(resource, export)


def build_tool_name(resource: str, export: str) -> str:
    """Join a resource and an export name; raises ``ValueError`` if either breaks the rules."""
    for part, what in ((resource, "resource"), (export, "export")):
        if not part:
            raise ValueError(f"tool {what} name must not be empty")
        if SEPARATOR in part:
            raise ValueError(f"tool {what} name {part!r} must not contain {SEPARATOR!r}")
    return f"{resource}{SEPARATOR}{export}"


def is_valid_tool_name(full_name: str) -> bool:
    """True when ``full_name`` is ``resource__export`` with both parts non-empty and no extra ``__``."""
    parsed = parse_tool_name(full_name)
    return (
        parsed is not None
        and bool(parsed.resource)
        and bool(parsed.export)
        and SEPARATOR not in parsed.export
    )
