"""The execution context handed to every tool handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar

from goondan.errors import ConfigError
from tools_base._json import JsonObject, JsonValue
from tools_base._message import Message
from tools_base._pinned import PinnedDir
from tools_base._result import PendingResult
from tools_base._runtime import AgentToolRuntime


class ToolLogger(Protocol):
    """The logging surface a tool may rely on (a structlog bound logger satisfies it)."""

    def debug(self, event: str, /, **fields: Any) -> Any: ...
    def info(self, event: str, /, **fields: Any) -> Any: ...
    def warning(self, event: str, /, **fields: Any) -> Any: ...
    def error(self, event: str, /, **fields: Any) -> Any: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Everything a handler gets besides its input, and nothing else.

    Immutable: a handler cannot change what later calls see.
    """

    agent_name: str
    """Name of the Agent resource running the tool."""
    instance_key: str
    """Conversation instance of that agent (``"default"`` unless the caller chose one)."""
    turn_id: str
    """Id of the current Turn."""
    trace_id: str
    """32-hex trace id, kept across every handoff of one causal chain."""
    tool_call_id: str
    """Id of this call, as chosen by the model."""
    message: Message
    """The assistant message that holds this call."""
    workdir: Path
    """The instance workspace; file-system tools resolve relative paths against it."""
    logger: ToolLogger
    """Structured logger bound to agent, instance, trace and tool call."""
    runtime: AgentToolRuntime | None = None
    """Inter-agent API; ``None`` where no Orchestrator is attached (unit tests, plain scripts)."""
    inbound: Mapping[str, str] = field(default_factory=dict)
    """Properties of the outside event that started the Turn, for a Turn a Connection started
    (``connection_name``, ``connector_name`` and the connector's own, such as ``chat_id``);
    empty otherwise. The chat tools answer the chat the Turn came from by them."""
    workdir_pin: PinnedDir | None = None
    """``workdir`` opened once when the instance loaded; tools that touch it use this
    descriptor, verified at each call (``None`` where no runtime pinned it: then the workdir is
    opened per call)."""


ToolOutput: TypeAlias = "JsonValue | PendingResult"
"""What a handler may return: a JSON value, or a :class:`PendingResult`."""

ToolHandler: TypeAlias = Callable[[ToolContext, JsonObject], "ToolOutput | Awaitable[ToolOutput]"]
"""``handler(ctx, input) -> JsonValue | Awaitable[JsonValue]``.

Coroutine functions are awaited on the agent's event loop; plain functions run in a worker
thread so they cannot stall it, unless marked :func:`nonblocking`.
"""

ToolConfigure: TypeAlias = Callable[[JsonObject], Mapping[str, ToolHandler]]
"""Optional ``configure(config) -> handlers`` of an entry module, for Tools that take config."""

_HandlerT = TypeVar("_HandlerT", bound=Callable[..., Any])

NONBLOCKING_ATTR = "__goondan_nonblocking__"


def nonblocking(handler: _HandlerT) -> _HandlerT:
    """Mark a sync handler as quick and non-blocking, so it runs on the event loop.

    Use it for pure CPU-light handlers (string and JSON manipulation); it saves the thread hop
    a plain sync handler pays. Never use it on a handler that does I/O or may take long.
    """
    setattr(handler, NONBLOCKING_ATTR, True)
    return handler


def is_nonblocking(handler: Callable[..., Any]) -> bool:
    """Whether :func:`nonblocking` marked ``handler``."""
    return bool(getattr(handler, NONBLOCKING_ATTR, False))


class ToolConfigError(ConfigError, ValueError):
    """Raised by an entry module's ``configure(config)`` when the Tool's config is invalid."""
