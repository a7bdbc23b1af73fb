"""Cost of one tool call through the executor, against calling the handler directly.

The executor path is the full one a model's call takes: the ``toolCall`` onion with three
pass-through middlewares, the catalog guard, JSON-Schema validation of the arguments, the
handler, and the conversion of its output into a ``ToolCallResult``. Each handler kind is
measured against its own direct baseline in the same run:

* ``async``   — ``async def`` handler, awaited on the loop (baseline: ``await handler(...)``)
* ``inline``  — sync handler marked ``@nonblocking`` (baseline: ``handler(...)``)
* ``thread``  — plain sync handler, run in a worker thread (baseline: ``run_in_executor``)

Run: ``python benchmarks/tool_call.py [--calls N] [--repeats R] [--loop asyncio|uvloop] [--json]``.
Prints median microseconds per call, the overhead, and the ratio; ``--json`` prints one object
whose ``async_overhead_us``, ``inline_overhead_us`` and ``thread_overhead_us`` are the overheads
(``handlers`` has every figure, ``targets`` the goals for the first two). Not a test: nothing
here gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog

# The repository's packages first: this folder's ipc.py must not shadow the ipc package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_process.scope import StepScope, TurnScope
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline, ToolCallMiddlewareContext
from agent_process.tools.registry import ToolRegistry
from tools_base import (
    JsonObject,
    JsonValue,
    Message,
    MessageSource,
    ToolCall,
    ToolCallResult,
    ToolContext,
    nonblocking,
)

PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 1}, "count": {"type": "integer"}},
    "required": ["text"],
    "additionalProperties": False,
}
ARGS: JsonObject = {"text": "hello", "count": 3}

TARGETS_US = {"async": 10.0, "inline": 6.0}
"""Overhead goals per handler kind, in microseconds on the reference 2-core machine."""


async def async_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


@nonblocking
def inline_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


def thread_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


async def passthrough(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
    return await ctx.next()


def build() -> tuple[ToolExecutor, StepScope, Message, ThreadPoolExecutor]:
    registry = ToolRegistry()
    for name, handler in (
        ("bench__async", async_handler),
        ("bench__inline", inline_handler),
        ("bench__thread", thread_handler),
    ):
        registry.register(
            ToolCatalogItem(
                name=name, parameters=PARAMETERS, source=ToolSource(type="config", name="bench")
            ),
            handler,
        )
    pipeline = MiddlewarePipeline()
    for _ in range(3):
        pipeline.register("toolCall", passthrough)
    pool = ThreadPoolExecutor(max_workers=4)
    executor = ToolExecutor(registry, pipeline, thread_pool=pool)
    turn = TurnScope(
        agent_name="bench",
        instance_key="default",
        turn_id="turn-1",
        trace_id="0" * 32,
        workdir=Path.cwd(),
        logger=structlog.get_logger(),
    )
    scope = StepScope(turn=turn, index=0, allowlist=frozenset(registry.names()))
    message = Message(id="m1", role="assistant", source=MessageSource(type="assistant"))
    return executor, scope, message, pool


async def time_per_call(fn: Callable[[], Awaitable[Any]], calls: int) -> float:
    for _ in range(min(calls // 10, 1000)):
        await fn()
    started = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - started) / calls * 1e6


async def run(calls: int, repeats: int, as_json: bool = False) -> None:
    executor, scope, message, pool = build()
    loop = asyncio.get_running_loop()
    ctx = ToolContext(
        agent_name="bench",
        instance_key="default",
        turn_id="turn-1",
        trace_id="0" * 32,
        tool_call_id="call-1",
        message=message,
        workdir=Path.cwd(),
        logger=structlog.get_logger(),
    )

    async def direct_async() -> Any:
        return await async_handler(ctx, ARGS)

    async def direct_inline() -> Any:
        return inline_handler(ctx, ARGS)

    async def direct_thread() -> Any:
        return await loop.run_in_executor(pool, thread_handler, ctx, ARGS)

    def via_executor(name: str) -> Callable[[], Awaitable[Any]]:
        call = ToolCall(id="call-1", name=name, args=ARGS)

        async def go() -> Any:
            result = await executor.execute(call, scope, message)
            assert result.status == "ok", result
            return result

        return go

    cases = [
        ("async", direct_async, via_executor("bench__async"), calls),
        ("inline", direct_inline, via_executor("bench__inline"), calls),
        ("thread", direct_thread, via_executor("bench__thread"), max(calls // 10, 100)),
    ]
    loop_name = f"{type(loop).__module__}.{type(loop).__name__}"
    figures: dict[str, Any] = {"loop": loop_name, "repeats": repeats, "handlers": {}}
    if not as_json:
        print(f"loop: {loop_name}; median of {repeats} runs")
        print(
            f"{'handler':<8} {'direct µs':>10} {'executor µs':>12} {'overhead µs':>12} "
            f"{'ratio':>7} {'target µs':>10}"
        )
    for label, direct, executed, n in cases:
        direct_runs, exec_runs = [], []
        for _ in range(repeats):
            direct_runs.append(await time_per_call(direct, n))
            exec_runs.append(await time_per_call(executed, n))
        d, e = statistics.median(direct_runs), statistics.median(exec_runs)
        figures["handlers"][label] = {
            "direct_us": round(d, 3),
            "executor_us": round(e, 3),
            "overhead_us": round(e - d, 3),
            "ratio": round(e / d, 3),
        }
        figures[f"{label}_overhead_us"] = round(e - d, 3)
        if not as_json:
            target = f"≤ {TARGETS_US[label]:g}" if label in TARGETS_US else ""
            print(f"{label:<8} {d:>10.2f} {e:>12.2f} {e - d:>12.2f} {e / d:>6.1f}x {target:>10}")
    figures["targets"] = {f"{label}_overhead_us": us for label, us in TARGETS_US.items()}
    if as_json:
        print(json.dumps(figures))
    await executor.aclose()
    pool.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    options = parser.parse_args()
    if options.loop == "uvloop":
        import uvloop

        uvloop.run(run(options.calls, options.repeats, options.json))
    else:
        asyncio.run(run(options.calls, options.repeats, options.json))


if __name__ == "__main__":
    main()
