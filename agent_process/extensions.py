"""Extensions inside an AgentProcess: loading, the ``api`` they get, and their state on disk.

Each ``Agent.spec.extensions`` entry is loaded once, when the process boots, in declared order:
its module is imported and ``register(api)`` (or ``register(api, config)``, sync or async) is
called. Middleware registered by an extension declared earlier wraps that of later ones.

State is per extension *and* conversation instance, as upstream keeps it: ``api.state`` reads
and writes the state of the instance whose Turn is running (a context variable set by the
outermost ``turn`` layer), and changed states are written when that Turn ends::

    agents/<agent>/instances/<instance-dir>/extensions/<extension>.json
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agent_process.tools.catalog import McpSource, ToolCatalogItem, ToolSource
from agent_process.tools.middleware import MiddlewareError, MiddlewarePipeline
from agent_process.tools.registry import ToolRegistrationError, ToolRegistry
from bundle.entry import load_entry_module
from bundle.plan import ExtensionPlan
from goondan.errors import ConfigCode, ConfigError
from goondan.files import write_atomic
from tools_base import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    AgentInfo,
    ExtensionError,
    JsonObject,
    ToolHandler,
    ToolLogger,
)

STOP_CALLBACK_TIMEOUT_SECONDS = 5.0
_OUTERMOST = -(2**62)
"""Priority of the host's own ``turn`` layer, outside every extension's."""


class ExtensionLoadError(ConfigError):
    """An extension could not be loaded: ``E_EXT_LOAD`` (no ``register``) or ``E_EXT_INIT``."""

    def __init__(self, extension: str, message: str, *, code: str) -> None:
        super().__init__(f"Extension/{extension}: {message} ({code})")
        self.extension = extension
        self.code = code


# -- state ---------------------------------------------------------------------------------


class InstanceStates:
    """The extension states of one conversation instance: read lazily, written when changed."""

    def __init__(self, directory: Path, logger: Any) -> None:
        self.directory = directory
        self._values: dict[str, JsonObject | None] = {}
        self._dirty: set[str] = set()
        self._log = logger

    def get(self, extension: str) -> JsonObject | None:
        """A copy of ``extension``'s state (so an edit without ``set`` changes nothing)."""
        if extension not in self._values:
            self._values[extension] = self._read(extension)
        value = self._values[extension]
        return copy.deepcopy(value) if value is not None else None

    def set(self, extension: str, value: JsonObject) -> None:
        """Replace ``extension``'s state; checked to be a JSON object now, not at save time."""
        if not isinstance(value, dict):
            raise ExtensionError(
                f"extension state must be a JSON object, got {type(value).__name__}"
            )
        try:
            encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ExtensionError(f"extension state is not JSON: {exc}") from exc
        if extension in self._values and self._values[extension] == value:
            return
        self._values[extension] = json.loads(encoded)
        self._dirty.add(extension)

    def save(self) -> None:
        """Write every changed state, each with :func:`goondan.files.write_atomic`."""
        for extension in sorted(self._dirty):
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{extension}.json"
            data = json.dumps(self._values[extension], ensure_ascii=False, indent=2)
            write_atomic(path, data.encode("utf-8"))
        self._dirty.clear()

    def _read(self, extension: str) -> JsonObject | None:
        path = self.directory / f"{extension}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._log.warning("unreadable extension state ignored", path=str(path), error=str(exc))
            return None
        return data if isinstance(data, dict) else None


_current_states: contextvars.ContextVar[InstanceStates | None] = contextvars.ContextVar(
    "goondan_extension_states", default=None
)


# -- the api -------------------------------------------------------------------------------


class _Pipeline:
    def __init__(self, pipeline: MiddlewarePipeline) -> None:
        self._pipeline = pipeline

    def register(
        self, kind: str, middleware: Callable[[Any], Awaitable[Any]], *, priority: int = 0
    ) -> None:
        try:
            self._pipeline.register(kind, middleware, priority=priority)
        except MiddlewareError as exc:
            raise ExtensionError(str(exc)) from exc


class _Tools:
    def __init__(self, registry: ToolRegistry, extension: str) -> None:
        self._registry = registry
        self._extension = extension

    def register(
        self,
        item: Mapping[str, Any] | ToolCatalogItem,
        handler: ToolHandler,
        *,
        timeout_seconds: float | None = None,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
    ) -> str:
        catalog_item = item if isinstance(item, ToolCatalogItem) else self._item(item)
        try:
            self._registry.register(
                catalog_item,
                handler,
                error_message_limit=error_message_limit,
                timeout_seconds=timeout_seconds,
            )
        except ToolRegistrationError as exc:
            raise ExtensionError(str(exc)) from exc
        return catalog_item.name

    def has(self, name: str) -> bool:
        return name in self._registry

    def list(self) -> list[ToolCatalogItem]:
        return self._registry.items()

    def _item(self, item: Mapping[str, Any]) -> ToolCatalogItem:
        name = item.get("name")
        if not isinstance(name, str):
            raise ExtensionError(f"a tool item needs a string `name`, got {name!r}")
        description = item.get("description")
        parameters = item.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ExtensionError(f"`parameters` of {name!r} must be a JSON Schema object")
        return ToolCatalogItem(
            name=name,
            description=description if isinstance(description, str) else None,
            parameters=parameters,
            source=self._source(item.get("source")),
        )

    def _source(self, source: Any) -> ToolSource:
        if not isinstance(source, Mapping) or source.get("type") != "mcp":
            return ToolSource(type="extension", name=self._extension)
        mcp: Mapping[str, Any] = found if isinstance(found := source.get("mcp"), Mapping) else {}
        server = mcp.get("serverName")
        return ToolSource(
            type="mcp",
            name=str(source.get("name") or self._extension),
            mcp=McpSource(
                extension_name=str(mcp.get("extensionName") or self._extension),
                server_name=server if isinstance(server, str) else None,
            ),
        )


class _State:
    def __init__(self, extension: str) -> None:
        self._extension = extension

    def _states(self) -> InstanceStates:
        states = _current_states.get()
        if states is None:
            raise ExtensionError(
                f"state of extension {self._extension!r} belongs to a conversation instance: "
                "use it inside middleware or tool handlers, while a Turn runs"
            )
        return states

    def get(self) -> JsonObject | None:
        return self._states().get(self._extension)

    def set(self, value: JsonObject) -> None:
        self._states().set(self._extension, value)


class EventBus:
    """Synchronous fan-out shared by the extensions of one process."""

    def __init__(self, logger: Any) -> None:
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self._log = logger

    def on(self, name: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe; the returned function unsubscribes (twice is harmless)."""
        handlers = self._handlers.setdefault(name, [])
        handlers.append(handler)

        def unsubscribe() -> None:
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def emit(self, name: str, *args: Any) -> None:
        """Call every handler of ``name``; one that raises is logged and the rest still run."""
        for handler in list(self._handlers.get(name, ())):
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    _keep(asyncio.ensure_future(result))
            except Exception:
                self._log.exception("extension event handler failed", event_name=name)


_background: set[asyncio.Future[Any]] = set()


def _keep(future: asyncio.Future[Any]) -> None:
    _background.add(future)
    future.add_done_callback(_background.discard)


@dataclass(eq=False)
class ExtensionApiImpl:
    """The object ``register(api)`` receives (the :class:`tools_base.ExtensionApi` protocol)."""

    name: str
    config: JsonObject
    agent: AgentInfo
    pipeline: _Pipeline
    tools: _Tools
    state: _State
    events: EventBus
    logger: ToolLogger
    stop_callbacks: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)

    def on_stop(self, callback: Callable[[], Awaitable[None] | None]) -> None:
        """Call ``callback`` when the agent process stops."""
        if not callable(callback):
            raise ExtensionError(f"on_stop needs a callable, got {callback!r}")
        self.stop_callbacks.append(callback)


# -- the host ------------------------------------------------------------------------------


class ExtensionHost:
    """Loads an agent's extensions and runs what they leave behind (state, stop callbacks)."""

    def __init__(
        self,
        *,
        agent: AgentInfo,
        pipeline: MiddlewarePipeline,
        registry: ToolRegistry,
        logger: Any = None,
    ) -> None:
        self.agent = agent
        self._pipeline = pipeline
        self._registry = registry
        self._log = logger if logger is not None else structlog.get_logger("goondan.extensions")
        self.events = EventBus(self._log)
        self.loaded: list[ExtensionApiImpl] = []
        self._states: dict[Path, InstanceStates] = {}

    async def load(self, plans: Sequence[ExtensionPlan]) -> None:
        """Import and register every extension in order; raises :class:`ExtensionLoadError`."""
        if plans:
            # Outside every extension: bind the running instance's state, save it afterwards.
            self._pipeline.register("turn", self._state_layer, priority=_OUTERMOST)
        for plan in plans:
            await self._load_one(plan)

    async def _load_one(self, plan: ExtensionPlan) -> None:
        try:
            module = load_entry_module(Path(plan.entry_path))
        except Exception as exc:
            raise ExtensionLoadError(
                plan.name, f"cannot import {plan.entry_path}: {exc}", code=ConfigCode.E_EXT_INIT
            ) from exc
        register = getattr(module, "register", None)
        if not callable(register):
            raise ExtensionLoadError(
                plan.name,
                f"{plan.entry_path} has no `register(api)` function",
                code=ConfigCode.E_EXT_LOAD,
            )
        api = ExtensionApiImpl(
            name=plan.name,
            config=copy.deepcopy(plan.config),
            agent=self.agent,
            pipeline=_Pipeline(self._pipeline),
            tools=_Tools(self._registry, plan.name),
            state=_State(plan.name),
            events=self.events,
            logger=self._log.bind(extension=plan.name),
        )
        try:
            outcome = register(*_register_args(register, api))
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            self.loaded.append(api)  # its stop callbacks still run
            raise ExtensionLoadError(
                plan.name,
                f"register failed: {type(exc).__name__}: {exc}",
                code=ConfigCode.E_EXT_INIT,
            ) from exc
        self.loaded.append(api)
        self._log.info("extension registered", extension=plan.name)

    async def _state_layer(self, ctx: Any) -> Any:
        directory = Path(ctx.store.directory).parent / "extensions"
        states = self._states.get(directory)
        if states is None:
            states = self._states[directory] = InstanceStates(directory, self._log)
        token = _current_states.set(states)
        try:
            return await ctx.next()
        finally:
            _current_states.reset(token)
            try:
                states.save()
            except OSError as exc:
                self._log.error("extension state not saved", error=str(exc))

    def forget_instance(self, conversation_directory: Path) -> None:
        """Drop the cached states of a deleted instance."""
        self._states.pop(conversation_directory.parent / "extensions", None)

    async def aclose(self) -> None:
        """Run the stop callbacks (last registered first), each bounded, none fatal."""
        for api in reversed(self.loaded):
            for callback in reversed(api.stop_callbacks):
                try:
                    async with asyncio.timeout(STOP_CALLBACK_TIMEOUT_SECONDS):
                        outcome = callback()
                        if inspect.isawaitable(outcome):
                            await outcome
                except Exception as exc:
                    self._log.warning(
                        "extension stop callback failed", extension=api.name, error=repr(exc)
                    )


def _register_args(register: Callable[..., Any], api: ExtensionApiImpl) -> tuple[Any, ...]:
    """``(api,)`` or ``(api, config)``, as the function's signature asks (upstream passes both)."""
    try:
        parameters = inspect.signature(register).parameters.values()
    except (TypeError, ValueError):
        return (api,)
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return (api, api.config) if varargs or len(positional) >= 2 else (api,)
