"""One Turn of one agent, side by side with the peers: the OpenAI Agents SDK and Pydantic AI.

The same work everywhere: a system prompt, the user's ``add A B``, an offline model that calls
the one tool ``add(a, b)``, the tool (an ``async def``) adding the numbers, and the model's
answer ``the sum is S`` read from the tool's result. Each model decides from the conversation
it is given, as a real one would, and every Turn is checked (not with ``assert``, so ``-O``
cannot skip it): the tool ran exactly once and the answer is the right sum.

1. OpenAI Agents SDK: ``Runner.run`` with a fake ``Model`` (the way its own tests run offline)
   and a ``function_tool``; tracing disabled.
2. Pydantic AI: ``Agent.run`` with a ``FunctionModel`` and a plain tool; no instrumentation.
3. goondan, in process: one Turn of the ``TurnRunner`` an AgentProcess builds from the bundle
   the daemon runs (``scripted`` model, the tool loaded from its entry module), on a fresh
   conversation, with its normal durability: each message appended to ``events.jsonl`` as it
   happens, and the fold at the Turn's end (write, fsync, rename, fsync of the directory). No
   runtime-event sink, as the peers run without tracing. Beside it, its disk floor (a new file
   of the fold's size written, fsynced, renamed, its directory fsynced: what no durable Turn
   can skip), and the same Turn on a tmpfs, where an fsync waits for no disk: its CPU cost.
4. goondan through the daemon: the same request to an ``Orchestrator`` started in this process
   (request → router → AgentProcess → Turn → answer), on a fresh instance prepared beforehand,
   with everything the daemon does per Turn (runtime events, instance status, logs).

The peers keep their conversation in memory only. Everything runs on uvloop (the AgentProcess
in its own process), is warmed up first, then measured in interleaved rounds so the machine's
noise falls on each alike. Per Turn: median and p99 in µs, and each median's ratio to ours in
process (3, on disk). Any attempt at an IP connection or name lookup fails the run.

Run: ``python benchmarks/peers.py [--turns N] [--json] [--quick]`` after ``pip install -e
'.[bench]'`` (the ``dev`` extra has it); ``--quick`` runs 20 Turns of each, every one checked;
``--profile`` prints where our in-process Turn spends its time (cProfile; needs no peer).
Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.util
import json
import os
import platform
import pstats
import re
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

PEERS = {"agents": "openai-agents", "pydantic_ai": "pydantic-ai-slim"}
"""Module → distribution of each peer (both in the ``bench`` extra)."""

OURS = "goondan_inprocess"
"""The contender every ratio is taken against."""

INSTRUCTIONS = "You add numbers."
INPUT = re.compile(r"^add (-?\d+) (-?\d+)$")

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: math}
spec:
  entry: ./math_tool.py
  exports:
    - name: add
      description: Add two integers.
      parameters:
        type: object
        properties: {a: {type: integer}, b: {type: integer}}
        required: [a, b]
        additionalProperties: false
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: calc-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^add (?P<a>-?\\\\d+) (?P<b>-?\\\\d+)$"}
        call: {tool: math__add, args: {a: "{a:int}", b: "{b:int}"}}
      - when: {toolResult: math__add, status: ok}
        reply: "the sum is {result.sum}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: calc}
spec:
  modelConfig: {modelRef: Model/calc-brain}
  prompt: {system: "INSTRUCTIONS"}
  tools: [Tool/math]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: peers}
spec:
  entryAgent: Agent/calc
  agents: [Agent/calc]
""".replace("INSTRUCTIONS", INSTRUCTIONS)

TOOL_MODULE = """\
from tools_base import JsonObject, JsonValue, ToolContext


async def add(ctx: ToolContext, input: JsonObject) -> JsonValue:
    return {"sum": input["a"] + input["b"]}


handlers = {"add": add}
"""


class WrongTurn(RuntimeError):
    """A contender did not do the work (no tool call, or a wrong answer): its time is void."""


class NetworkAttempted(RuntimeError):
    """A contender tried to reach the network (telemetry left on, say): the run is void."""


def expect(condition: bool, what: object) -> None:
    """Fail the run when a Turn did not do what every contender must."""
    if not condition:
        raise WrongTurn(repr(what))


def operands(text: object) -> tuple[int, int]:
    """The two numbers of the user's ``add A B`` (what a model reads from the conversation)."""
    match = INPUT.match(text) if isinstance(text, str) else None
    if match is None:
        raise WrongTurn(f"not a question of this benchmark: {text!r}")
    return int(match[1]), int(match[2])


def question(n: int) -> tuple[str, str]:
    """The input of Turn ``n`` and the answer it must get."""
    return f"add {n} 7", f"the sum is {n + 7}"


def forbid_network() -> None:
    """Refuse every IP connection and name lookup from this process (Unix sockets and pipes,
    which the daemon uses, stay allowed).

    The figures must not include a peer's telemetry upload, and nothing here may leave the
    machine; a contender that tries fails the run loudly instead of being quietly slower.
    """
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(sock: Any, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise NetworkAttempted(f"connection attempted to {address!r}")

    def guarded_connect(sock: Any, address: Any) -> None:
        refuse(sock, address)
        connect(sock, address)

    def guarded_connect_ex(sock: Any, address: Any) -> int:
        refuse(sock, address)
        result: int = connect_ex(sock, address)
        return result

    def no_lookup(*args: Any, **kwargs: Any) -> Any:
        raise NetworkAttempted(f"network use attempted: {args[:2]!r}")

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = no_lookup
    socket.create_connection = no_lookup


@dataclass
class Contender:
    """One way of running the Turn."""

    key: str
    """Prefix of its keys in the JSON figures."""
    label: str
    turn: Callable[[int], Awaitable[float]]
    """Runs Turn ``n``, checks it, and returns how long the Turn itself took (seconds)."""
    stop: Callable[[], Awaitable[None]] | None = None
    samples: list[float] = field(default_factory=list)


# -- 1. OpenAI Agents SDK ------------------------------------------------------------------


def openai_agents() -> Contender:
    from agents import (
        Agent,
        ModelResponse,
        RunConfig,
        Runner,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    calls = [0]

    @function_tool
    async def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        calls[0] += 1
        return {"sum": a + b}

    class OfflineModel(Model):
        """Calls ``add`` for the user's ``add A B``; answers from the tool's output."""

        async def get_response(
            self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            expect(system_instructions == INSTRUCTIONS, system_instructions)
            last = input[-1]
            if last.get("type") == "function_call_output":
                # The SDK hands a tool's dict back as its str(); read the sum from that text.
                total = int(re.findall(r"-?\d+", last["output"])[-1])
                item: Any = ResponseOutputMessage(
                    id="msg_1",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            text=f"the sum is {total}", type="output_text", annotations=[]
                        )
                    ],
                )
            else:
                a, b = operands(last.get("content"))
                arguments = json.dumps({"a": a, "b": b})
                item = ResponseFunctionToolCall(
                    id="fc_1",
                    call_id="call_1",
                    type="function_call",
                    name="add",
                    arguments=arguments,
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    agent = Agent(name="calc", instructions=INSTRUCTIONS, model=OfflineModel(), tools=[add])
    config = RunConfig(tracing_disabled=True)

    async def turn(n: int) -> float:
        text, expected = question(n)
        before = calls[0]
        started = time.perf_counter()
        result = await Runner.run(agent, text, run_config=config)
        elapsed = time.perf_counter() - started
        expect(result.final_output == expected, result.final_output)
        expect(calls[0] == before + 1, "the tool did not run exactly once")
        return elapsed

    return Contender("openai_agents", "OpenAI Agents SDK (fake Model)", turn)


# -- 2. Pydantic AI ------------------------------------------------------------------------


def pydantic_ai() -> Contender:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    calls = [0]

    def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Calls ``add`` for the user's ``add A B``; answers from the tool's output."""
        first, last = messages[0], messages[-1]
        if not isinstance(first, ModelRequest) or first.instructions != INSTRUCTIONS:
            raise WrongTurn(f"no instructions: {first!r}")
        if not isinstance(last, ModelRequest):
            raise WrongTurn(f"the model asked twice in a row: {last!r}")
        part = last.parts[-1]
        if isinstance(part, ToolReturnPart):
            output: Any = part.content
            return ModelResponse(parts=[TextPart(f"the sum is {output['sum']}")])
        if not isinstance(part, UserPromptPart):
            raise WrongTurn(f"neither the question nor a tool result: {part!r}")
        a, b = operands(part.content)
        return ModelResponse(parts=[ToolCallPart("add", {"a": a, "b": b}, tool_call_id="c1")])

    agent = Agent(FunctionModel(offline_model), instructions=INSTRUCTIONS)

    @agent.tool_plain
    async def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        calls[0] += 1
        return {"sum": a + b}

    async def turn(n: int) -> float:
        text, expected = question(n)
        before = calls[0]
        started = time.perf_counter()
        result = await agent.run(text)
        elapsed = time.perf_counter() - started
        expect(result.output == expected, result.output)
        expect(calls[0] == before + 1, "the tool did not run exactly once")
        return elapsed

    return Contender("pydantic_ai", "Pydantic AI (FunctionModel)", turn)


# -- 3. goondan, one Turn in process -------------------------------------------------------


async def goondan_inprocess(
    bundle_path: Path,
    state: Path,
    *,
    key: str,
    label: str,
    profiler: cProfile.Profile | None = None,
) -> Contender:
    """Turns of the runner the agent would build from ``bundle_path``, each on a fresh
    conversation under ``state`` (``profiler``: enabled for each Turn and nothing else)."""
    from multiprocessing import Pipe

    from agent_process.conversation import ConversationStore
    from agent_process.main import AgentProcess
    from agent_process.turn import TurnInput, TurnRunner
    from bundle import load_bundle
    from ipc import ORCHESTRATOR, Channel

    plan = load_bundle(bundle_path).agent_plan("calc", state, "peers")
    process = AgentProcess(plan)
    # The agent's pipe to the Orchestrator, as the agent opens it; nobody reads the other end
    # (a Turn run here reports nothing on it).
    agent_end, orchestrator_end = Pipe()
    process.channel = await Channel.open(agent_end, ORCHESTRATOR)
    process.boot()  # the registry, model, executor and Step settings the agent would run
    assert process.turns is not None
    assert process.executor is not None
    executor = process.executor
    runner = TurnRunner(process.turns.settings, max_steps=plan.max_steps_per_turn)
    workdir = state / "workspace"
    workdir.mkdir(parents=True)

    async def turn(n: int) -> float:
        text, expected = question(n)
        store = ConversationStore(state / "conversations" / str(n))
        store.load()  # as an instance's first Turn finds it
        turn_input = TurnInput(text=text)
        if profiler is not None:
            profiler.enable()
        started = time.perf_counter()
        result = await runner.run("default", store, workdir, turn_input)
        elapsed = time.perf_counter() - started
        if profiler is not None:
            profiler.disable()
        expect(result.status == "ok", result)
        expect(result.text == expected, result)
        on_disk = [m.role for m in store.load()]
        expect(on_disk == ["system", "user", "assistant", "tool", "assistant"], on_disk)
        return elapsed

    async def stop() -> None:
        await executor.aclose()
        process.channel.close()
        orchestrator_end.close()

    return Contender(key, label, turn, stop)


BASE_BYTES = 1300
"""About the size of the folded conversation of one Turn here (five messages)."""


def durable_write_floor(state: Path) -> Contender:
    """What the fold of one Turn cannot do without, timed alike: a new file of the same
    size written, fsynced, renamed into place, and its directory fsynced."""
    data = b"x" * BASE_BYTES

    async def turn(n: int) -> float:
        directory = state / str(n)
        directory.mkdir(parents=True)  # as ConversationStore.load makes it, before the Turn
        started = time.perf_counter()
        tmp = directory / "base.jsonl.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / "base.jsonl")
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return time.perf_counter() - started

    return Contender("durable_write_floor", "  its disk floor (fold's fsyncs alone)", turn)


def memory_directory() -> Path | None:
    """A tmpfs to keep conversations in, where an fsync waits for no disk (``None``: none)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


# -- 4. goondan, the same Turn through the daemon -----------------------------------------


async def goondan_daemon(bundle_path: Path, state: Path) -> Contender:
    from ipc.protocol import ORCHESTRATOR
    from ipc.questions import PrepareInstance
    from orchestrator.daemon import Orchestrator

    orchestrator = Orchestrator.from_bundle(bundle_path, state_dir=state)
    await orchestrator.start()  # the fork server's cold start and the agent's spawn, once

    async def turn(n: int) -> float:
        text, expected = question(n)
        key = f"turn-{n}"
        # A fresh conversation, loaded beforehand as the in-process one is.
        await orchestrator.router.ask("calc", PrepareInstance(key, None, ORCHESTRATOR, key))
        started = time.perf_counter()
        answer = await orchestrator.request(text, instance_key=key)
        elapsed = time.perf_counter() - started
        expect(answer.ok, answer)
        expect(answer.output == expected, answer)
        return elapsed

    return Contender(
        "goondan_daemon", "goondan Turn, through the daemon", turn, orchestrator.shutdown
    )


# -- measuring -----------------------------------------------------------------------------


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and p99 of ``samples`` (seconds), in µs."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e6, p99 * 1e6


def write_bundle(directory: Path) -> Path:
    """The agent's bundle and its tool module in ``directory``; the bundle's path."""
    (directory / "math_tool.py").write_text(TOOL_MODULE)
    path = directory / "goondan.yaml"
    path.write_text(BUNDLE)
    return path


async def measure(turns: int, warmup: int, rounds: int) -> dict[str, Any]:
    """Warm every contender up, then ``turns`` Turns of each in ``rounds`` interleaved rounds."""
    with contextlib.ExitStack() as cleanup:
        directory = Path(cleanup.enter_context(tempfile.TemporaryDirectory()))
        bundle_path = write_bundle(directory)
        contenders = [
            openai_agents(),
            pydantic_ai(),
            await goondan_inprocess(
                bundle_path, directory / "inprocess", key=OURS, label="goondan Turn, in process"
            ),
        ]
        contenders.append(durable_write_floor(directory / "floor"))
        memory = memory_directory()
        if memory is not None:
            on_tmpfs = Path(cleanup.enter_context(tempfile.TemporaryDirectory(dir=memory)))
            contenders.append(
                await goondan_inprocess(
                    bundle_path, on_tmpfs, key=f"{OURS}_tmpfs", label="  same, on tmpfs (CPU only)"
                )
            )
        try:
            contenders.append(await goondan_daemon(bundle_path, directory / "daemon"))
            n = 0
            for contender in contenders:
                for _ in range(warmup):
                    await contender.turn(n)
                    n += 1
            # What every contender keeps for good goes out of the collector's way, as the
            # daemon does for its own at start.
            gc.collect()
            gc.freeze()
            per_round = -(-turns // rounds)
            for index in range(rounds):
                first = index % len(contenders)
                for contender in contenders[first:] + contenders[:first]:
                    for _ in range(min(per_round, turns - len(contender.samples))):
                        contender.samples.append(await contender.turn(n))
                        n += 1
        finally:
            for contender in contenders:
                if contender.stop is not None:
                    await contender.stop()
    ours = summary(next(c for c in contenders if c.key == OURS).samples)[0]
    figures: dict[str, Any] = {"turns": turns, "machine": machine(directory)}
    for contender in contenders:
        median, p99 = summary(contender.samples)
        figures[f"{contender.key}_turn_us"] = round(median, 1)
        figures[f"{contender.key}_turn_p99_us"] = round(p99, 1)
        figures[f"{contender.key}_ratio_to_ours"] = round(median / ours, 3)
    figures["labels"] = {c.key: c.label for c in contenders}
    return figures


async def profile(turns: int, warmup: int, top: int) -> None:
    """Our in-process Turn (on disk) under cProfile: the top entries, by own and by
    cumulative time."""
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        bundle_path = write_bundle(directory)
        warm = await goondan_inprocess(bundle_path, directory / "warm", key=OURS, label="")
        for n in range(warmup):
            await warm.turn(n)
        ours = await goondan_inprocess(
            bundle_path, directory / "state", key=OURS, label="", profiler=profiler
        )
        total = 0.0
        for n in range(turns):
            total += await ours.turn(n)
        for contender in (warm, ours):
            assert contender.stop is not None
            await contender.stop()
    print(f"{turns} Turns in process, {total / turns * 1e6:.0f} µs each under the profiler")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def machine(state: Path) -> dict[str, Any]:
    """What the figures were measured on."""
    from importlib.metadata import version

    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as cpuinfo:
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "conversations_on": filesystem(state),
        "openai_agents": version("openai-agents"),
        "pydantic_ai": version("pydantic-ai-slim"),
    }


def filesystem(path: Path) -> str:
    """The type of the file system ``path`` is on (``ext4``, ``tmpfs``, ...), if known."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and str(path).startswith(fields[1]) and len(fields[1]) > len(best):
                best, kind = fields[1], fields[2]
    return kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500, help="measured Turns per contender")
    parser.add_argument("--warmup", type=int, default=50, help="Turns per contender first")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--profile", action="store_true", help="profile our in-process Turn instead (cProfile)"
    )
    parser.add_argument("--quick", action="store_true", help="20 Turns each, for CI: some seconds")
    options = parser.parse_args()
    if options.quick:
        options.turns, options.warmup, options.rounds = 20, 3, 2
    missing = [dist for module, dist in PEERS.items() if importlib.util.find_spec(module) is None]
    if missing and not options.profile:
        sys.exit(
            f"benchmarks/peers.py compares with peers that are not installed "
            f"({', '.join(missing)}): pip install -e '.[bench]'"
        )
    os.environ.setdefault("GOONDAN_LOG_LEVEL", "warning")  # the agent's too: no line per Turn
    from ipc.logs import configure_logging

    configure_logging()
    forbid_network()
    import uvloop

    if options.profile:
        uvloop.run(profile(options.turns, options.warmup, top=30))
        return
    figures = uvloop.run(measure(options.turns, options.warmup, max(1, options.rounds)))
    if options.json:
        print(json.dumps(figures))
        return
    m = figures["machine"]
    print(
        f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, conversations on "
        f"{m['conversations_on']}; openai-agents {m['openai_agents']}, pydantic-ai-slim "
        f"{m['pydantic_ai']}; {figures['turns']} Turns each"
    )
    print(
        f"{'one Turn: a tool call, then an answer':<40} {'median µs':>10} {'p99 µs':>9} {'× ours':>7}"
    )
    for key, label in figures["labels"].items():
        print(
            f"{label:<40} {figures[f'{key}_turn_us']:>10.0f} "
            f"{figures[f'{key}_turn_p99_us']:>9.0f} {figures[f'{key}_ratio_to_ours']:>7.2f}"
        )


if __name__ == "__main__":
    main()
