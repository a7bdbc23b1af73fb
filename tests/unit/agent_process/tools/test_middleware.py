"""The ``toolCall`` middleware onion and the pipeline ordering."""

from __future__ import annotations

from typing import Any

import pytest

from agent_process.tools.middleware import (
    MiddlewareError,
    MiddlewarePipeline,
    ToolCallMiddlewareContext,
)
from tests.support.tool_harness import Harness
from tools_base import JsonObject, ToolCallResult, ToolContext


def echo(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return {"text": args["text"]}


async def test_onion_order_follows_priority_then_registration(harness: Harness) -> None:
    """Upstream pipeline-registry: priorities 10, 5, 10 → B:pre, A:pre, C:pre, core, C:post..."""
    trace: list[str] = []

    def layer(label: str) -> Any:
        async def middleware(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
            trace.append(f"{label}:pre")
            result = await ctx.next()
            trace.append(f"{label}:post")
            return result

        return middleware

    def core(ctx: ToolContext, args: JsonObject) -> None:
        trace.append("core")

    harness.add("echo__say", core)
    harness.pipeline.register("toolCall", layer("A"), priority=10)
    harness.pipeline.register("toolCall", layer("B"), priority=5)
    harness.pipeline.register("toolCall", layer("C"), priority=10)
    result = await harness.call("echo__say")
    assert result.status == "ok"
    assert trace == ["B:pre", "A:pre", "C:pre", "core", "C:post", "A:post", "B:post"]


async def test_middleware_can_transform_args(harness: Harness) -> None:
    """``args`` is mutable; inner layers and the tool see the change."""
    harness.add("echo__say", echo)

    async def shout(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        ctx.args["text"] = str(ctx.args["text"]).upper()
        return await ctx.next()

    harness.pipeline.register("toolCall", shout)
    result = await harness.call("echo__say", {"text": "hi"})
    assert result.output == {"text": "HI"}


async def test_middleware_can_replace_the_result(harness: Harness) -> None:
    harness.add("echo__say", echo)

    async def enrich(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        result = await ctx.next()
        return ToolCallResult(
            tool_call_id=result.tool_call_id,
            tool_name=result.tool_name,
            status="ok",
            output={"wrapped": result.output},
        )

    harness.pipeline.register("toolCall", enrich)
    result = await harness.call("echo__say", {"text": "x"})
    assert result.output == {"wrapped": {"text": "x"}}


async def test_middleware_can_refuse_a_call_without_running_it(harness: Harness) -> None:
    """Access control: a short-circuit never reaches the handler."""
    ran: list[bool] = []

    def handler(ctx: ToolContext, args: JsonObject) -> None:
        ran.append(True)

    harness.add("echo__say", handler)

    async def deny(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        return ToolCallResult(
            tool_call_id=ctx.tool_call_id,
            tool_name=ctx.tool_name,
            status="error",
            error=None,
        )

    harness.pipeline.register("toolCall", deny)
    result = await harness.call("echo__say")
    assert result.status == "error"
    assert ran == []


async def test_metadata_is_shared_between_layers(harness: Harness) -> None:
    harness.add("echo__say", echo)
    seen: list[Any] = []

    async def outer(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        ctx.metadata["startedBy"] = "outer"
        return await ctx.next()

    async def inner(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        seen.append(ctx.metadata.get("startedBy"))
        seen.append((ctx.tool_name, ctx.tool_call_id, ctx.agent_name, ctx.step_index))
        return await ctx.next()

    harness.pipeline.register("toolCall", outer)
    harness.pipeline.register("toolCall", inner)
    await harness.call("echo__say", call_id="call-77")
    assert seen == ["outer", ("echo__say", "call-77", "tester", 0)]


async def test_a_layer_may_call_next_twice_to_retry(harness: Harness) -> None:
    attempts: list[int] = []

    def flaky(ctx: ToolContext, args: JsonObject) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("transient")
        return "ok"

    harness.add("echo__say", flaky)

    async def retry(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        result = await ctx.next()
        return result if result.status == "ok" else await ctx.next()

    harness.pipeline.register("toolCall", retry)
    result = await harness.call("echo__say")
    assert (result.status, result.output, len(attempts)) == ("ok", "ok", 2)


async def test_middleware_exception_becomes_an_error_result(harness: Harness) -> None:
    """The executor never raises: a broken middleware yields E_TOOL_MIDDLEWARE."""
    harness.add("echo__say", echo)

    async def broken(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
        raise KeyError("oops")

    harness.pipeline.register("toolCall", broken)
    result = await harness.call("echo__say")
    assert result.status == "error"
    assert result.error is not None
    assert (result.error.code, result.error.name) == ("E_TOOL_MIDDLEWARE", "KeyError")


async def test_middleware_returning_garbage_becomes_an_error_result(harness: Harness) -> None:
    harness.add("echo__say", echo)

    async def wrong(ctx: ToolCallMiddlewareContext) -> Any:
        await ctx.next()
        return {"not": "a result"}

    harness.pipeline.register("toolCall", wrong)
    result = await harness.call("echo__say")
    assert result.error is not None
    assert result.error.code == "E_TOOL_MIDDLEWARE"


def test_unknown_kind_is_refused() -> None:
    async def mw(ctx: Any) -> Any:
        return await ctx.next()

    with pytest.raises(MiddlewareError, match="unknown middleware kind"):
        MiddlewarePipeline().register("toolCall.pre", mw)


async def test_next_inside_the_core_is_an_error() -> None:
    from agent_process.tools.middleware import MiddlewareContext

    async def core(ctx: MiddlewareContext[int]) -> int:
        return await ctx.next()

    with pytest.raises(MiddlewareError, match="inside the core"):
        await MiddlewareContext[int]((), core).next()
