"""Middleware pipelines: ``turn``, ``step`` and ``toolCall`` onions (seed 000 §6).

Every middleware is ``async def mw(ctx) -> Result`` and continues inward with
``await ctx.next()``::

    async def timing(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        started = time.perf_counter()        # before next(): may change ctx.args
        result = await ctx.next()            # the inner layers and the tool itself
        log.info("tool", ms=(time.perf_counter() - started) * 1000)
        return result                        # after next(): may replace the result

Returning without calling ``next()`` short-circuits the call (a refusal or a cached answer).
The one ordering trap: whatever a middleware changes after ``next()`` returns cannot undo a side
effect the tool already had; refuse *before* ``next()``.

Registration follows upstream: ``pipeline.register(kind, fn, priority=0)``; a lower priority is
an outer layer, and equal priorities keep registration order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from agent_process.tools.catalog import ToolCatalogItem
from tools_base import AgentToolRuntime, JsonObject, JsonValue, Message, ToolCallResult

MiddlewareKind = Literal["turn", "step", "toolCall"]
MIDDLEWARE_KINDS: tuple[MiddlewareKind, ...] = ("turn", "step", "toolCall")

ResultT = TypeVar("ResultT")
CtxT = TypeVar("CtxT", bound="MiddlewareContext[Any]")


class MiddlewareError(RuntimeError):
    """Misuse of the pipeline: an unknown kind, or ``next()`` called from the core."""


class MiddlewareContext(Generic[ResultT]):
    """Base of every middleware context: the onion's ``next()``.

    One context object travels through all layers of one call, so a change to a mutable field
    (``args``, ``metadata``, ``tool_catalog``) is seen by every inner layer.
    """

    __slots__ = ("_chain", "_core", "_position")

    def __init__(
        self,
        chain: tuple[Callable[[Any], Awaitable[ResultT]], ...],
        core: Callable[[Any], Awaitable[ResultT]],
    ) -> None:
        self._chain = chain
        self._core = core
        self._position = 0

    async def next(self) -> ResultT:
        """Run the next inner layer (or the core) and return its result."""
        position = self._position
        chain = self._chain
        if position > len(chain):
            raise MiddlewareError("next() is not available inside the core handler")
        self._position = position + 1
        try:
            if position == len(chain):
                return await self._core(self)
            return await chain[position](self)
        finally:
            # Restoring lets a layer call next() again (a retry) and keeps outer layers' view.
            self._position = position


class ToolCallMiddlewareContext(MiddlewareContext[ToolCallResult]):
    """Context of a ``toolCall`` middleware (seed 000 §6.3)."""

    __slots__ = (
        "agent_name",
        "args",
        "instance_key",
        "message",
        "metadata",
        "runtime",
        "step_index",
        "tool_call_id",
        "tool_name",
        "trace_id",
        "turn_id",
    )

    def __init__(
        self,
        chain: tuple[Callable[[Any], Awaitable[ToolCallResult]], ...],
        core: Callable[[Any], Awaitable[ToolCallResult]],
        *,
        tool_name: str,
        tool_call_id: str,
        args: JsonObject,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        step_index: int,
        message: Message,
        runtime: AgentToolRuntime | None,
    ) -> None:
        super().__init__(chain, core)
        self.tool_name = tool_name
        """Full name of the called tool (read-only by convention)."""
        self.tool_call_id = tool_call_id
        """The model's call id (read-only by convention)."""
        self.args = args
        """Arguments; replace or edit them before ``next()`` to change what the tool gets."""
        self.metadata: dict[str, JsonValue] = {}
        """Scratch space shared by the layers of this call."""
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.step_index = step_index
        self.message = message
        """The assistant message that holds the call."""
        self.runtime = runtime


class StepMiddlewareContext(MiddlewareContext[ResultT]):
    """Context of a ``step`` middleware: the Step's mutable ``tool_catalog`` and metadata.

    The Turn/Step loop fills in the result type and adds its own fields; the catalog rules are
    the Tool system's part (seed 000 §1.2 rule 3, §10.3).
    """

    __slots__ = (
        "agent_name",
        "instance_key",
        "metadata",
        "step_index",
        "tool_catalog",
        "trace_id",
        "turn_id",
    )

    def __init__(
        self,
        chain: tuple[Callable[[Any], Awaitable[ResultT]], ...],
        core: Callable[[Any], Awaitable[ResultT]],
        *,
        tool_catalog: list[ToolCatalogItem],
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        step_index: int,
    ) -> None:
        super().__init__(chain, core)
        self.tool_catalog = tool_catalog
        """What the model will be offered this Step, and the executor's allowlist. Mutable."""
        self.metadata: dict[str, JsonValue] = {}
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.step_index = step_index


Middleware = Callable[[CtxT], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _Registration:
    priority: int
    order: int
    fn: Callable[[Any], Awaitable[Any]]


class MiddlewarePipeline:
    """The registered middleware of one agent, per kind."""

    def __init__(self) -> None:
        self._registrations: dict[MiddlewareKind, list[_Registration]] = {
            kind: [] for kind in MIDDLEWARE_KINDS
        }
        self._chains: dict[MiddlewareKind, tuple[Callable[[Any], Awaitable[Any]], ...]] = (
            dict.fromkeys(MIDDLEWARE_KINDS, ())
        )
        self._count = 0

    def register(
        self, kind: str, middleware: Callable[[Any], Awaitable[Any]], *, priority: int = 0
    ) -> None:
        """Add ``middleware`` to the ``kind`` chain (``turn``, ``step`` or ``toolCall``)."""
        if kind not in self._registrations:
            raise MiddlewareError(
                f"unknown middleware kind {kind!r}; expected one of {list(MIDDLEWARE_KINDS)}"
            )
        if not callable(middleware):
            raise MiddlewareError(f"{kind} middleware must be callable, got {middleware!r}")
        typed_kind: MiddlewareKind = kind
        self._count += 1
        registrations = self._registrations[typed_kind]
        registrations.append(_Registration(priority, self._count, middleware))
        registrations.sort(key=lambda r: (r.priority, r.order))
        self._chains[typed_kind] = tuple(r.fn for r in registrations)

    def chain(self, kind: MiddlewareKind) -> tuple[Callable[[Any], Awaitable[Any]], ...]:
        """The ``kind`` middleware from outermost to innermost."""
        return self._chains[kind]
