"""Tool execution: the ``toolCall`` onion around catalog guard, validation and the handler.

``ToolExecutor.execute`` never raises for anything a tool, its arguments or a middleware did:
every failure becomes a :class:`ToolCallResult` with ``status="error"`` and a code the model
can act on. Only cancellation propagates.

Codes:

=======================  ============================================================
``E_TOOL_NOT_IN_CATALOG`` the name is not in this Step's catalog, whether or not a tool has it
``E_TOOL_NOT_FOUND``      a registry call (when the policy allows them) or a catalog entry names no tool
``E_TOOL_INVALID_ARGS``   the arguments fail the export's JSON Schema; the handler did not run
``E_TOOL_TIMEOUT``        the handler ran past its timeout (its own running time)
``E_TOOL_BUSY``           no tool thread became free within the call's timeout
``E_TOOL``                the handler raised anything, ``SystemExit`` and ``KeyboardInterrupt``
                          included (or the exception's own ``code``)
``E_TOOL_MIDDLEWARE``     a ``toolCall`` middleware raised, or returned something that is not a result
=======================  ============================================================
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import difflib
import functools
import math
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from structlog.typing import FilteringBoundLogger

from agent_process.scope import StepScope
from agent_process.tools.constructors import slot_constructor
from agent_process.tools.deadline import HandlerTimeout, may_await, with_deadline
from agent_process.tools.middleware import (
    Layers,
    MiddlewarePipeline,
    ToolCallMiddlewareContext,
)
from agent_process.tools.registry import RegisteredTool, ToolRegistry
from agent_process.tools.results import error_result, exception_result
from agent_process.tools.schema import format_issues
from goondan.defaults import MAX_BACKGROUND_CALLS_PER_INSTANCE, TOOL_TIMEOUT_SECONDS
from goondan.errors import TOOL, ToolCode
from ipc.protocol import DEFAULT_INSTANCE_KEY
from tools_base import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    JsonValue,
    Message,
    PendingResult,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolLogger,
)

DEFAULT_HANDLER_TIMEOUT_SECONDS = TOOL_TIMEOUT_SECONDS

NOT_IN_CATALOG_SUGGESTION = TOOL.suggestion(ToolCode.E_TOOL_NOT_IN_CATALOG) or ""


# Built on every call: the cheaper constructors (same arguments, same objects).
_new_tool_context = slot_constructor(ToolContext)
_new_result = slot_constructor(ToolCallResult)

DEFAULT_MAX_PENDING_CALLS = MAX_BACKGROUND_CALLS_PER_INSTANCE
TOOL_THREADS = 64
"""Threads that run sync handlers, per agent process. Idle threads cost next to nothing, and
many conversations each running one slow sync tool must not starve the others."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallPolicy:
    """How strictly the executor treats calls."""

    allow_registry_calls: bool = False
    """Let the model call registry tools missing from the catalog. A security decision: off."""
    default_timeout_seconds: float = DEFAULT_HANDLER_TIMEOUT_SECONDS
    """Handler timeout for tools that set no ``timeoutSeconds``."""
    max_pending_calls: int = DEFAULT_MAX_PENDING_CALLS
    """Calls of one instance that may run on in the background (answered ``pending``) at once;
    one more is refused with ``E_TOOL_TOO_MANY_PENDING`` and its background work cancelled."""


@dataclass(frozen=True, slots=True)
class PendingCompletion:
    """The late outcome of a call that answered ``pending``."""

    handle: str
    result: ToolCallResult
    """``ok`` with the completion's value, or ``error`` if it raised or timed out."""
    instance_key: str = DEFAULT_INSTANCE_KEY
    """The conversation instance whose call started the work."""


PendingListener = Callable[[PendingCompletion], None]


@dataclass(frozen=True, slots=True)
class PendingStart:
    """A call answered ``pending`` whose work now runs in the background."""

    handle: str
    tool_call_id: str
    tool_name: str
    instance_key: str


PendingStartListener = Callable[[PendingStart], None]


class ToolExecutor:
    """Runs tool calls for one agent process."""

    def __init__(
        self,
        registry: ToolRegistry,
        pipeline: MiddlewarePipeline | None = None,
        *,
        policy: ToolCallPolicy | None = None,
        on_pending_complete: PendingListener | None = None,
        on_pending_start: PendingStartListener | None = None,
        thread_pool: Executor | None = None,
    ) -> None:
        self.registry = registry
        self.pipeline = pipeline if pipeline is not None else MiddlewarePipeline()
        self.policy = policy if policy is not None else ToolCallPolicy()
        self._on_pending_complete = on_pending_complete
        self._on_pending_start = on_pending_start
        self._own_pool = thread_pool is None
        self._pool = thread_pool or ThreadPoolExecutor(
            max_workers=TOOL_THREADS, thread_name_prefix="goondan-tool"
        )
        self._pool_size = getattr(self._pool, "_max_workers", TOOL_THREADS)
        self._pending_tasks: set[asyncio.Task[None]] = set()
        self._pending_per_instance: Counter[str] = Counter()
        self._chain: Layers[ToolCallResult] = ()
        self._layers: Layers[ToolCallResult] = (self._core,)

    async def execute(self, call: ToolCall, scope: StepScope, message: Message) -> ToolCallResult:
        """Run one call through the ``toolCall`` middleware onion; never raises for tool faults.

        ``scope.allowlist`` is the Step's final catalog: a call outside it is refused.
        """
        ctx = ToolCallMiddlewareContext(self._onion(), scope, call, message)
        try:
            result = await ctx.next()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # nothing a middleware raises ends the agent
            return exception_result(
                call.id,
                call.name,
                exc,
                default_code=ToolCode.E_TOOL_MIDDLEWARE,
                limit=self._limit(call.name),
            )
        if not isinstance(result, ToolCallResult):
            return error_result(
                call.id,
                call.name,
                message=f"toolCall middleware returned {type(result).__name__}, not a ToolCallResult",
                code=ToolCode.E_TOOL_MIDDLEWARE,
                limit=self._limit(call.name),
            )
        return result

    def _onion(self) -> Layers[ToolCallResult]:
        """The ``toolCall`` middleware then the core, rebuilt only when a middleware registers."""
        chain = self.pipeline.chain("toolCall")
        if chain is not self._chain:
            self._chain = chain
            self._layers = (*chain, self._core)
        return self._layers

    async def aclose(self) -> None:
        """Cancel background completions of pending calls and release the worker threads."""
        for task in list(self._pending_tasks):
            task.cancel()
        if self._pending_tasks:
            await asyncio.gather(*self._pending_tasks, return_exceptions=True)
        if self._own_pool:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the core: catalog guard, lookup, validation, handler ---------------------------------

    async def _core(self, ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        tool = self.registry.get(ctx.tool_name)
        refusal = self._refusal(ctx, tool)
        if refusal is not None:
            return refusal
        assert tool is not None  # _refusal answers a call without a tool
        turn = ctx.scope.turn
        tool_ctx = _new_tool_context(
            agent_name=turn.agent_name,
            instance_key=turn.instance_key,
            turn_id=turn.turn_id,
            trace_id=turn.trace_id,
            tool_call_id=ctx.tool_call_id,
            message=ctx.message,
            workdir=turn.workdir,
            workdir_pin=turn.workdir_pin,
            logger=_CallLogger(turn.logger, ctx.tool_name, ctx.tool_call_id),
            runtime=turn.runtime,
            inbound=turn.inbound,
        )
        timeout = tool.timeout_seconds or self.policy.default_timeout_seconds
        args = ctx.args
        try:
            # The two kinds that run on the loop are called here rather than through a helper
            # coroutine: one frame less on every call.
            if tool.runs_inline:
                output = tool.handler(tool_ctx, args)  # cannot be interrupted: no deadline to arm
                if may_await(output):
                    output = await with_deadline(output, timeout)
            elif tool.is_coroutine:
                output = await with_deadline(tool.handler(tool_ctx, args), timeout)  # type: ignore[arg-type]
            else:
                output = await self._run_in_thread(tool, tool_ctx, args, timeout)
        except _PoolSaturated as busy:
            return _busy_result(ctx, tool, timeout, busy.threads)
        except HandlerTimeout:
            return _refused(
                ctx,
                tool,
                message=f"Tool {ctx.tool_name!r} did not finish within {_seconds(timeout)}.",
                code=ToolCode.E_TOOL_TIMEOUT,
                suggestion="Retry with a smaller task, or raise the Tool's timeoutSeconds.",
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # sys.exit() in a tool must not end the agent
            return exception_result(
                ctx.tool_call_id, ctx.tool_name, exc, limit=tool.error_message_limit
            )
        return self._to_result(ctx, tool, output, timeout)

    def _refusal(
        self, ctx: ToolCallMiddlewareContext, tool: RegisteredTool | None
    ) -> ToolCallResult | None:
        """The error answer of a call the handler must not see, or ``None`` to run it."""
        name = ctx.tool_name
        allowlist = ctx.scope.allowlist
        if name not in allowlist and not self.policy.allow_registry_calls:
            # Outside the catalog is outside, whether or not a tool has the name.
            return _refused(
                ctx,
                tool,
                message=f"Tool {name!r} is not available in the current Tool Catalog.",
                code=ToolCode.E_TOOL_NOT_IN_CATALOG,
                suggestion=_did_you_mean(name, allowlist) + NOT_IN_CATALOG_SUGGESTION,
            )
        if tool is None:
            return _not_found(ctx)
        args = ctx.args
        if not isinstance(args, dict):
            issues = [f"args: expected object but got {type(args).__name__}"]
        elif ctx.malformed_arguments is not None:  # the provider could not parse them
            issues = [f"args: not a JSON object: {ctx.malformed_arguments[:200]!r}"]
        else:
            issues = tool.validator.validate(args)
        if not issues:
            return None
        return _refused(
            ctx,
            tool,
            message=f"Invalid arguments for tool {name!r}: {format_issues(issues)}",
            code=ToolCode.E_TOOL_INVALID_ARGS,
            suggestion=tool.validator.suggestion(),
        )

    async def _run_in_thread(
        self, tool: RegisteredTool, tool_ctx: ToolContext, args: Any, seconds: float
    ) -> Any:
        loop = asyncio.get_running_loop()
        # copy_context() carries structlog's contextvars (agent, trace) into the thread. A
        # thread cannot be killed: on timeout the call fails and the thread's result is dropped.
        started: asyncio.Future[None] = loop.create_future()
        call = functools.partial(contextvars.copy_context().run, tool.handler, tool_ctx, args)

        def run() -> Any:
            loop.call_soon_threadsafe(_resolve, started)
            return call()

        work = loop.run_in_executor(self._pool, run)
        # The deadline counts the handler's own running time, not the wait for a free thread
        # (other conversations' slow tools); a wait as long as the deadline is an error of its own.
        try:
            await with_deadline(asyncio.shield(started), seconds)
        except HandlerTimeout:
            if work.cancel():
                raise _PoolSaturated(self._pool_size) from None
        output = await with_deadline(work, seconds)
        if may_await(output):
            output = await with_deadline(output, seconds)
        return output

    def _to_result(
        self, ctx: ToolCallMiddlewareContext, tool: RegisteredTool, output: Any, timeout: float
    ) -> ToolCallResult:
        if isinstance(output, PendingResult):
            if output.completion is not None:
                limit = self.policy.max_pending_calls
                if self._pending_per_instance[ctx.instance_key] >= limit:
                    _abandon(output.completion)
                    return _refused(
                        ctx,
                        tool,
                        message=(
                            f"{limit} calls of this conversation are still running in the "
                            f"background; {ctx.tool_name!r} was not started."
                        ),
                        code=ToolCode.E_TOOL_TOO_MANY_PENDING,
                        suggestion="Wait for the running calls to complete, then retry.",
                    )
                self._track_completion(ctx, tool, output, timeout)
            return _new_result(
                tool_call_id=ctx.tool_call_id,
                tool_name=ctx.tool_name,
                status="pending",
                handle=output.handle,
                output=to_json_value(output.output),
            )
        if isinstance(output, dict) and output.get("__async") is True and "handle" in output:
            # ``{__async: true, handle, ...}``: the pending shape of handlers written before PendingResult.
            rest = {k: v for k, v in output.items() if k not in ("__async", "handle")}
            return _new_result(
                tool_call_id=ctx.tool_call_id,
                tool_name=ctx.tool_name,
                status="pending",
                handle=str(output["handle"]),
                output=to_json_value(rest),
            )
        return _new_result(
            tool_call_id=ctx.tool_call_id,
            tool_name=ctx.tool_name,
            status="ok",
            output=to_json_value(output),
        )

    def _track_completion(
        self,
        ctx: ToolCallMiddlewareContext,
        tool: RegisteredTool,
        pending: PendingResult,
        timeout: float,
    ) -> None:
        call_id, name, handle = ctx.tool_call_id, ctx.tool_name, pending.handle
        instance_key = ctx.instance_key
        completion = pending.completion
        assert completion is not None

        async def wait_for_completion() -> None:
            try:
                async with asyncio.timeout(timeout):
                    value = await completion
                result = ToolCallResult(
                    tool_call_id=call_id, tool_name=name, status="ok", output=to_json_value(value)
                )
            except TimeoutError:
                result = error_result(
                    call_id,
                    name,
                    message=f"Pending work {handle!r} of {name!r} did not finish within {_seconds(timeout)}.",
                    code=ToolCode.E_TOOL_TIMEOUT,
                    limit=tool.error_message_limit,
                )
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # as for the handler itself
                result = exception_result(call_id, name, exc, limit=tool.error_message_limit)
            if self._on_pending_complete is not None:
                self._on_pending_complete(
                    PendingCompletion(handle=handle, result=result, instance_key=instance_key)
                )

        if self._on_pending_start is not None:
            self._on_pending_start(PendingStart(handle, call_id, name, instance_key))
        task = asyncio.get_running_loop().create_task(wait_for_completion())
        self._pending_tasks.add(task)
        self._pending_per_instance[instance_key] += 1

        def finished(done: asyncio.Task[None]) -> None:
            self._pending_tasks.discard(done)
            self._pending_per_instance[instance_key] -= 1
            if self._pending_per_instance[instance_key] <= 0:
                del self._pending_per_instance[instance_key]

        task.add_done_callback(finished)

    def _limit(self, name: str) -> int:
        tool = self.registry.get(name)
        return tool.error_message_limit if tool is not None else DEFAULT_ERROR_MESSAGE_LIMIT


class _PoolSaturated(Exception):
    """No tool thread became free within the call's deadline."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.threads = threads


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _refused(
    ctx: ToolCallMiddlewareContext,
    tool: RegisteredTool | None,
    *,
    message: str,
    code: str,
    suggestion: str | None,
) -> ToolCallResult:
    """The error answer to the call ``ctx`` of ``tool``, cut to that tool's message limit."""
    limit = tool.error_message_limit if tool is not None else DEFAULT_ERROR_MESSAGE_LIMIT
    return error_result(
        ctx.tool_call_id,
        ctx.tool_name,
        message=message,
        code=code,
        suggestion=suggestion,
        limit=limit,
    )


def _not_found(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
    name = ctx.tool_name
    allowlist = ctx.scope.allowlist
    available = ", ".join(sorted(allowlist)) or "(none)"
    return _refused(
        ctx,
        None,
        message=f"Tool {name!r} does not exist.",
        code=ToolCode.E_TOOL_NOT_FOUND,
        suggestion=f"{_did_you_mean(name, allowlist)}Call one of the available tools: {available}.",
    )


def _busy_result(
    ctx: ToolCallMiddlewareContext, tool: RegisteredTool, timeout: float, threads: int
) -> ToolCallResult:
    return _refused(
        ctx,
        tool,
        message=(
            f"Tool {ctx.tool_name!r} could not start within {_seconds(timeout)}: all "
            f"{threads} tool threads of this agent are busy with other calls."
        ),
        code=ToolCode.E_TOOL_BUSY,
        suggestion="Retry later; the agent is running many slow tools at once.",
    )


def _did_you_mean(name: str, catalog: frozenset[str]) -> str:
    close = difflib.get_close_matches(name, sorted(catalog), n=1)
    return f"Did you mean {close[0]!r}? " if close else ""


def _seconds(value: float) -> str:
    return f"{value:g} s"


_BaseLogger: TypeAlias = "ToolLogger | FilteringBoundLogger"
"""The Turn's structlog logger, or any ``ToolLogger``. mypy does not count structlog's
logger as a ``ToolLogger``: its methods name their first parameter ``event``, which a field
passed as ``event=`` would clash with."""


class _CallLogger:
    """The tool's logger: binds tool name and call id only when the tool actually logs."""

    __slots__ = ("_base", "_bound", "_call_id", "_tool")

    def __init__(self, base: _BaseLogger, tool: str, call_id: str) -> None:
        self._base = base
        self._tool = tool
        self._call_id = call_id
        self._bound: _BaseLogger | None = None

    def _logger(self) -> _BaseLogger:
        if self._bound is None:
            bind = getattr(self._base, "bind", None)
            self._bound = (
                bind(tool=self._tool, tool_call_id=self._call_id) if callable(bind) else self._base
            )
        return self._bound

    def debug(self, event: str, /, **fields: Any) -> Any:
        return self._logger().debug(event, **fields)

    def info(self, event: str, /, **fields: Any) -> Any:
        return self._logger().info(event, **fields)

    def warning(self, event: str, /, **fields: Any) -> Any:
        return self._logger().warning(event, **fields)

    def error(self, event: str, /, **fields: Any) -> Any:
        return self._logger().error(event, **fields)


_JSON_LEAVES = frozenset({str, int, bool, type(None)})
"""Types whose values are JSON as they are (exactly these: subclasses take the long way)."""


def to_json_value(value: Any) -> JsonValue:
    """Coerce a handler's return value into JSON.

    JSON values pass through; tuples and sets become lists, non-string keys strings,
    non-finite floats strings, dataclasses and pydantic models their fields, ``Path`` and any
    other object its ``str()``.
    """
    kind = type(value)
    if kind in _JSON_LEAVES:
        return cast(JsonValue, value)
    # The common outputs, a dict or list of plain values, without a call per plain item.
    if kind is dict:
        return _plain_dict(value)
    if kind is list:
        return [v if type(v) in _JSON_LEAVES else to_json_value(v) for v in value]
    return _coerce(value)


def _plain_dict(value: dict[Any, Any]) -> JsonValue:
    """A ``dict`` (exactly) with string keys, its plain values as they are."""
    out: dict[str, JsonValue] = {}
    for k, v in value.items():  # a loop costs less than a comprehension's own frame
        out[k if type(k) is str else str(k)] = v if type(v) in _JSON_LEAVES else to_json_value(v)
    return out


def _coerce(value: Any) -> JsonValue:
    """The long way of :func:`to_json_value`: subclasses of the leaves, floats, the rest."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _coerce_container(value)


def _coerce_container(value: Any) -> JsonValue:
    """Mappings with string keys, other collections as lists, anything else an object."""
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    return _coerce_object(value)


def _coerce_object(value: Any) -> JsonValue:
    """A dataclass or pydantic model as its fields, bytes as text, anything else its ``str()``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json_value(dataclasses.asdict(value))
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_json_value(dump(mode="json"))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _abandon(completion: Any) -> None:
    """Stop background work that will never be awaited (a refused pending call)."""
    if isinstance(completion, asyncio.Future):
        completion.cancel()
    elif asyncio.iscoroutine(completion):
        completion.close()
