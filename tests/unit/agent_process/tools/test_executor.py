"""Tool execution: catalog guard, validation, errors as results, timeouts, pending handles."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_process.tools.catalog import build_catalog, catalog_names
from agent_process.tools.executor import (
    NOT_IN_CATALOG_SUGGESTION,
    PendingCompletion,
    ToolCallPolicy,
    ToolExecutor,
    to_json_value,
)
from agent_process.tools.middleware import StepMiddlewareContext
from agent_process.tools.results import TOOL_FAILURE_SUGGESTION
from tests.support.tool_harness import ASSISTANT, Harness, item
from tools_base import (
    JsonObject,
    PendingResult,
    ToolCall,
    ToolContext,
    ToolError,
    nonblocking,
)


def echo(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return {"text": args["text"]}


# -- catalog guard --------------------------------------------------------------


async def test_call_outside_the_catalog_is_refused(harness: Harness) -> None:
    """A name outside the catalog is refused, with the result shape of every refusal."""
    ran: list[bool] = []
    harness.add("echo__say", lambda ctx, args: ran.append(True))
    harness.catalog = frozenset()
    result = await harness.call("echo__say")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "E_TOOL_NOT_IN_CATALOG"
    assert result.error.name == "ToolNotInCatalogError"
    assert result.error.message == "Tool 'echo__say' is not available in the current Tool Catalog."
    assert result.error.suggestion == NOT_IN_CATALOG_SUGGESTION
    assert ran == []


async def test_registry_calls_run_only_under_an_explicit_policy(tmp_path: Path) -> None:
    """Registry calls only with an explicit security policy."""
    harness = Harness(tmp_path, policy=ToolCallPolicy(allow_registry_calls=True))
    harness.add("echo__say", echo)
    harness.catalog = frozenset()
    result = await harness.call("echo__say", {"text": "x"})
    assert (result.status, result.output) == ("ok", {"text": "x"})
    await harness.executor.aclose()


async def test_an_unknown_name_is_not_in_the_catalog_with_a_hint(harness: Harness) -> None:
    """The example refuses an unknown name with E_TOOL_NOT_IN_CATALOG."""
    harness.add("echo__say", echo)
    result = await harness.call("echo__sya")
    assert result.error is not None
    assert result.error.code == "E_TOOL_NOT_IN_CATALOG"
    assert result.error.suggestion is not None
    assert "Did you mean 'echo__say'?" in result.error.suggestion


async def test_an_allowed_registry_call_to_an_unknown_name_is_not_found(tmp_path: Path) -> None:
    harness = Harness(tmp_path, policy=ToolCallPolicy(allow_registry_calls=True))
    harness.add("echo__say", echo)
    result = await harness.call("echo__sya")
    assert result.error is not None
    assert result.error.code == "E_TOOL_NOT_FOUND"
    assert "Did you mean 'echo__say'?" in (result.error.suggestion or "")
    await harness.executor.aclose()


async def test_catalog_entry_without_handler_is_not_found(harness: Harness) -> None:
    harness.catalog = frozenset({"ghost__tool"})
    result = await harness.call("ghost__tool")
    assert result.error is not None
    assert result.error.code == "E_TOOL_NOT_FOUND"


async def test_step_middleware_hiding_a_tool_makes_its_calls_refused(harness: Harness) -> None:
    """Step middleware edits ``toolCatalog``; the final list is enforced."""
    harness.add("echo__say", echo)
    harness.add("echo__other", echo)

    async def hide(ctx: StepMiddlewareContext[frozenset[str]]) -> frozenset[str]:
        ctx.tool_catalog[:] = [i for i in ctx.tool_catalog if i.name != "echo__other"]
        return await ctx.next()

    async def core(ctx: StepMiddlewareContext[frozenset[str]]) -> frozenset[str]:
        return catalog_names(ctx.tool_catalog)

    step = StepMiddlewareContext[frozenset[str]](
        (hide,),
        core,
        scope=harness.scope(),
        tool_catalog=build_catalog(harness.registry, ["echo__say", "echo__other"]),
    )
    harness.catalog = await step.next()
    assert (await harness.call("echo__say")).status == "ok"
    hidden = await harness.call("echo__other")
    assert hidden.error is not None
    assert hidden.error.code == "E_TOOL_NOT_IN_CATALOG"


# -- argument validation ------------------------------------------------------------------------


async def test_invalid_arguments_never_reach_the_handler(harness: Harness) -> None:
    ran: list[bool] = []
    harness.add("echo__say", lambda ctx, args: ran.append(True))
    result = await harness.call("echo__say", {"text": 3, "extra": True})
    assert result.error is not None
    assert result.error.code == "E_TOOL_INVALID_ARGS"
    assert result.error.name == "ToolInputValidationError"
    assert result.error.message == (
        "Invalid arguments for tool 'echo__say': args.text: expected string but got integer; "
        "args.extra: unexpected property"
    )
    assert "required=['text']" in (result.error.suggestion or "")
    assert ran == []


# -- handler failures become results --------------------------------------------


async def test_handler_exception_becomes_e_tool_named_after_its_type(harness: Harness) -> None:
    def boom(ctx: ToolContext, args: JsonObject) -> None:
        raise FileNotFoundError("no such file: a.txt")

    harness.add("echo__say", boom)
    result = await harness.call("echo__say")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.to_json() == {
        "message": "no such file: a.txt",
        "name": "FileNotFoundError",
        "code": "E_TOOL",
        "suggestion": TOOL_FAILURE_SUGGESTION,
        "helpUrl": "https://docs.goondan.ai/errors/E_TOOL",
    }


def _exit_3(ctx: ToolContext, args: JsonObject) -> None:
    sys.exit(3)


def _raise_system_exit(ctx: ToolContext, args: JsonObject) -> None:
    raise SystemExit("usage: tool [-h]")


def _interrupt(ctx: ToolContext, args: JsonObject) -> None:
    raise KeyboardInterrupt


class _Escape(BaseException):
    """A BaseException of a tool's own, which no Exception handler catches."""


def _escape(ctx: ToolContext, args: JsonObject) -> None:
    raise _Escape("out")


async def _async_exit(ctx: ToolContext, args: JsonObject) -> None:
    await asyncio.sleep(0)
    sys.exit(3)


async def _async_interrupt(ctx: ToolContext, args: JsonObject) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("handler", "mode", "name", "message"),
    [
        (_exit_3, "thread", "SystemExit", "the tool called sys.exit(3)"),
        (_exit_3, "inline", "SystemExit", "the tool called sys.exit(3)"),
        (_async_exit, "coroutine", "SystemExit", "the tool called sys.exit(3)"),
        (
            _raise_system_exit,
            "thread",
            "SystemExit",
            "the tool called sys.exit('usage: tool [-h]')",
        ),
        (_interrupt, "thread", "KeyboardInterrupt", "Unknown tool execution error"),
        (_interrupt, "inline", "KeyboardInterrupt", "Unknown tool execution error"),
        (_async_interrupt, "coroutine", "KeyboardInterrupt", "Unknown tool execution error"),
        (_escape, "thread", "_Escape", "out"),
    ],
)
async def test_exits_and_interrupts_in_any_handler_path_become_e_tool(
    harness: Harness, handler: Any, mode: str, name: str, message: str
) -> None:
    """A tool failure never propagates, not even sys.exit() (argparse, click)."""
    harness.add("echo__say", nonblocking(handler) if mode == "inline" else handler)
    result = await harness.call("echo__say")
    assert result.status == "error"
    assert result.error is not None
    assert (result.error.code, result.error.name, result.error.message) == ("E_TOOL", name, message)
    assert result.error.suggestion == TOOL_FAILURE_SUGGESTION
    # The executor still works afterwards.
    harness.add("echo__ok", echo)
    assert (await harness.call("echo__ok", {"text": "x"})).output == {"text": "x"}


async def test_a_middleware_that_exits_is_e_tool_middleware(harness: Harness) -> None:
    async def exiting(ctx: Any) -> Any:
        sys.exit(2)

    harness.pipeline.register("toolCall", exiting)
    harness.add("echo__say", echo)
    error = (await harness.call("echo__say")).error
    assert error is not None
    assert (error.code, error.name) == ("E_TOOL_MIDDLEWARE", "SystemExit")


async def test_cancellation_still_propagates(harness: Harness) -> None:
    started = asyncio.Event()

    async def wait_forever(ctx: ToolContext, args: JsonObject) -> None:
        started.set()
        await asyncio.Event().wait()

    harness.add("echo__say", wait_forever)
    task = asyncio.ensure_future(harness.call("echo__say"))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_tool_error_carries_code_suggestion_and_help_url(harness: Harness) -> None:
    async def refuse(ctx: ToolContext, args: JsonObject) -> None:
        raise ToolError(
            "channel not found",
            code="E_CHANNEL_NOT_FOUND",
            suggestion="List channels first.",
            help_url="https://x/y",
        )

    harness.add("echo__say", refuse)
    error = (await harness.call("echo__say")).error
    assert error is not None
    assert (error.code, error.name, error.suggestion, error.help_url) == (
        "E_CHANNEL_NOT_FOUND",
        "ToolError",
        "List channels first.",
        "https://x/y",
    )


async def test_an_exception_with_its_own_code_keeps_it(harness: Harness) -> None:
    class ApiError(Exception):
        code = "E_RATE_LIMITED"

    def fail(ctx: ToolContext, args: JsonObject) -> None:
        raise ApiError("slow down")

    harness.add("echo__say", fail)
    error = (await harness.call("echo__say")).error
    assert error is not None
    assert (error.code, error.name) == ("E_RATE_LIMITED", "ApiError")


async def test_an_empty_exception_message_is_replaced(harness: Harness) -> None:
    def fail(ctx: ToolContext, args: JsonObject) -> None:
        raise RuntimeError

    harness.add("echo__say", fail)
    error = (await harness.call("echo__say")).error
    assert error is not None
    assert error.message == "Unknown tool execution error"


@pytest.mark.parametrize(
    ("limit", "length", "expected_length", "suffix"),
    [
        (1000, 1000, 1000, False),  # at the limit: unchanged
        (1000, 5000, 1000, True),  # default limit
        (50, 51, 50, True),  # the Tool's own errorMessageLimit
        (10, 40, 10, False),  # a limit shorter than the suffix: plain slice
    ],
)
async def test_error_messages_are_cut_to_the_tools_limit(
    tmp_path: Path, limit: int, length: int, expected_length: int, suffix: bool
) -> None:
    """Keep ``limit - 15`` chars and append ``... (truncated)``."""
    harness = Harness(tmp_path)

    def fail(ctx: ToolContext, args: JsonObject) -> None:
        raise ValueError("x" * length)

    harness.add("echo__say", fail, error_message_limit=limit)
    error = (await harness.call("echo__say")).error
    assert error is not None
    assert len(error.message) == expected_length
    assert error.message.endswith("... (truncated)") is suffix
    if suffix:
        assert error.message == "x" * (limit - 15) + "... (truncated)"
    await harness.executor.aclose()


async def test_validation_errors_are_truncated_too(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.add("echo__say", echo, error_message_limit=40)
    error = (await harness.call("echo__say", {"text": 1})).error
    assert error is not None
    assert len(error.message) == 40
    assert error.message.endswith("... (truncated)")
    await harness.executor.aclose()


# -- how handlers run ---------------------------------------------------------------------------


async def test_sync_handlers_run_off_the_event_loop(harness: Harness) -> None:
    """A blocking sync handler runs in a worker thread; the loop keeps serving other tasks."""
    release = threading.Event()
    threads: list[str] = []

    def blocking(ctx: ToolContext, args: JsonObject) -> str:
        threads.append(threading.current_thread().name)
        assert release.wait(timeout=10)
        return "done"

    harness.add("echo__say", blocking)
    call = asyncio.ensure_future(harness.call("echo__say"))
    ticks = 0
    while ticks < 5:  # the loop must keep running while the handler blocks its thread
        await asyncio.sleep(0)
        ticks += 1
    assert not call.done()
    release.set()
    result = await asyncio.wait_for(call, timeout=10)
    assert result.output == "done"
    assert threads[0] != threading.current_thread().name
    assert threads[0].startswith("goondan-tool")


async def test_nonblocking_sync_handlers_run_on_the_loop_thread(harness: Harness) -> None:
    threads: list[str] = []

    @nonblocking
    def quick(ctx: ToolContext, args: JsonObject) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    harness.add("echo__say", quick)
    assert (await harness.call("echo__say")).output == "ok"
    assert threads == [threading.current_thread().name]


async def test_async_handlers_are_awaited(harness: Harness) -> None:
    async def later(ctx: ToolContext, args: JsonObject) -> JsonObject:
        await asyncio.sleep(0)
        return {"later": True}

    harness.add("echo__say", later)
    assert (await harness.call("echo__say")).output == {"later": True}


async def test_log_context_reaches_sync_handlers_in_threads(harness: Harness) -> None:
    seen: list[Any] = []

    def read_context(ctx: ToolContext, args: JsonObject) -> None:
        seen.append(structlog.contextvars.get_contextvars().get("trace_id"))

    harness.add("echo__say", read_context)
    with structlog.contextvars.bound_contextvars(trace_id="t-123"):
        await harness.call("echo__say")
    assert seen == ["t-123"]


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_handlers_past_their_timeout_fail_with_e_tool_timeout(
    harness: Harness, kind: str
) -> None:
    release = threading.Event()

    async def slow_async(ctx: ToolContext, args: JsonObject) -> None:
        await asyncio.Event().wait()

    def slow_thread(ctx: ToolContext, args: JsonObject) -> None:
        release.wait(timeout=10)

    harness.add("echo__say", slow_async if kind == "async" else slow_thread, timeout_seconds=0.05)
    result = await asyncio.wait_for(harness.call("echo__say"), timeout=10)
    release.set()
    assert result.error is not None
    assert result.error.code == "E_TOOL_TIMEOUT"
    assert result.error.name == "ToolTimeoutError"
    assert "0.05 s" in result.error.message


async def test_the_deadline_counts_from_the_start_of_the_call(harness: Harness) -> None:
    """A handler that holds the loop past its deadline is cut off at its first suspension."""

    async def slow_start(ctx: ToolContext, args: JsonObject) -> str:
        time.sleep(0.2)  # noqa: ASYNC251 - holds the loop, the part nothing can interrupt
        await asyncio.sleep(5)
        return "late"

    harness.add("echo__say", slow_start, timeout_seconds=0.05)
    result = await asyncio.wait_for(harness.call("echo__say"), timeout=10)
    assert result.error is not None  # cut off: never "late"
    assert result.error.code == "E_TOOL_TIMEOUT"


async def test_a_suspending_handler_gets_what_it_awaits_and_raises(harness: Harness) -> None:
    """Values, exceptions and a caught cancellation reach the handler across its suspensions."""
    loop = asyncio.get_running_loop()

    async def steps(ctx: ToolContext, args: JsonObject) -> JsonObject:
        await asyncio.sleep(0)
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(future.set_result, 7)
        value = await future
        failing: asyncio.Future[int] = loop.create_future()
        loop.call_soon(failing.set_exception, KeyError("k"))
        try:
            await failing
        except KeyError:
            caught = True
        if args.get("fail"):
            await asyncio.sleep(0)
            raise ValueError("after suspending")
        return {"value": value, "caught": caught}

    harness.add("echo__say", steps, parameters={"type": "object"})
    result = await harness.call("echo__say")
    assert (result.status, result.output) == ("ok", {"value": 7, "caught": True})
    failed = await harness.call("echo__say", {"fail": True})
    assert failed.error is not None
    assert (failed.error.code, failed.error.name) == ("E_TOOL", "ValueError")


async def test_cancelling_the_caller_is_not_swallowed(harness: Harness) -> None:
    """Only cancellation may leave the executor as an exception (a Turn being shut down)."""
    started = asyncio.Event()

    async def wait_forever(ctx: ToolContext, args: JsonObject) -> None:
        started.set()
        await asyncio.Event().wait()

    harness.add("echo__say", wait_forever)
    call = asyncio.ensure_future(harness.call("echo__say"))
    await asyncio.wait_for(started.wait(), timeout=10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_tool_context_holds_the_call_and_the_assistant_message(harness: Harness) -> None:
    """The context fields; rule 4: message is the assistant message."""
    contexts: list[ToolContext] = []

    def capture(ctx: ToolContext, args: JsonObject) -> None:
        contexts.append(ctx)
        ctx.logger.info("captured")

    harness.add("echo__say", capture)
    await harness.call("echo__say", call_id="call-9")
    [ctx] = contexts
    assert (ctx.agent_name, ctx.instance_key, ctx.turn_id, ctx.trace_id, ctx.tool_call_id) == (
        "tester",
        "default",
        "turn-1",
        "a" * 32,
        "call-9",
    )
    assert ctx.message is ASSISTANT
    assert ctx.message.role == "assistant"
    assert ctx.workdir == harness.workdir
    assert ctx.runtime is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.workdir = Path("/")  # type: ignore[misc]


def test_tool_context_has_no_bundle_or_oauth() -> None:
    """No swarmBundle, no oauth."""
    names = {f.name for f in dataclasses.fields(ToolContext)}
    assert names == {
        "agent_name",
        "instance_key",
        "turn_id",
        "trace_id",
        "tool_call_id",
        "message",
        "workdir",
        "logger",
        "runtime",
        "inbound",  # the connector event's properties, for a Turn a Connection started
        "workdir_pin",  # the workdir opened once: the tools work through it
    }


# -- pending handles -----------------------------------------------------------


async def test_pending_result_answers_now_and_completes_through_an_event(tmp_path: Path) -> None:
    completed: asyncio.Queue[PendingCompletion] = asyncio.Queue()
    harness = Harness(tmp_path)
    harness.executor = ToolExecutor(
        harness.registry, harness.pipeline, on_pending_complete=completed.put_nowait
    )
    finish = asyncio.Event()

    async def build() -> JsonObject:
        await finish.wait()
        return {"artifact": "app.tar"}

    async def start(ctx: ToolContext, args: JsonObject) -> PendingResult:
        return PendingResult(handle="build-1", output={"message": "started"}, completion=build())

    harness.add("echo__say", start)
    result = await harness.call("echo__say")
    assert (result.status, result.handle, result.output) == (
        "pending",
        "build-1",
        {"message": "started"},
    )
    assert result.to_json()["handle"] == "build-1"
    assert completed.empty()
    finish.set()
    done = await asyncio.wait_for(completed.get(), timeout=10)
    assert done.handle == "build-1"
    assert (done.result.status, done.result.output, done.result.tool_call_id) == (
        "ok",
        {"artifact": "app.tar"},
        "call-1",
    )
    await harness.executor.aclose()


async def test_failed_pending_work_completes_with_an_error(tmp_path: Path) -> None:
    completed: asyncio.Queue[PendingCompletion] = asyncio.Queue()
    harness = Harness(tmp_path)
    harness.executor = ToolExecutor(
        harness.registry, harness.pipeline, on_pending_complete=completed.put_nowait
    )

    async def broken() -> None:
        raise ToolError("build failed", code="E_BUILD")

    async def start(ctx: ToolContext, args: JsonObject) -> PendingResult:
        return PendingResult(handle="b2", completion=broken())

    harness.add("echo__say", start)
    assert (await harness.call("echo__say")).status == "pending"
    done = await asyncio.wait_for(completed.get(), timeout=10)
    assert done.result.error is not None
    assert (done.result.status, done.result.error.code) == ("error", "E_BUILD")
    await harness.executor.aclose()


async def test_background_calls_past_the_limit_are_refused_and_their_work_cancelled(
    tmp_path: Path,
) -> None:
    completed: asyncio.Queue[PendingCompletion] = asyncio.Queue()
    harness = Harness(tmp_path)
    harness.executor = ToolExecutor(
        harness.registry,
        harness.pipeline,
        policy=ToolCallPolicy(max_pending_calls=2),
        on_pending_complete=completed.put_nowait,
    )
    finish = asyncio.Event()
    works: list[asyncio.Task[None]] = []

    async def start(ctx: ToolContext, args: JsonObject) -> PendingResult:
        work = asyncio.ensure_future(finish.wait())
        works.append(work)  # type: ignore[arg-type]
        return PendingResult(handle=f"job-{len(works)}", completion=work)

    harness.add("echo__say", start)
    statuses = [(await harness.call("echo__say", call_id=f"c{i}")).status for i in range(2)]
    refused = await harness.call("echo__say", call_id="c3")
    assert statuses == ["pending", "pending"]
    assert refused.error is not None
    assert (refused.status, refused.error.code) == ("error", "E_TOOL_TOO_MANY_PENDING")
    await asyncio.sleep(0)
    assert works[2].cancelled()
    assert not works[0].done()
    finish.set()
    async with asyncio.timeout(10):
        await completed.get()
        await completed.get()
    await asyncio.sleep(0)  # the done-callbacks that free the slots run after the completion
    assert (await harness.call("echo__say", call_id="c4")).status == "pending"  # room again
    await harness.executor.aclose()


async def test_legacy_async_dict_is_a_pending_result(harness: Harness) -> None:
    """``{__async: true, handle, ...}``."""
    harness.add(
        "echo__say", lambda ctx, args: {"__async": True, "handle": "h-9", "message": "queued"}
    )
    result = await harness.call("echo__say")
    assert (result.status, result.handle, result.output) == (
        "pending",
        "h-9",
        {"message": "queued"},
    )


# -- outputs become JSON --------------------------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ((1, 2), [1, 2]),
        ({1: "a"}, {"1": "a"}),
        (math.inf, "inf"),
        (Path("/tmp/x"), "/tmp/x"),
        (Point(1, 2), {"x": 1, "y": 2}),
        (b"bytes", "bytes"),
        ({"nested": [{"t": (True, None)}]}, {"nested": [{"t": [True, None]}]}),
    ],
)
def test_outputs_are_coerced_to_json(value: Any, expected: Any) -> None:
    assert to_json_value(value) == expected


async def test_result_wire_form(harness: Harness) -> None:
    """ToolCallId, toolName, status, output."""
    harness.add("echo__say", echo)
    result = await harness.call("echo__say", {"text": "w"}, call_id="c-1")
    assert result.to_json() == {
        "toolCallId": "c-1",
        "toolName": "echo__say",
        "status": "ok",
        "output": {"text": "w"},
    }


async def test_executor_with_default_pipeline_and_policy(tmp_path: Path) -> None:
    from agent_process.tools.registry import ToolRegistry
    from tests.support.tool_harness import Harness as H

    registry = ToolRegistry()
    registry.register(item("echo__say"), echo)
    executor = ToolExecutor(registry)
    scope = H(tmp_path).scope()
    scope = dataclasses.replace(scope, allowlist=frozenset({"echo__say"}))
    result = await executor.execute(
        ToolCall(id="c", name="echo__say", args={"text": "q"}), scope, ASSISTANT
    )
    assert result.output == {"text": "q"}
    await executor.aclose()


async def test_arguments_a_provider_could_not_parse_are_refused(harness: Harness) -> None:
    """No silent ``{}``: unparsable arguments fail validation before the handler runs, even
    when the tool takes no required argument (so ``{}`` alone would pass)."""
    ran: list[bool] = []
    harness.add("echo__say", lambda ctx, args: ran.append(True))
    result = await harness.call("echo__say", {}, malformed_arguments="{not json")
    assert result.error is not None
    assert result.error.code == "E_TOOL_INVALID_ARGS"
    assert "not a JSON object: '{not json'" in result.error.message
    assert ran == []


async def test_arguments_that_only_look_like_the_old_marker_are_plain_arguments(
    harness: Harness,
) -> None:
    """A parse failure travels beside the arguments, never inside them: an argument named like
    a marker is the model's, validated like any other."""
    seen: list[object] = []
    open_schema = {"type": "object", "additionalProperties": True}
    harness.add("echo__say", lambda ctx, args: seen.append(args), parameters=open_schema)
    arguments = {"text": "hi", "__malformed_arguments__": "x"}
    result = await harness.call("echo__say", arguments)
    assert result.error is None
    assert seen == [arguments]


# -- the thread pool: a call's timeout counts its own running time ------------------------------


async def test_time_waiting_for_a_thread_does_not_count_against_the_timeout(
    tmp_path: Path,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    harness = Harness(tmp_path)
    harness.executor = ToolExecutor(harness.registry, harness.pipeline, thread_pool=pool)
    release = threading.Event()
    harness.add("slow__hold", lambda ctx, args: release.wait(10), timeout_seconds=30)
    harness.add("quick__run", lambda ctx, args: "ran", timeout_seconds=1.0)
    holding = asyncio.ensure_future(harness.call("slow__hold"))
    queued = asyncio.ensure_future(harness.call("quick__run", call_id="call-2"))
    await asyncio.sleep(0.6)  # the quick call has waited more than half its timeout for a thread
    release.set()
    result = await asyncio.wait_for(queued, 5)
    assert (result.status, result.output) == ("ok", "ran")  # not E_TOOL_TIMEOUT
    await asyncio.wait_for(holding, 5)
    pool.shutdown()


async def test_a_call_that_gets_no_thread_in_time_is_busy_not_timed_out(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    harness = Harness(tmp_path)
    harness.executor = ToolExecutor(harness.registry, harness.pipeline, thread_pool=pool)
    release, holds = threading.Event(), threading.Event()
    ran: list[bool] = []

    def hold(ctx: object, args: object) -> bool:
        holds.set()
        return release.wait(10)

    harness.add("slow__hold", hold, timeout_seconds=30)
    harness.add("quick__run", lambda ctx, args: ran.append(True), timeout_seconds=0.2)
    holding = asyncio.ensure_future(harness.call("slow__hold"))
    # The pool's one thread is taken before the quick call asks: awaited, not assumed from
    # the order the loop runs tasks in (``wait_for`` runs its coroutine at once on 3.12).
    assert await asyncio.to_thread(holds.wait, 5)
    result = await asyncio.wait_for(harness.call("quick__run", call_id="call-2"), 5)
    assert result.error is not None
    assert result.error.code == "E_TOOL_BUSY"
    assert "all 1 tool threads" in result.error.message
    release.set()
    await asyncio.wait_for(holding, 5)
    pool.shutdown(wait=True)
    assert ran == []  # the refused call never ran later either


async def test_many_slow_sync_calls_do_not_starve_a_quick_one(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    release = threading.Event()
    harness.add("slow__hold", lambda ctx, args: release.wait(10), timeout_seconds=30)
    harness.add("quick__run", lambda ctx, args: "ran", timeout_seconds=1.0)
    holding = [
        asyncio.ensure_future(harness.call("slow__hold", call_id=f"slow-{n}"))
        for n in range(40)  # more than the min(32, cpus + 4) threads of the default pool
    ]
    result = await asyncio.wait_for(harness.call("quick__run", call_id="quick"), 5)
    assert (result.status, result.output) == ("ok", "ran")
    release.set()
    await asyncio.wait_for(asyncio.gather(*holding), 10)
    await harness.executor.aclose()
