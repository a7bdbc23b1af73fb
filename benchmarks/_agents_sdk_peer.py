"""The peer of ``benchmarks/slow_model.py``: the OpenAI Agents SDK, in this one process.

The same Turn as the swarm's: ``Runner.run`` (``Runner.run_streamed`` with ``--stream``) of an
agent on ``OpenAIChatCompletionsModel`` against the slow provider, whose first answer calls the
function tool ``wait`` (an ``async def`` awaiting ``asyncio.sleep(seconds)``, as the base
``wait`` tool does) and whose second answers ``done: TEXT``. ``--requests`` runs at once, each
its own conversation; every answer is checked. Tracing is off: nothing leaves the machine.

Prints one JSON object: answered, errors by kind, wall time, the overhead of each run above the
model's time (p50/p99), and memory: RSS and PSS when idle (after a warm-up), the peak PSS
(sampled while the runs are in flight) and the maximum RSS.

Run by ``benchmarks/slow_model.py``: ``python benchmarks/_agents_sdk_peer.py --url URL
--delay S --requests M [--stream]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import time
from collections import Counter
from typing import Any

import uvloop

STAMP = re.compile(r"\[(\d+\.\d+)\] ")
"""The stamp the slow provider starts a streamed answer with (``benchmarks/_slow_provider.py``;
not imported from there: this process loads nothing but the SDK, so its memory is the SDK's)."""
SAMPLE_SECONDS = 0.05
"""How often memory is read while the runs are in flight."""


async def measure(url: str, delay: float, requests: int, stream: bool) -> dict[str, Any]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    async def wait(seconds: float) -> dict[str, float]:
        """Pause for the given number of seconds."""
        await asyncio.sleep(seconds)
        return {"waitedSeconds": seconds, "waitedMs": round(seconds * 1000)}

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-local", max_retries=0, timeout=600)
    agent = Agent(
        name="waiter",
        instructions="You wait, then answer.",
        model=OpenAIChatCompletionsModel("direct", client),
        tools=[wait],
    )
    config = RunConfig(tracing_disabled=True)

    async def run(text: str) -> str:
        if not stream:
            result = await Runner.run(agent, text, run_config=config)
            return str(result.final_output)
        streamed = Runner.run_streamed(agent, text, run_config=config)
        async for _ in streamed.stream_events():
            pass
        return str(streamed.final_output)

    for n in range(3):  # warm-up: the client's connections, the SDK's first-use work
        await run(f"warm-up {n}")
    idle = memory_mib_now()
    peak: dict[str, float] = dict(idle)
    errors: Counter[str] = Counter()
    overheads: list[float] = []
    model_time = 2 * delay

    async def one(n: int) -> None:
        text = f"conversation {n}"
        started = time.monotonic()
        try:
            answer = await run(text)
        except Exception as exc:
            errors[type(exc).__name__] += 1
            return
        if STAMP.sub("", answer) != f"done: {text}":
            errors["wrong answer"] += 1
            return
        overheads.append(time.monotonic() - started - model_time)

    async def sample(done: asyncio.Event) -> None:
        nonlocal peak
        while not done.is_set():
            now = memory_mib_now()
            if now["Pss"] > peak["Pss"]:
                peak = now
            await asyncio.sleep(SAMPLE_SECONDS)

    done = asyncio.Event()
    sampler = asyncio.create_task(sample(done))
    started = time.monotonic()
    await asyncio.gather(*(one(n) for n in range(requests)))
    wall = time.monotonic() - started
    done.set()
    await sampler
    await client.close()
    ordered = sorted(overheads)
    return {
        "requests": requests,
        "answered": len(overheads),
        "errors": dict(errors),
        "wall_s": round(wall, 3),
        "ideal_s": model_time,
        "overhead_p50_ms": round(percentile(ordered, 0.50) * 1000, 1) if ordered else None,
        "overhead_p99_ms": round(percentile(ordered, 0.99) * 1000, 1) if ordered else None,
        "idle_rss_mib": round(idle["Rss"], 1),
        "idle_pss_mib": round(idle["Pss"], 1),
        "peak_pss_mib": round(peak["Pss"], 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def memory_mib_now() -> dict[str, float]:
    """This process's RSS and PSS now, in MiB (``smaps_rollup``)."""
    fields: dict[str, float] = {}
    with open(f"/proc/{os.getpid()}/smaps_rollup") as rollup:
        for line in rollup:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                fields[key] = int(rest.split()[0]) / 1024
    return fields


def percentile(ordered: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of the sorted ``ordered`` (nearest rank)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the slow provider, http://127.0.0.1:PORT")
    parser.add_argument("--delay", type=float, required=True, help="the provider's delay")
    parser.add_argument("--requests", type=int, required=True, help="runs at once")
    parser.add_argument("--stream", action="store_true", help="Runner.run_streamed")
    options = parser.parse_args()
    figures = uvloop.run(measure(options.url, options.delay, options.requests, options.stream))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
