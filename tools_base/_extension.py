"""The Extension SDK: what an extension's ``register(api)`` gets.

An Extension resource names a Python module with a ``register`` function::

    def register(api: ExtensionApi) -> None:          # or register(api, config); may be async
        async def timing(ctx):                          # a toolCall middleware
            started = time.perf_counter()
            result = await ctx.next()
            api.logger.info("tool", name=ctx.tool_name, ms=(time.perf_counter() - started) * 1000)
            return result

        api.pipeline.register("toolCall", timing)

Extensions are registered once per AgentProcess, in ``Agent.spec.extensions`` order, before the
agent reports ready; a failing ``register`` stops the agent from booting (``E_EXT_LOAD`` when
there is no ``register``, ``E_EXT_INIT`` when importing or registering raised).

What middleware sees is documented on the contexts: ``turn`` (``input``, ``inbound``, ``messages``,
``emit_message_event``, ``runtime``, ``metadata``), ``step`` (``turn_id``, ``step_index``,
``messages``, ``emit_message_event``, mutable ``tool_catalog``, ``metadata``,
``turn_metadata``) and ``toolCall`` (``tool_name``, ``tool_call_id``, mutable ``args``,
``metadata``, ``runtime``). ``await ctx.next()`` runs the inner layers; not calling it
short-circuits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from goondan.errors import ConfigError
from tools_base._context import ToolHandler, ToolLogger
from tools_base._json import JsonObject
from tools_base._result import DEFAULT_ERROR_MESSAGE_LIMIT


class ExtensionError(ConfigError, ValueError):
    """An extension used the API wrongly (a bad tool item, a non-object state, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentInfo:
    """The agent an extension runs in, read-only."""

    name: str
    swarm_name: str
    system_prompt: str | None
    tools: tuple[str, ...]
    """Full names of ``Agent.spec.tools``: the start of every Step's catalog."""
    required_tools: tuple[str, ...]
    agents: tuple[str, ...]
    """Every agent of the Swarm."""


class ExtensionPipeline(Protocol):
    """Where middleware is registered."""

    def register(
        self, kind: str, middleware: Callable[[Any], Awaitable[Any]], *, priority: int = 0
    ) -> None:
        """Add ``middleware`` to the ``turn``, ``step`` or ``toolCall`` onion.

        A lower ``priority`` is an outer layer; equal priorities keep registration order, so
        extensions declared first wrap those declared later.
        """
        ...


class ExtensionTools(Protocol):
    """Dynamic tools: registered here, they join every later Step's catalog."""

    def register(
        self,
        item: Mapping[str, Any],
        handler: ToolHandler,
        *,
        timeout_seconds: float | None = None,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
    ) -> str:
        """Register ``{name, description?, parameters?, source?}``; returns the full name.

        ``name`` must be ``{resource}__{export}``; ``source`` defaults to
        ``{type: "extension", name: <extension>}``. Handlers follow the Tool SDK. Raises
        :class:`ExtensionError` on a bad or duplicate name.
        """
        ...

    def has(self, name: str) -> bool:
        """Whether the process already has a tool called ``name``."""
        ...

    def list(self) -> Sequence[Any]:
        """The catalog item of every tool in the registry: the agent's own, dynamic ones and
        every other Tool of the bundle (loaded on first call).

        A step middleware offers one the agent does not list by appending its item to
        ``ctx.tool_catalog``, which also allows the call.
        """
        ...


class ExtensionState(Protocol):
    """A JSON object per extension and conversation instance, kept on disk across restarts.

    Only available while a Turn runs (inside middleware and tool handlers), because each
    conversation instance has its own; saved when the Turn ends, and only if it changed.
    """

    def get(self) -> JsonObject | None:
        """The current instance's state, or ``None`` when nothing was ever set."""
        ...

    def set(self, value: JsonObject) -> None:
        """Replace the current instance's state; raises :class:`ExtensionError` unless
        ``value`` is a JSON object."""
        ...


class ExtensionEvents(Protocol):
    """A small event bus shared by the extensions of one agent process."""

    def on(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """Call ``handler(*args)`` on every ``emit(name, ...)``; returns the unsubscribe."""
        ...

    def emit(self, name: str, *args: Any) -> None:
        """Call the handlers of ``name`` in subscription order; a failing handler is logged."""
        ...


class ExtensionApi(Protocol):
    """What ``register(api)`` receives."""

    @property
    def name(self) -> str:
        """The Extension resource's name."""
        ...

    @property
    def config(self) -> JsonObject:
        """``Extension.spec.config`` with the agent reference's ``config`` over it."""
        ...

    @property
    def agent(self) -> AgentInfo:
        """The agent this process serves."""
        ...

    @property
    def pipeline(self) -> ExtensionPipeline:
        """Middleware registration."""
        ...

    @property
    def tools(self) -> ExtensionTools:
        """Dynamic tool registration."""
        ...

    @property
    def state(self) -> ExtensionState:
        """Persistent per-instance state."""
        ...

    @property
    def events(self) -> ExtensionEvents:
        """The process's extension event bus."""
        ...

    @property
    def logger(self) -> ToolLogger:
        """A structured logger bound to the agent and the extension."""
        ...

    def on_stop(self, callback: Callable[[], Awaitable[None] | None]) -> None:
        """Call ``callback`` when the agent process stops (release servers, files, ...)."""
        ...
