"""Cost of one tool call through the executor, against calling the handler directly; and the
cost of the sandbox to a ``bash`` call, against the same call unsandboxed.

The executor path is the full one a model's call takes: the ``toolCall`` onion with three
pass-through middlewares, the catalog guard, JSON-Schema validation of the arguments, the
handler, and the conversion of its output into a ``ToolCallResult``. Each handler kind is
measured against its own direct baseline in the same run:

* ``async``   — ``async def`` handler, awaited on the loop (baseline: ``await handler(...)``)
* ``inline``  — sync handler marked ``@nonblocking`` (baseline: ``handler(...)``)
* ``thread``  — plain sync handler, run in a worker thread (baseline: ``run_in_executor``)

The sandbox (``tools_base.sandbox``): a real ``bash__exec`` call of ``true`` through the same
executor and the built-in ``bash`` handler (``/bin/sh -lc true``, its pipes, its process group,
the call's pids cgroup and limits), with the sandbox ``off`` (the floor), with bubblewrap
(``bwrap``) and with the kernel's namespaces directly (``namespaces``), each where
``sandbox.probe`` finds it works (the others are reported skipped, with the reason). The modes
take turns call by call, so drift and load hit them alike; the call's ``env`` sets ``HOME`` to
the workspace in every mode, as the sandbox does, so the floor's shell reads the same start-up
files. Beside them, two bare floors spawned with ``subprocess.run`` (no handler, no limits, no
cgroup): ``/bin/sh -lc true``, and the same under bubblewrap with the argv the sandbox builds;
their difference is what bubblewrap itself costs here (under a root daemon with the staged,
idmapped workspace its child mounts); and the bare shell forked with a ``preexec_fn`` that does
nothing, then with one installing the sandbox's seccomp filter: their difference is what the
filter costs a shell.

Run: ``python benchmarks/tool_call.py [--calls N] [--repeats R] [--sandbox-calls N]
[--loop asyncio|uvloop] [--json] [--quick]``. Prints median microseconds per call, the
overhead, and the ratio; then the ``bash`` call's median, p90 and p99 milliseconds per sandbox
mode and the median each adds over the floor. ``--json`` prints one object whose
``async_overhead_us``, ``inline_overhead_us`` and ``thread_overhead_us`` are the overheads
(``handlers`` has every figure), whose ``sandbox`` holds ``off_ms``, ``bwrap_ms``,
``bwrap_added_ms``, ``namespaces_ms``, ``namespaces_added_ms`` (medians; ``*_p90_ms``,
``*_p99_ms`` beside; ``null`` for a mode skipped, named with its reason in ``skipped``) and the
bare floors, and ``targets`` the goals. ``--quick`` runs small counts, prints the JSON and checks
its keys (every call is checked in every mode: the handlers' echo, ``true``'s exit code 0).
Then the sandbox's network proxy (``benchmarks/_proxy_cost.py``): an HTTPS request to a local
TLS server directly and through the proxy (``CONNECT``); ``proxy`` holds ``direct_ms``,
``proxied_ms``, ``added_ms`` (medians) and their p90s (``--proxy-requests N`` each way).
Not a test: no figure gates anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog
import yaml

# The repository's packages first: this folder's ipc.py must not shadow the ipc package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_process.scope import StepScope, TurnScope
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline, ToolCallMiddlewareContext
from agent_process.tools.registry import ToolRegistry
from benchmarks._proxy_cost import KEYS as PROXY_KEYS
from benchmarks._proxy_cost import TARGET_ADDED_MS as PROXY_TARGET_MS
from benchmarks._proxy_cost import print_proxy, proxy_costs
from tools_base import (
    JsonObject,
    JsonValue,
    Message,
    MessageSource,
    ToolCall,
    ToolCallResult,
    ToolContext,
    nonblocking,
    sandbox,
)
from tools_base.sandbox import SandboxLimits, SandboxMode, SandboxPolicy, _seccomp
from tools_base.sandbox._hardening import seccomp_filter
from tools_base.tools import bash

ROOT = Path(__file__).resolve().parent.parent
PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 1}, "count": {"type": "integer"}},
    "required": ["text"],
    "additionalProperties": False,
}
ARGS: JsonObject = {"text": "hello", "count": 3}

TARGETS_US = {"async": 10.0, "inline": 6.0}
"""Overhead goals per handler kind, in microseconds on the reference 2-core machine."""

SANDBOX_MODES = (SandboxMode.OFF, SandboxMode.BWRAP, SandboxMode.NAMESPACES)
"""The floor first, then each backend."""
SANDBOX_TARGETS_MS = {SandboxMode.BWRAP: 10.0}
"""Median cost a sandbox may add to one ``bash__exec`` call over the same call unsandboxed."""
BASH_COMMAND = "true"
SHELL_ARGV = ["/bin/sh", "-lc", BASH_COMMAND]
"""What ``bash__exec`` runs for ``BASH_COMMAND``: the bare floors run the same."""
QUICK = {"calls": 200, "repeats": 1, "sandbox_calls": 5, "proxy_requests": 5}


async def async_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


@nonblocking
def inline_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


def thread_handler(ctx: ToolContext, args: JsonObject) -> JsonValue:
    return {"echo": args["text"]}


async def passthrough(ctx: ToolCallMiddlewareContext) -> ToolCallResult:
    return await ctx.next()


def bash_exec_parameters() -> JsonObject:
    """``bash__exec``'s parameters as the ``@goondan/base`` package declares them."""
    for doc in yaml.safe_load_all((ROOT / "tools_base" / "goondan.yaml").read_text()):
        if doc and doc.get("kind") == "Tool" and doc["metadata"]["name"] == "bash":
            for export in doc["spec"]["exports"]:
                if export["name"] == "exec":
                    parameters: JsonObject = export["parameters"]
                    return parameters
    raise SystemExit("tools_base/goondan.yaml declares no bash exec export")


def build(workdir: Path) -> tuple[ToolExecutor, StepScope, Message, ThreadPoolExecutor]:
    workdir = Path(os.path.realpath(workdir))  # the paths bash reports and binds are real
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
    registry.register(
        ToolCatalogItem(
            name="bash__exec",
            parameters=bash_exec_parameters(),
            source=ToolSource(type="config", name="bash"),
        ),
        bash.configure({})["exec"],
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
        workdir=workdir,
        logger=structlog.get_logger(),
    )
    scope = StepScope(turn=turn, index=0, allowlist=frozenset(registry.names()))
    message = Message(id="m1", role="assistant", source=MessageSource(type="assistant"))
    return executor, scope, message, pool


class WrongResult(Exception):
    """A measured call did not do what it was asked: the run's figures mean nothing."""


def check_echo(result: ToolCallResult) -> None:
    if result.status != "ok" or result.output != {"echo": ARGS["text"]}:
        raise WrongResult(f"{result.tool_name}: {result.to_json()}")


def check_bash(result: ToolCallResult, mode: SandboxMode) -> None:
    output = result.output
    if result.status != "ok" or not isinstance(output, dict) or output.get("exitCode") != 0:
        raise WrongResult(f"bash__exec {BASH_COMMAND!r}, sandbox {mode}: {result.to_json()}")


async def time_per_call(fn: Callable[[], Awaitable[Any]], calls: int) -> float:
    for _ in range(min(calls // 10, 1000)):
        await fn()
    started = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - started) / calls * 1e6


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def install_seccomp() -> None:
    """In the bare shell's child before ``exec``: the sandbox's filter, nothing else of it."""
    _seccomp.install(seccomp_filter())


def nothing() -> None:
    """A ``preexec_fn`` that does nothing: the seccomp floor's own floor (any ``preexec_fn``
    makes ``subprocess`` fork instead of ``vfork``, which costs more than the filter)."""


BARE_PREEXEC: dict[str, Callable[[], None]] = {"seccomp": install_seccomp, "preexec": nothing}
"""What a bare floor's child runs before its ``exec``."""


async def sandbox_costs(
    executor: ToolExecutor, scope: StepScope, message: Message, calls: int
) -> dict[str, Any]:
    """``bash__exec`` of ``true`` per sandbox mode, the modes taking turns call by call, and
    the bare floors beside: the ``sandbox`` object of the JSON."""
    workdir = str(scope.turn.workdir)
    measured: list[SandboxMode] = []
    backends: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for mode in SANDBOX_MODES:
        found = await asyncio.to_thread(sandbox.probe, mode)  # runs a program in it, once
        if found.backend is mode:
            measured.append(mode)
            backends[str(mode)] = found.reason
        else:
            skipped[str(mode)] = found.reason
    # HOME is the workspace in every mode (the sandbox sets it so): the same start-up files.
    call = ToolCall(
        id="call-bash", name="bash__exec", args={"command": BASH_COMMAND, "env": {"HOME": workdir}}
    )
    bare_env = {"PATH": os.defpath, "HOME": workdir}
    bare: dict[str, list[str]] = {"sh": SHELL_ARGV}
    if seccomp_filter() is not None:
        bare["preexec"] = SHELL_ARGV  # the same shell, forked with a preexec_fn
        bare["seccomp"] = SHELL_ARGV  # and with that preexec_fn installing the filter
    if SandboxMode.BWRAP in measured:
        bare["bwrap"] = []  # prepared afresh for each spawn, as each call is
    unlimited = SandboxLimits(cpu_seconds=None, memory_mib=None, processes=None, file_size_mib=None)

    def bwrap_launch() -> sandbox.Launch:
        """bubblewrap as the sandbox starts it (its descriptors; under root the staged
        workspace its child mounts), without limits or a cgroup."""
        return sandbox.prepare(
            SHELL_ARGV, env=bare_env, cwd=workdir, workdir=workdir,
            policy=SandboxPolicy(limits=unlimited), mode=SandboxMode.BWRAP,
        )  # fmt: skip

    async def through_bash(mode: SandboxMode) -> float:
        sandbox.configure(mode)
        started = time.perf_counter()
        result = await executor.execute(call, scope, message)
        elapsed = time.perf_counter() - started
        check_bash(result, mode)
        return elapsed * 1e3

    def spawn_bare(name: str, argv: list[str]) -> float:
        started = time.perf_counter()
        launch = bwrap_launch() if name == "bwrap" else None
        try:
            done = subprocess.run(
                launch.argv if launch else argv, cwd=workdir, env=bare_env,
                stdin=subprocess.DEVNULL, capture_output=True, check=False,
                preexec_fn=launch.preexec if launch else BARE_PREEXEC.get(name),
                pass_fds=launch.pass_fds if launch else (),
            )  # fmt: skip
        finally:
            if launch is not None:
                launch.close()
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise WrongResult(f"bare {name}: exit {done.returncode}: {done.stderr!r}")
        return elapsed * 1e3

    samples: dict[str, list[float]] = {str(mode): [] for mode in measured}
    samples.update({f"bare_{name}": [] for name in bare})
    warmup = max(calls // 10, 1)
    previous = sandbox.current_mode()
    try:
        for i in range(warmup + calls):
            # Each round starts with the next mode: none always runs right after another.
            for j in range(len(measured)):
                mode = measured[(i + j) % len(measured)]
                ms = await through_bash(mode)
                if i >= warmup:
                    samples[str(mode)].append(ms)
            for name, argv in bare.items():
                ms = spawn_bare(name, argv)
                if i >= warmup:
                    samples[f"bare_{name}"].append(ms)
    finally:
        sandbox.configure(previous)

    def median(key: str) -> float | None:
        got = samples.get(key)
        return round(statistics.median(got), 3) if got else None

    def added(key: str, floor: str) -> float | None:
        value, base = median(key), median(floor)
        return round(value - base, 3) if value is not None and base is not None else None

    figures: dict[str, Any] = {"command": BASH_COMMAND, "calls": calls}
    for mode in SANDBOX_MODES:
        key, got = str(mode), samples.get(str(mode))
        figures[f"{key}_ms"] = median(key)
        figures[f"{key}_p90_ms"] = round(percentile(got, 0.9), 3) if got else None
        figures[f"{key}_p99_ms"] = round(percentile(got, 0.99), 3) if got else None
        if mode is not SandboxMode.OFF:
            figures[f"{key}_added_ms"] = added(key, "off")
    figures["bare_sh_ms"] = median("bare_sh")
    figures["bare_bwrap_ms"] = median("bare_bwrap")
    figures["bare_bwrap_added_ms"] = added("bare_bwrap", "bare_sh")
    figures["bare_preexec_ms"] = median("bare_preexec")
    figures["bare_seccomp_ms"] = median("bare_seccomp")
    figures["seccomp_added_ms"] = added("bare_seccomp", "bare_preexec")
    figures["backends"] = backends
    figures["skipped"] = skipped
    return figures


def print_sandbox(figures: dict[str, Any]) -> None:
    print()
    print(
        f"bash__exec {figures['command']!r}: ms per call, {figures['calls']} calls per sandbox "
        "mode, the modes taking turns"
    )
    print(
        f"{'sandbox':<12} {'median':>8} {'p90':>8} {'p99':>8} {'added':>8} {'target':>8}  backend"
    )
    for mode in SANDBOX_MODES:
        key = str(mode)
        if figures[f"{key}_ms"] is None:
            continue
        label = f"{key} (floor)" if mode is SandboxMode.OFF else key
        extra = figures.get(f"{key}_added_ms")
        target = f"≤ {SANDBOX_TARGETS_MS[mode]:g}" if mode in SANDBOX_TARGETS_MS else ""
        print(
            f"{label:<12} {figures[f'{key}_ms']:>8.2f} {figures[f'{key}_p90_ms']:>8.2f} "
            f"{figures[f'{key}_p99_ms']:>8.2f} "
            f"{'' if extra is None else f'{extra:+.2f}':>8} {target:>8}  "
            f"{figures['backends'][key]}"
        )
    line = f"bare floors (subprocess.run): {' '.join(SHELL_ARGV)} {figures['bare_sh_ms']:.2f}"
    if figures["bare_bwrap_ms"] is not None:
        line += (
            f", under bwrap {figures['bare_bwrap_ms']:.2f}"
            f" (bubblewrap itself {figures['bare_bwrap_added_ms']:+.2f})"
        )
    print(line)
    if figures["bare_seccomp_ms"] is not None:
        print(
            f"seccomp filter: the same shell forked with a preexec_fn "
            f"{figures['bare_preexec_ms']:.2f}, under the filter {figures['bare_seccomp_ms']:.2f}"
            f" (the filter {figures['seccomp_added_ms']:+.2f})"
        )
    for key, reason in figures["skipped"].items():
        print(f"skipped {key}: {reason}")


SANDBOX_KEYS = [
    "command", "calls", "backends", "skipped", "bare_sh_ms", "bare_bwrap_ms",
    "bare_bwrap_added_ms", "bare_preexec_ms", "bare_seccomp_ms", "seccomp_added_ms",
    *(f"{mode}_{figure}" for mode in SANDBOX_MODES for figure in ("ms", "p90_ms", "p99_ms")),
    *(f"{mode}_added_ms" for mode in SANDBOX_MODES if mode is not SandboxMode.OFF),
]  # fmt: skip
HANDLER_KEYS = ["direct_us", "executor_us", "overhead_us", "ratio"]


def missing_keys(figures: dict[str, Any]) -> list[str]:
    """What ``--quick`` checks: every key there, a figure for every mode not skipped."""
    top = ["loop", "repeats", "handlers", "sandbox", "targets"]
    top += [f"{label}_overhead_us" for label in ("async", "inline", "thread")]
    missing = [key for key in top if key not in figures]
    for label in ("async", "inline", "thread"):
        missing += [
            f"handlers.{label}.{key}"
            for key in HANDLER_KEYS
            if not isinstance(figures.get("handlers", {}).get(label, {}).get(key), float | int)
        ]
    box = figures.get("sandbox", {})
    missing += [f"sandbox.{key}" for key in SANDBOX_KEYS if key not in box]
    missing += [f"proxy.{key}" for key in PROXY_KEYS if key not in figures.get("proxy", {})]
    for mode in SANDBOX_MODES:
        if str(mode) not in box.get("skipped", {}) and box.get(f"{mode}_ms") is None:
            missing.append(f"sandbox.{mode}_ms (not skipped)")
    return missing


async def run(
    calls: int, repeats: int, sandbox_calls: int, as_json: bool, quick: bool, proxy_requests: int
) -> None:
    with tempfile.TemporaryDirectory(prefix="goondan-bench-") as workdir:
        await measure(Path(workdir), calls, repeats, sandbox_calls, as_json, quick, proxy_requests)


async def measure(
    workdir: Path,
    calls: int,
    repeats: int,
    sandbox_calls: int,
    as_json: bool,
    quick: bool,
    proxy_requests: int,
) -> None:
    executor, scope, message, pool = build(workdir)
    loop = asyncio.get_running_loop()
    ctx = ToolContext(
        agent_name="bench",
        instance_key="default",
        turn_id="turn-1",
        trace_id="0" * 32,
        tool_call_id="call-1",
        message=message,
        workdir=workdir,
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
            check_echo(result)
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
    figures["sandbox"] = await sandbox_costs(executor, scope, message, sandbox_calls)
    if not as_json:
        print_sandbox(figures["sandbox"])
    # A sandboxed program's network proxy: an HTTPS request through it and without.
    figures["proxy"] = await proxy_costs(proxy_requests)
    if not as_json:
        print_proxy(figures["proxy"])
    figures["targets"] = {f"{label}_overhead_us": us for label, us in TARGETS_US.items()}
    figures["targets"].update(
        {f"sandbox_{mode}_added_ms": ms for mode, ms in SANDBOX_TARGETS_MS.items()}
    )
    figures["targets"]["proxy_added_ms"] = PROXY_TARGET_MS
    if as_json:
        print(json.dumps(figures))
    await executor.aclose()
    pool.shutdown()
    if quick and (missing := missing_keys(figures)):
        raise WrongResult(f"--quick: missing from the figures: {', '.join(missing)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--sandbox-calls", type=int, default=200, help="bash__exec calls per sandbox mode"
    )
    parser.add_argument(
        "--proxy-requests", type=int, default=300, help="HTTPS requests each way (proxy cost)"
    )
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small counts, print the JSON and check its keys (a smoke test: gates no figure)",
    )
    options = parser.parse_args()
    if options.quick:
        for name, value in QUICK.items():
            setattr(options, name, value)
        options.json = True
    job = run(
        options.calls,
        options.repeats,
        options.sandbox_calls,
        options.json,
        options.quick,
        options.proxy_requests,
    )
    try:
        if options.loop == "uvloop":
            import uvloop

            uvloop.run(job)
        else:
            asyncio.run(job)
    except WrongResult as exc:
        sys.exit(f"tool_call.py: {exc}")


if __name__ == "__main__":
    main()
