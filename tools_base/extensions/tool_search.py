"""``tool-search``: offer the model a search tool instead of a long tool list.

Registers the tool ``toolName`` (parameters: ``query`` string, required; ``limit`` integer).
A ``step`` layer then narrows every Step's catalog to: the search tool, the tools the last
search selected, and the agent's ``requiredTools``. The search is a case-insensitive substring
match over the names and descriptions of the tools the Step would otherwise have offered; it
returns up to ``limit`` (at most ``maxResults``) matches ``[{name, description}]`` and selects
them, so they are offered from the next Step on. Until a first search, only the search tool
(and the required tools) is offered.

With ``persistSelection`` the selection is kept in the extension's state for the conversation
(so it survives restarts); without it, it lasts until the end of the Turn.

Config:

- ``toolName`` (``tool-search__search``): the search tool's full name.
- ``maxResults`` (10): most matches one search returns and selects.
- ``minQueryLength`` (1): a shorter query is refused with ``E_TOOL_SEARCH_QUERY``.
- ``persistSelection`` (true): keep the selection across Turns.

Example::

    extensions:
      - ref: { kind: Extension, name: tool-search, package: "@goondan/base" }
        config: { maxResults: 5 }
"""

from __future__ import annotations

from typing import Any

from goondan.errors import ToolCode
from tools_base import ExtensionApi, ExtensionError, JsonValue, ToolContext, ToolError
from tools_base.extensions._common import config_bool, config_int, config_str


def register(api: ExtensionApi) -> None:
    """Register the search tool and the narrowing ``step`` layer."""
    tool_name = config_str(api.config, "toolName", "tool-search__search")
    max_results = config_int(api.config, "maxResults", 10, minimum=1)
    min_query = config_int(api.config, "minQueryLength", 1, minimum=1)
    persist = config_bool(api.config, "persistSelection", True)
    if api.tools.has(tool_name):
        raise ExtensionError(f"a tool named {tool_name!r} already exists; set config.toolName")
    required = set(api.agent.required_tools)
    snapshots: dict[str, list[tuple[str, str]]] = {}
    """instance key → (name, description) of what the current Step would offer."""
    turn_selections: dict[tuple[str, str], list[str]] = {}
    """(instance key, turn id) → selection, when it is not persisted."""

    def selection(instance_key: str, turn_id: str) -> list[str]:
        if persist:
            state = api.state.get() or {}
            selected = state.get("selected")
            return [s for s in selected if isinstance(s, str)] if isinstance(selected, list) else []
        return turn_selections.get((instance_key, turn_id), [])

    async def search(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        query = str(args.get("query", "")).strip()
        if len(query) < min_query:
            raise ToolError(
                f"query must be at least {min_query} characters",
                code=ToolCode.E_TOOL_SEARCH_QUERY,
                suggestion="Search with a word from the tool's name or purpose.",
            )
        limit = args.get("limit")
        count = min(limit, max_results) if isinstance(limit, int) and limit > 0 else max_results
        needle = query.lower()
        found = [
            (name, description)
            for name, description in snapshots.get(ctx.instance_key, [])
            if needle in name.lower() or needle in description.lower()
        ][:count]
        matches: list[JsonValue] = [{"name": n, "description": d} for n, d in found]
        selected: list[JsonValue] = [n for n, _ in found]
        if persist:
            api.state.set({"selected": selected, "query": query})
        else:
            turn_selections[(ctx.instance_key, ctx.turn_id)] = [str(s) for s in selected]
        return {
            "matches": matches,
            "selected": selected,
            "note": "The selected tools can be called from the next step.",
        }

    async def narrow(ctx: Any) -> Any:
        offered = [t for t in ctx.tool_catalog if t.name != tool_name]
        snapshots[ctx.instance_key] = [(t.name, t.description or "") for t in offered]
        keep = {tool_name, *required, *selection(ctx.instance_key, ctx.turn_id)}
        ctx.tool_catalog[:] = [t for t in ctx.tool_catalog if t.name in keep]
        try:
            return await ctx.next()
        finally:
            if not persist and ctx.step_index == 0:
                # forget selections of finished Turns of this instance
                for key in [k for k in turn_selections if k[0] == ctx.instance_key]:
                    if key[1] != ctx.turn_id:
                        del turn_selections[key]

    api.tools.register(
        {
            "name": tool_name,
            "description": (
                "Find tools by a word in their name or description; the matches become "
                "callable from the next step."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Word(s) to look for."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Most matches."},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
        search,
    )
    api.pipeline.register("step", narrow)
