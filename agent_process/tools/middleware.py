"""Middleware pipelines: ``turn``, ``step`` and ``toolCall`` onions.

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

Registration: ``pipeline.register(kind, fn, priority=0)``; a lower priority is an outer layer,
and equal priorities keep registration order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from agent_process.scope import StepScope, TurnScope
from agent_process.tools.catalog import ToolCatalogItem
from goondan.errors import GoondanError
from tools_base import AgentToolRuntime, JsonObject, JsonValue, Message, ToolCall, ToolCallResult

MiddlewareKind = Literal["turn", "step", "toolCall"]
MIDDLEWARE_KINDS: tuple[MiddlewareKind, ...] = ("turn", "step", "toolCall")

ResultT = TypeVar("ResultT")
CtxT = TypeVar("CtxT", bound="MiddlewareContext[Any]")

Layers: TypeAlias = tuple[Callable[[Any], Awaitable[ResultT]], ...]
"""One onion from outermost to innermost: the middleware of a kind, then the core."""


class MiddlewareError(GoondanError, RuntimeError):
    """Misuse of the pipeline: an unknown kind, or ``next()`` called from the core."""


class MiddlewareContext(Generic[ResultT]):
    """Base of every middleware context: the onion's ``next()``.

    One context object travels through all layers of one call, so a change to a mutable field
    (``args``, ``metadata``, ``tool_catalog``) is seen by every inner layer.
    """

    __slots__ = ("_layers", "_position")

    def __init__(
        self,
        chain: tuple[Callable[[Any], Awaitable[ResultT]], ...],
        core: Callable[[Any], Awaitable[ResultT]],
    ) -> None:
        self._layers: Layers[ResultT] = (*chain, core)
        self._position = 0

    async def next(self) -> ResultT:
        """Run the next inner layer (or the core) and return its result."""
        position = self._position
        try:
            layer = self._layers[position]
        except IndexError:  # only the core sits past the last layer
            raise MiddlewareError("next() is not available inside the core handler") from None
        self._position = position + 1
        try:
            return await layer(self)
        finally:
            # Restoring lets a layer call next() again (a retry) and keeps outer layers' view.
            self._position = position


class TurnIdentity:
    """The read-only identity of the Turn a context belongs to, for middleware authors."""

    __slots__ = ()

    @property
    def turn_scope(self) -> TurnScope:
        """The Turn's scope."""
        raise NotImplementedError

    @property
    def agent_name(self) -> str:
        """Name of the Agent resource running the Turn."""
        return self.turn_scope.agent_name

    @property
    def instance_key(self) -> str:
        """Conversation instance of that agent."""
        return self.turn_scope.instance_key

    @property
    def turn_id(self) -> str:
        """Id of the current Turn."""
        return self.turn_scope.turn_id

    @property
    def trace_id(self) -> str:
        """32-hex trace id of the causal chain."""
        return self.turn_scope.trace_id

    @property
    def runtime(self) -> AgentToolRuntime | None:
        """The ``agents`` runtime of this Turn (request, send, ...)."""
        return self.turn_scope.runtime


class StepIdentity(TurnIdentity):
    """:class:`TurnIdentity` plus the position of the Step, read from ``scope``."""

    __slots__ = ()
    scope: StepScope

    @property
    def turn_scope(self) -> TurnScope:
        """The scope of the Turn the Step belongs to."""
        return self.scope.turn

    @property
    def step_index(self) -> int:
        """Position of the current Step in its Turn, from 0."""
        return self.scope.index


class ToolCallMiddlewareContext(StepIdentity, MiddlewareContext[ToolCallResult]):
    """Context of a ``toolCall`` middleware.

    ``args`` and ``metadata`` are the layers' to change; the identity of the call (agent,
    instance, Turn, trace, Step) is read-only and comes from the Step's :class:`StepScope`.
    """

    __slots__ = (
        "args",
        "malformed_arguments",
        "message",
        "metadata",
        "scope",
        "tool_call_id",
        "tool_name",
    )

    def __init__(
        self, layers: Layers[ToolCallResult], scope: StepScope, call: ToolCall, message: Message
    ) -> None:
        # Built for every tool call, so kept cheap: positional arguments (a class called with
        # keywords packs them into a dict first), and the executor's onion (``toolCall``
        # middleware then the core) built once rather than by the base class per call.
        self._layers = layers
        self._position = 0
        self.scope = scope
        """The Step the call belongs to (and through it, the Turn); read-only by convention."""
        self.tool_name = call.name
        """Full name of the called tool (read-only by convention)."""
        self.tool_call_id = call.id
        """The model's call id (read-only by convention)."""
        self.args: JsonObject = dict(call.args)
        """Arguments (a copy of the model's); replace or edit them before ``next()`` to change
        what the tool gets."""
        self.malformed_arguments = call.malformed_arguments
        """The provider's argument text that did not parse as a JSON object (the call is then
        refused); a layer that repairs ``args`` sets it to ``None``."""
        self.metadata: dict[str, JsonValue] = {}
        """Scratch space shared by the layers of this call."""
        self.message = message
        """The assistant message that holds the call."""


class StepMiddlewareContext(StepIdentity, MiddlewareContext[ResultT]):
    """Context of a ``step`` middleware: the Step's mutable ``tool_catalog`` and metadata.

    The Turn/Step loop fills in the result type and adds its own fields; the catalog is the
    Tool system's part: whatever it holds when the model is called is also the allowlist the
    executor enforces for that Step's calls.
    """

    __slots__ = ("metadata", "scope", "tool_catalog")

    def __init__(
        self,
        chain: tuple[Callable[[Any], Awaitable[ResultT]], ...],
        core: Callable[[Any], Awaitable[ResultT]],
        *,
        scope: StepScope,
        tool_catalog: list[ToolCatalogItem],
    ) -> None:
        super().__init__(chain, core)
        self.scope = scope
        """The Step (and through it, the Turn); read-only by convention."""
        self.tool_catalog = tool_catalog
        """What the model will be offered this Step, and the executor's allowlist. Mutable."""
        self.metadata: dict[str, JsonValue] = {}


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
