"""Tool Registry: every tool handler an AgentProcess can run (seed 000 §1.1, §10).

Entries come from the bundle's Tool resources and from extensions (``api.tools.register``).
An entry is immutable once registered, and a name can be registered only once: an extension
can wrap a tool with ``toolCall`` middleware, but never swap its handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.naming import is_valid_tool_name
from agent_process.tools.schema import ArgsValidator, compile_args_validator
from tools_base import DEFAULT_ERROR_MESSAGE_LIMIT, ToolHandler, is_nonblocking


class ToolRegistrationError(ValueError):
    """A tool could not be registered: bad name, duplicate name, or a handler that isn't callable."""


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A registry entry: the catalog item, its handler, and how to run it."""

    item: ToolCatalogItem
    handler: ToolHandler
    validator: ArgsValidator
    """Compiled from ``item.parameters`` once, at registration."""
    error_message_limit: int
    """Characters kept of an error message (``Tool.spec.errorMessageLimit``)."""
    timeout_seconds: float | None
    """Handler timeout for this tool; ``None`` uses the executor's default."""
    is_coroutine: bool
    """The handler is a coroutine function: awaited on the loop."""
    runs_inline: bool
    """A sync handler marked ``@nonblocking``: called on the loop without a thread hop."""

    @property
    def name(self) -> str:
        """The full tool name."""
        return self.item.name

    @property
    def source(self) -> ToolSource | None:
        """Where the tool comes from."""
        return self.item.source


class ToolRegistry:
    """Name → :class:`RegisteredTool`, in registration order."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def register(
        self,
        item: ToolCatalogItem,
        handler: ToolHandler,
        *,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
        timeout_seconds: float | None = None,
    ) -> RegisteredTool:
        """Add a tool; raises :class:`ToolRegistrationError` on a bad or duplicate name."""
        if not is_valid_tool_name(item.name):
            raise ToolRegistrationError(
                f"invalid tool name {item.name!r}: expected '<resource>__<export>' with both "
                "parts non-empty and no other '__'"
            )
        if item.name in self._tools:
            raise ToolRegistrationError(f"tool already registered: {item.name!r}")
        if not callable(handler):
            raise ToolRegistrationError(f"handler of {item.name!r} is not callable")
        if error_message_limit < 1:
            raise ToolRegistrationError(
                f"errorMessageLimit of {item.name!r} must be positive, got {error_message_limit}"
            )
        is_coroutine = _is_coroutine_callable(handler)
        entry = RegisteredTool(
            item=item,
            handler=handler,
            validator=compile_args_validator(item.parameters),
            error_message_limit=error_message_limit,
            timeout_seconds=timeout_seconds,
            is_coroutine=is_coroutine,
            runs_inline=not is_coroutine and is_nonblocking(handler),
        )
        self._tools[item.name] = entry
        return entry

    def get(self, name: str) -> RegisteredTool | None:
        """The entry for ``name``, or ``None``."""
        return self._tools.get(name)

    def dynamic_tools(self) -> Iterator[RegisteredTool]:
        """Entries that did not come from Tool resources (extensions, MCP), in order."""
        return (t for t in self._tools.values() if t.source is None or t.source.type != "config")

    def names(self) -> list[str]:
        """Every registered name, in registration order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[RegisteredTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def _is_coroutine_callable(handler: Any) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)
