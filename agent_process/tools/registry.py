"""Tool Registry: every tool handler an AgentProcess can run.

Entries come from the bundle's Tool resources and from extensions (``api.tools.register``).
An entry is immutable once registered, and a name can be registered only once: an extension
can wrap a tool with ``toolCall`` middleware, but never swap its handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.naming import is_valid_tool_name
from agent_process.tools.schema import ArgsValidator, compile_args_validator
from goondan.errors import ConfigError, ToolCode, ToolFailure
from tools_base import DEFAULT_ERROR_MESSAGE_LIMIT, ToolHandler, is_nonblocking


class ToolRegistrationError(ConfigError, ValueError):
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


HandlerLoader = Callable[[], Mapping[str, ToolHandler]]
"""Loads a Tool resource's handlers (export name → handler); may raise."""


@dataclass(frozen=True, slots=True)
class _LoadedTool:
    """A tool whose handler is loaded and checked, its entry not built yet."""

    item: ToolCatalogItem
    handler: ToolHandler
    error_message_limit: int
    timeout_seconds: float | None


@dataclass(frozen=True, slots=True)
class _DeferredTool:
    """Exports of one Tool resource whose module is not loaded yet."""

    items: tuple[tuple[str, ToolCatalogItem], ...]
    """(export name, catalog item) per export."""
    load: HandlerLoader
    error_message_limit: int
    timeout_seconds: float | None

    def item(self, name: str) -> ToolCatalogItem:
        return next(item for _, item in self.items if item.name == name)


class ToolRegistry:
    """Name → :class:`RegisteredTool`, in registration order.

    Tools registered with :meth:`register_deferred` are in the registry from the start (their
    names and catalog items are known) but their module is imported on the first :meth:`get`
    of one of their names, so a bundle's many Tools cost an agent nothing until it calls them.
    Tools added with :meth:`register_loaded` have their handler checked at once but their
    entry, argument validator included, built on their first :meth:`get`: an agent pays for
    compiling the schemas of the tools it calls, when it first calls them, not for all of
    them at its start.
    """

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._loaded: dict[str, _LoadedTool] = {}
        self._order: dict[str, None] = {}
        """Names of built and loaded entries, in registration order."""
        self._deferred: dict[str, _DeferredTool] = {}

    def register(
        self,
        item: ToolCatalogItem,
        handler: ToolHandler,
        *,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
        timeout_seconds: float | None = None,
    ) -> RegisteredTool:
        """Add a tool; raises :class:`ToolRegistrationError` on a bad or duplicate name."""
        loaded = self._check(item, handler, error_message_limit, timeout_seconds)
        self._order[item.name] = None
        return self._build(loaded)

    def register_loaded(
        self,
        item: ToolCatalogItem,
        handler: ToolHandler,
        *,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
        timeout_seconds: float | None = None,
    ) -> None:
        """Add a tool as :meth:`register` does (same checks, same errors, same place in the
        order), building its entry on its first :meth:`get`."""
        loaded = self._check(item, handler, error_message_limit, timeout_seconds)
        self._loaded[item.name] = loaded
        self._order[item.name] = None

    def _check(
        self,
        item: ToolCatalogItem,
        handler: ToolHandler,
        error_message_limit: int,
        timeout_seconds: float | None,
    ) -> _LoadedTool:
        if not is_valid_tool_name(item.name):
            raise ToolRegistrationError(
                f"invalid tool name {item.name!r}: expected '<resource>__<export>' with both "
                "parts non-empty and no other '__'"
            )
        if item.name in self._tools or item.name in self._loaded:
            raise ToolRegistrationError(f"tool already registered: {item.name!r}")
        # A tool registered now (an extension's, say) outranks a bundle Tool the agent does
        # not list and never loaded.
        self._deferred.pop(item.name, None)
        if not callable(handler):
            raise ToolRegistrationError(f"handler of {item.name!r} is not callable")
        if error_message_limit < 1:
            raise ToolRegistrationError(
                f"errorMessageLimit of {item.name!r} must be positive, got {error_message_limit}"
            )
        return _LoadedTool(item, handler, error_message_limit, timeout_seconds)

    def _build(self, loaded: _LoadedTool) -> RegisteredTool:
        handler = loaded.handler
        is_coroutine = _is_coroutine_callable(handler)
        entry = RegisteredTool(
            item=loaded.item,
            handler=handler,
            validator=compile_args_validator(loaded.item.parameters),
            error_message_limit=loaded.error_message_limit,
            timeout_seconds=loaded.timeout_seconds,
            is_coroutine=is_coroutine,
            runs_inline=not is_coroutine and is_nonblocking(handler),
        )
        self._tools[loaded.item.name] = entry
        return entry

    def register_deferred(
        self,
        items: Sequence[tuple[str, ToolCatalogItem]],
        load: HandlerLoader,
        *,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
        timeout_seconds: float | None = None,
    ) -> None:
        """Add the exports of one Tool resource, to be loaded by ``load`` on first use.

        ``items`` pairs each export name with its catalog item. Names already registered are
        skipped: a tool loaded at boot, or registered by an extension, keeps its name.
        """
        free = tuple((export, item) for export, item in items if item.name not in self)
        if not free:
            return
        for _, item in free:
            if not is_valid_tool_name(item.name):
                raise ToolRegistrationError(f"invalid tool name {item.name!r}")
        deferred = _DeferredTool(free, load, error_message_limit, timeout_seconds)
        for _, item in free:
            self._deferred[item.name] = deferred

    def get(self, name: str) -> RegisteredTool | None:
        """The entry for ``name`` (loading its Tool's module, or building its entry, on first
        use), or ``None``."""
        tool = self._tools.get(name)
        if tool is None:
            loaded = self._loaded.pop(name, None)
            if loaded is not None:
                return self._build(loaded)
            if name in self._deferred:
                self._load(self._deferred[name])
                tool = self._tools.get(name)
        return tool

    def item(self, name: str) -> ToolCatalogItem | None:
        """The catalog item of ``name``, without loading anything."""
        tool = self._tools.get(name) or self._loaded.get(name)
        if tool is not None:
            return tool.item
        deferred = self._deferred.get(name)
        return deferred.item(name) if deferred is not None else None

    def items(self) -> list[ToolCatalogItem]:
        """The catalog item of every tool, loaded or not: what step middleware may offer."""
        loaded = [self._entry_item(name) for name in self._order]
        return loaded + [d.item(name) for name, d in self._deferred.items()]

    def _entry_item(self, name: str) -> ToolCatalogItem:
        tool = self._tools.get(name) or self._loaded[name]
        return tool.item

    def dynamic_tools(self) -> Iterator[RegisteredTool]:
        """Entries that did not come from Tool resources (extensions, MCP), in order."""
        return (t for t in self._tools.values() if t.source is None or t.source.type != "config")

    def names(self) -> list[str]:
        """Every registered name: loaded ones in registration order, then deferred ones."""
        return [*self._order, *self._deferred]

    def _load(self, deferred: _DeferredTool) -> None:
        """Import a deferred Tool; a module that fails gives handlers that report why."""
        try:
            handlers: Mapping[str, ToolHandler] = deferred.load()
            problem = None
        except BaseException as exc:  # an import may even sys.exit(): report it, do not die
            handlers, problem = {}, f"{type(exc).__name__}: {exc}"
        for export, item in deferred.items:
            self._deferred.pop(item.name, None)
            handler = handlers.get(export)
            if handler is None or not callable(handler):
                reason = problem or f"the module has no handler for export {export!r}"
                handler = _unavailable(item.name, reason)
            self.register(
                item,
                handler,
                error_message_limit=deferred.error_message_limit,
                timeout_seconds=deferred.timeout_seconds,
            )

    def __contains__(self, name: object) -> bool:
        return name in self._order or name in self._deferred

    def __iter__(self) -> Iterator[RegisteredTool]:
        """The loaded entries, in registration order (deferred ones are listed by
        :meth:`items`); iterating builds the entries not built yet."""
        for name in list(self._order):
            tool = self.get(name)
            if tool is not None:
                yield tool

    def __len__(self) -> int:
        return len(self._order) + len(self._deferred)


class ToolUnavailable(ToolFailure):
    """A Tool of the bundle whose handlers could not be loaded when it was first called."""

    code = ToolCode.E_TOOL_LOAD_FAILED


def _unavailable(name: str, reason: str) -> ToolHandler:
    def unavailable(ctx: Any, args: Any) -> None:
        raise ToolUnavailable(f"Tool {name!r} cannot be loaded: {reason}")

    return unavailable


def _is_coroutine_callable(handler: Any) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)
