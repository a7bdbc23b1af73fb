"""Four I/O-bound tool calls of one model answer, one after another vs ``parallelToolCalls``.

Each call waits 50 ms (like a ``wait`` or an HTTP request); a Turn makes the four calls in one
Step, then answers. Both runs use the real Turn loop, executor and conversation files, in this
process, with the offline scripted model.

Every Turn is checked (its four calls made, its answer). Run: ``python
benchmarks/parallel_calls.py [--turns N] [--json] [--quick]`` (``--quick``: 5 Turns each, for
CI). Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

from agent_process.conversation import ConversationStore  # noqa: E402
from agent_process.models.scripted import ScriptedModel  # noqa: E402
from agent_process.step import StepSettings  # noqa: E402
from agent_process.tools.catalog import ToolCatalogItem, ToolSource  # noqa: E402
from agent_process.tools.executor import ToolExecutor  # noqa: E402
from agent_process.tools.middleware import MiddlewarePipeline  # noqa: E402
from agent_process.tools.registry import ToolRegistry  # noqa: E402
from agent_process.turn import TurnInput, TurnRunner  # noqa: E402
from benchmarks._checks import expect  # noqa: E402
from bundle.scripted import ScriptSpec  # noqa: E402
from ipc.logs import configure_logging  # noqa: E402
from tools_base import JsonObject, ToolContext  # noqa: E402

CALLS = 4
WAIT_SECONDS = 0.05
RULES: list[dict[str, Any]] = [
    {"when": {"input": "^go$"}, "calls": [{"tool": "io__wait"} for _ in range(CALLS)]},
    {"when": {"toolResult": "io__wait"}, "reply": "done"},
]


calls_made = 0
"""Calls of :func:`wait` so far: each Turn must make :data:`CALLS` of them."""


async def wait(ctx: ToolContext, args: JsonObject) -> JsonObject:
    global calls_made
    calls_made += 1
    await asyncio.sleep(WAIT_SECONDS)
    return {"waited": WAIT_SECONDS}


def runner(parallel: bool) -> TurnRunner:
    registry = ToolRegistry()
    item = ToolCatalogItem(name="io__wait", source=ToolSource(type="config", name="io"))
    registry.register(item, wait)
    pipeline = MiddlewarePipeline()
    return TurnRunner(
        StepSettings(
            agent_name="bench",
            model=ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="bench"),
            registry=registry,
            executor=ToolExecutor(registry, pipeline),
            pipeline=pipeline,
            config_tool_names=("io__wait",),
            parallel_tool_calls=parallel,
        )
    )


async def turn_ms(parallel: bool, turns: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(Path(tmp) / "conv")
        store.load()
        turn_runner = runner(parallel)
        samples = []
        for _ in range(turns):
            before = calls_made
            started = time.perf_counter()
            result = await turn_runner.run("default", store, Path(tmp), TurnInput(text="go"))
            made = calls_made - before
            expect(result.text == "done" and made == CALLS, (result, made))
            samples.append((time.perf_counter() - started) * 1000)
        return samples


async def measure(turns: int) -> dict[str, float]:
    sequential = statistics.median(await turn_ms(False, turns))
    parallel = statistics.median(await turn_ms(True, turns))
    return {
        "calls": CALLS,
        "call_ms": WAIT_SECONDS * 1000,
        "sequential_turn_ms": sequential,
        "parallel_turn_ms": parallel,
        "speedup": sequential / parallel,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="5 Turns each, for CI")
    options = parser.parse_args()
    if options.quick:
        options.turns = 5
    configure_logging(level="warning")  # each Turn's log on stderr: stdout is the figures
    figures = asyncio.run(measure(options.turns))
    if options.json:
        print(json.dumps(figures))
        return
    print(
        f"{CALLS} calls of {WAIT_SECONDS * 1000:.0f} ms in one model answer, {options.turns} Turns"
    )
    print(f"one after another  {figures['sequential_turn_ms']:8.1f} ms per Turn")
    print(f"parallelToolCalls  {figures['parallel_turn_ms']:8.1f} ms per Turn")
    print(f"speedup            {figures['speedup']:8.2f}x")


if __name__ == "__main__":
    main()
