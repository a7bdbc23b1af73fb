"""The permit a model call takes under shared rate limits, against a pipe and a model call.

A Model with ``spec.limits`` makes each of its agents ask the Orchestrator for a permit before
every model call (``model_permit`` → ``model_permit_result``) and give it back after
(``model_usage``, fire-and-forget). Measured in one run, each beside what it is compared with:

1. **the floor**: a raw ``multiprocessing.Pipe`` round trip of a ~200-byte msgpack message
   between two bare processes (``benchmarks/_ipc_baselines.py``); a permit is one such round
   trip, agent → Orchestrator → agent;
2. **the permit round trip alone**: a probe agent on the real channel asks the real
   Orchestrator (dispatch, broker, router) for permits one after another, from a pool with
   ``maxConcurrent: 1000`` and from one with ``requestsPerMinute`` and ``tokensPerMinute`` set
   too high to ever block (so the bucket arithmetic runs, nothing waits)
   (``benchmarks/_permit_probe.py``);
3. **the permit as an agent pays it**: real AgentProcesses on the offline ``scripted`` model,
   one model call per Turn, whose Models differ only in their limits (none: no permit is asked;
   ``maxConcurrent: 1000``; the two per-minute buckets), requests taking turns so drift hits all
   alike. The difference of the median request times is the permit's cost per model call, the
   governor's work included (the token estimate of a ``tokensPerMinute`` pool reads the whole
   conversation);
4. **a model call**: the cheapest real one, the ``openai`` provider (the official SDK) against
   a Chat Completions server on 127.0.0.1 that answers at once, on a kept-alive connection
   (``benchmarks/_chat_server.py``), one user message per call. The permit is stated as a
   percentage of it. A hosted provider's call is some hundred times slower still (the network,
   its queues, the model's own time), so against a real call the permit's share shrinks by as
   much;
5. **contention**: K agents share one pool with ``maxConcurrent: 1``, each asked as fast as it
   answers, the server taking ``--call-ms`` per call to stand for a model (each request opens
   a conversation of its own, so every call sends one message). The server counts how many
   calls it ever had at once (it must be 1); the run reads calls per second against the ideal,
   1 / (one call's time alone, SDK included). What is missing is the handover between two
   calls: the usage report that returns the permit (written out the moment the call ends), the
   grant to the next agent, its SDK preparing the request, and every process sharing the
   machine's cores. The same K agents without limits are shown beside.

Run: ``python benchmarks/permits.py [--requests N] [--permits N] [--calls N] [--agents K]
[--call-ms MS] [--seconds S] [--json] [--quick]``. Prints figures and ratios; gates nothing.
``--quick`` runs small counts (20 Turns per variant, 200 permits, 2 agents for 0.5 s). Every
answer is checked, and that each limited Turn took its permit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

from agent_process.models.base import ModelRequest  # noqa: E402
from agent_process.models.openai_chat import OpenAIChatModel  # noqa: E402
from benchmarks import _ipc_baselines as baselines  # noqa: E402
from benchmarks._chat_server import serve  # noqa: E402
from benchmarks._checks import expect  # noqa: E402
from benchmarks._split_transport import SplitTransport  # noqa: E402
from bundle.plan import AgentPlan, ModelPlan  # noqa: E402
from bundle.spec_agent import ModelSpec  # noqa: E402
from ipc.logs import configure_logging  # noqa: E402
from orchestrator.daemon import Orchestrator  # noqa: E402
from orchestrator.transport import MultiprocessingTransport  # noqa: E402
from tools_base import Message  # noqa: E402

PROBE = "probe"
PROBE_ENTRY = "benchmarks._permit_probe:probe"
INSTANT_MODEL = "instant"
"""The server answers this model at once (``wait-<ms>``: after that long)."""
ESTIMATED_TOKENS = 40
"""The probe's token estimate per call (about a short Turn's)."""
VARIANTS = {
    "none": "free",
    "maxConcurrent": "capped",
    "buckets": "metered",
}
"""How each Turn variant's Model is limited → its Model's (and agent's) name."""
LIMITS = {
    "free": None,
    "capped": "{maxConcurrent: 1000}",
    "metered": "{requestsPerMinute: 1000000, tokensPerMinute: 1000000000}",
}

MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: {name}}}
spec:
{spec}
"""
AGENT = """\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/{model}}}
"""
SWARM = """\
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/{entry}
  agents: [{agents}]
"""


def swarm_yaml(url: str, agents: int, call_ms: int) -> tuple[str, list[str]]:
    """goondan.yaml of every agent measured here, and the agents' names.

    ``free``, ``capped`` and ``metered`` run the scripted model under the limits of
    :data:`LIMITS`; ``probe`` is the probe agent (its Model only names a pool); ``w0``… share
    the ``serial`` pool (``maxConcurrent: 1``) and ``u0``… the same Model without limits, both
    on the local server, which takes ``call_ms`` per call for them.
    """
    documents: list[str] = []
    names: list[str] = []
    for name, limits in LIMITS.items():
        spec = "  provider: scripted\n  model: rules\n  script: {rules: [{reply: ok}]}\n"
        if limits is not None:
            spec += f"  limits: {limits}\n"
        documents.append(MODEL.format(name=name, spec=spec))
        documents.append(AGENT.format(name=name, model=name))
        names.append(name)
    documents.append(AGENT.format(name=PROBE, model="capped"))
    names.append(PROBE)
    remote = (
        f"  provider: openai\n  model: wait-{call_ms}\n  baseUrl: {url}/v1\n"
        "  apiKey: {value: sk-local}\n"
    )
    documents.append(MODEL.format(name="serial", spec=remote + "  limits: {maxConcurrent: 1}\n"))
    documents.append(MODEL.format(name="open", spec=remote))
    for index in range(agents):
        for prefix, model in (("w", "serial"), ("u", "open")):
            documents.append(AGENT.format(name=f"{prefix}{index}", model=model))
            names.append(f"{prefix}{index}")
    listed = ", ".join(f"Agent/{name}" for name in names)
    documents.append(SWARM.format(entry="free", agents=listed))
    return "---\n".join(documents), names


# -- the server ------------------------------------------------------------------------------


class ChatServer:
    """``benchmarks/_chat_server.py`` in a process of its own."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("forkserver")  # the agents' fork server
        ready, child_end = context.Pipe(duplex=False)
        self.process = context.Process(target=serve, args=(child_end,), daemon=True)
        self.process.start()
        child_end.close()
        if not ready.poll(30):
            raise RuntimeError("the Chat Completions server did not start")
        self.url = f"http://127.0.0.1:{ready.recv()}"

    def stats(self) -> dict[str, Any]:
        """What the server saw since the last call (see ``benchmarks/_chat_server.py``)."""
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data

    def close(self) -> None:
        self.process.kill()
        self.process.join(10)


# -- measurements ------------------------------------------------------------------------------


def openai_model(url: str, model: str) -> OpenAIChatModel:
    """The ``openai`` provider as an agent builds it, pointed at the local server."""
    spec = ModelSpec.model_validate(
        {"provider": "openai", "model": model, "baseUrl": f"{url}/v1", "apiKey": {"value": "x"}}
    )
    return OpenAIChatModel(ModelPlan.of("bench", spec), agent_name="bench")


async def model_calls(url: str, model_name: str, calls: int, warm_up: int) -> list[float]:
    """Seconds of each of ``calls`` model calls one after another (after ``warm_up`` more)."""
    model = openai_model(url, model_name)
    request = ModelRequest(messages=[Message(id="m1", role="user", content="hi")], tools=())
    samples = []
    try:
        for index in range(warm_up + calls):
            started = time.perf_counter()
            response = await model.complete(request)
            if index >= warm_up:
                samples.append(time.perf_counter() - started)
            expect(response.text == "ok", response)
    finally:
        await model.client.close()
    return samples


async def probe_permits(orchestrator: Orchestrator, pool: str, count: int) -> list[float]:
    """The probe's permit round trips from ``pool``, after a warm-up."""
    samples: list[float] = []
    for number in (min(count, 200), count):
        answer = await orchestrator.request(f"{pool} {number} {ESTIMATED_TOKENS}", agent=PROBE)
        expect(answer.ok and len(answer.output) == number, answer)
        samples = [float(sample) for sample in answer.output]
    return samples


async def turns(orchestrator: Orchestrator, count: int, warm_up: int) -> dict[str, list[float]]:
    """Seconds per request of each variant's agent; the variants take turns, each round in
    another order."""
    agents = list(VARIANTS.values())
    samples: dict[str, list[float]] = {agent: [] for agent in agents}
    for index in range(warm_up + count):
        shift = index % len(agents)
        for agent in agents[shift:] + agents[:shift]:
            started = time.perf_counter()
            answer = await orchestrator.request("hi", agent=agent)
            elapsed = time.perf_counter() - started
            expect(answer.ok and answer.output == "ok", answer)
            if index >= warm_up:
                samples[agent].append(elapsed)
    return samples


async def calls_per_second(
    orchestrator: Orchestrator, server: ChatServer, prefix: str, agents: int, seconds: float
) -> tuple[float, dict[str, Any]]:
    """Turns (one model call each) answered per second with each agent ``prefix<i>`` asked by
    a caller of its own; and what the server saw meanwhile.

    Each request opens a conversation instance of its own, so every model call sends the same
    single message: the SDK's preparation of a request grows with the conversation (about half
    a millisecond per message here), which would make later calls slower than the first."""

    async def ask(index: int, sent: int) -> None:
        agent = f"{prefix}{index}"
        answer = await orchestrator.request("hi", agent=agent, instance_key=f"{agent}-{sent}")
        expect(answer.ok and answer.output == "ok", answer)

    await asyncio.to_thread(server.stats)  # counts from here
    rate = await baselines.answers_per_second(ask, agents, seconds)
    return rate, await asyncio.to_thread(server.stats)


async def in_swarm(server: ChatServer, options: argparse.Namespace) -> dict[str, Any]:
    """(2), (3) and (5) through one Orchestrator running every agent."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        text, names = swarm_yaml(server.url, options.agents, options.call_ms)
        path = directory / "goondan.yaml"
        path.write_text(text)
        transport = SplitTransport({PROBE: PROBE_ENTRY})
        orchestrator = Orchestrator.from_bundle(
            path, state_dir=directory / "state", transport=transport
        )
        await orchestrator.start()
        try:
            for name in names:
                await orchestrator.supervisor.ensure_running(name)
            # Each agent's first Turn builds its provider (the openai SDK's import, for some).
            remote = [name for name in names if name not in LIMITS and name != PROBE]
            for answer in await asyncio.gather(
                *(orchestrator.request("hi", agent=name) for name in remote)
            ):
                expect(answer.ok and answer.output == "ok", answer)
            for agent in VARIANTS.values():  # only the agents under limits ask
                plan = orchestrator.supervisor.handle(agent).plan
                assert isinstance(plan, AgentPlan)
                expect(plan.ask_permits == (agent != "free"), agent)
            pools = orchestrator.broker.pools
            out["probe"] = {
                "maxConcurrent": await probe_permits(orchestrator, "capped", options.permits),
                "buckets": await probe_permits(orchestrator, "metered", options.permits),
            }
            granted = {name: pools[name].granted for name in ("capped", "metered")}
            out["turns"] = await turns(orchestrator, options.requests, options.warm_up)
            for name in ("capped", "metered"):  # every Turn of these took a permit
                taken = pools[name].granted - granted[name]
                expect(taken == options.requests + options.warm_up, (name, taken))
                expect(pools[name].waited == 0, pools[name].snapshot(0))
            expect("free" not in pools, sorted(pools))
            serial = pools["serial"]
            before = serial.granted, serial.waited, serial.wait_seconds
            rate, seen = await calls_per_second(
                orchestrator, server, "w", options.agents, options.seconds
            )
            waited = serial.waited - before[1]
            out["serial"] = {
                "calls_per_s": rate,
                "max_in_flight": seen["maxInFlight"],
                "server_gap_ms": seen["idleGapMedianMs"],
                "granted": serial.granted - before[0],
                "waited": waited,
                "mean_wait_ms": (serial.wait_seconds - before[2]) / max(waited, 1) * 1000,
            }
            rate, seen = await calls_per_second(
                orchestrator, server, "u", options.agents, options.seconds
            )
            out["open"] = {"calls_per_s": rate, "max_in_flight": seen["maxInFlight"]}
        finally:
            await orchestrator.shutdown()
            await transport.close()
    return out


# -- the run ------------------------------------------------------------------------------------


def measure(options: argparse.Namespace) -> dict[str, Any]:
    # Agents log each Turn at info: not here (the fork server passes this on to them).
    os.environ.setdefault("GOONDAN_LOG_LEVEL", "warning")
    configure_logging()
    # The fork server starts with the first process: give it the daemon's preload before that.
    MultiprocessingTransport()
    raw = baselines.summary(baselines.raw_pipe_round_trip(options.permits))
    server = ChatServer()
    try:
        warm_up = min(50, options.calls)
        instant = uvloop.run(model_calls(server.url, INSTANT_MODEL, options.calls, warm_up))
        slow_calls = min(50, options.calls)
        slow = uvloop.run(model_calls(server.url, f"wait-{options.call_ms}", slow_calls, 5))
        swarm = uvloop.run(in_swarm(server, options))
    finally:
        server.close()
    call = baselines.summary(instant)
    call_alone_ms = baselines.summary(slow)[0] / 1000
    probe = {name: baselines.summary(samples) for name, samples in swarm["probe"].items()}
    turn = {
        variant: baselines.summary(swarm["turns"][agent]) for variant, agent in VARIANTS.items()
    }
    ideal = 1000 / call_alone_ms
    serial = swarm["serial"]
    result: dict[str, Any] = {
        "raw_pipe_rtt_us": raw[0],
        "raw_pipe_p99_us": raw[1],
        "permit_rtt_us": probe["maxConcurrent"][0],
        "permit_p99_us": probe["maxConcurrent"][1],
        "permit_buckets_rtt_us": probe["buckets"][0],
        "permit_buckets_p99_us": probe["buckets"][1],
        "turn_no_limits_us": turn["none"][0],
        "turn_no_limits_p99_us": turn["none"][1],
        "turn_max_concurrent_us": turn["maxConcurrent"][0],
        "turn_max_concurrent_p99_us": turn["maxConcurrent"][1],
        "turn_buckets_us": turn["buckets"][0],
        "turn_buckets_p99_us": turn["buckets"][1],
        "permit_cost_us": turn["maxConcurrent"][0] - turn["none"][0],
        "permit_cost_buckets_us": turn["buckets"][0] - turn["none"][0],
        "model_call_us": call[0],
        "model_call_p99_us": call[1],
        "contention": {
            "agents": options.agents,
            "call_ms": options.call_ms,
            "model_call_alone_ms": call_alone_ms,
            "ideal_calls_per_s": ideal,
            "calls_per_s": serial["calls_per_s"],
            "of_ideal": serial["calls_per_s"] / ideal,
            "handover_ms": 1000 / serial["calls_per_s"] - call_alone_ms,
            "handover_server_ms": serial["server_gap_ms"],
            "max_in_flight": serial["max_in_flight"],
            "grants_waited": serial["waited"] / max(serial["granted"], 1),
            "mean_wait_ms": serial["mean_wait_ms"],
            "no_limits_calls_per_s": swarm["open"]["calls_per_s"],
            "no_limits_max_in_flight": swarm["open"]["max_in_flight"],
        },
        "requests": options.requests,
        "permits": options.permits,
        "calls": options.calls,
    }
    result["ratios"] = {
        "permit / raw pipe": result["permit_rtt_us"] / result["raw_pipe_rtt_us"],
        "permit with buckets / raw pipe": result["permit_buckets_rtt_us"]
        / result["raw_pipe_rtt_us"],
        "permit / model call, %": 100 * result["permit_rtt_us"] / result["model_call_us"],
        "permit with buckets / model call, %": 100
        * result["permit_buckets_rtt_us"]
        / result["model_call_us"],
        "cost in a Turn / model call, %": 100 * result["permit_cost_us"] / result["model_call_us"],
        "cost in a Turn with buckets / model call, %": 100
        * result["permit_cost_buckets_us"]
        / result["model_call_us"],
        "serial calls/s / ideal": result["contention"]["of_ideal"],
    }
    rounded: dict[str, Any] = _rounded(result)
    return rounded


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3 if abs(value) < 10 else 1)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def print_table(result: dict[str, Any]) -> None:
    """The human form of ``result``."""
    raw = result["raw_pipe_rtt_us"]
    ratios = result["ratios"]
    title = f"round trips, {result['permits']} each"
    print(f"{title:<48} {'median µs':>9} {'p99 µs':>9} {'× raw pipe':>10}")
    rows = [
        ("raw pipe (bare processes, ~200 B)", "raw_pipe_rtt_us", "raw_pipe_p99_us"),
        ("permit, maxConcurrent pool", "permit_rtt_us", "permit_p99_us"),
        ("permit, per-minute buckets too", "permit_buckets_rtt_us", "permit_buckets_p99_us"),
    ]
    for label, median, p99 in rows:
        print(
            f"{label:<48} {result[median]:>9,.1f} {result[p99]:>9,.1f} {result[median] / raw:>10.2f}"
        )
    print()
    print(f"request → answer, one scripted model call per Turn, {result['requests']} each")
    print(f"{'Model limits':<48} {'median µs':>9} {'p99 µs':>9} {'cost µs':>10}")
    turn_rows = [
        ("none (no permit asked)", "turn_no_limits_us", "turn_no_limits_p99_us", None),
        (
            "maxConcurrent: 1000",
            "turn_max_concurrent_us",
            "turn_max_concurrent_p99_us",
            "permit_cost_us",
        ),
        (
            "+ requestsPerMinute, tokensPerMinute",
            "turn_buckets_us",
            "turn_buckets_p99_us",
            "permit_cost_buckets_us",
        ),
    ]
    for label, median, p99, cost in turn_rows:
        extra = f"{result[cost]:>+10,.1f}" if cost else ""
        print(f"{label:<48} {result[median]:>9,.1f} {result[p99]:>9,.1f} {extra}")
    print()
    call = result["model_call_us"]
    print(f"model call: openai SDK → local server, answered at once, {result['calls']} calls")
    print(f"{'one call':<48} {call:>9,.1f} {result['model_call_p99_us']:>9,.1f}")
    print(
        f"permit round trip / model call {ratios['permit / model call, %']:.1f} % "
        f"({ratios['permit with buckets / model call, %']:.1f} % with buckets); "
        f"cost in a Turn / model call {ratios['cost in a Turn / model call, %']:.1f} % "
        f"({ratios['cost in a Turn with buckets / model call, %']:.1f} %)"
    )
    print()
    c = result["contention"]
    print(
        f"contention: {c['agents']} agents, one pool of maxConcurrent: 1, "
        f"the server takes {c['call_ms']} ms per call"
    )
    print(f"model call alone                 {c['model_call_alone_ms']:>8.2f} ms")
    print(f"ideal, 1 / model call            {c['ideal_calls_per_s']:>8.1f} calls/s")
    print(
        f"measured                         {c['calls_per_s']:>8.1f} calls/s "
        f"({100 * c['of_ideal']:.1f} % of ideal; handover {c['handover_ms']:.2f} ms per call)"
    )
    print(
        f"handover, as the server sees it  {c['handover_server_ms']:>8.2f} ms "
        "(median, an answer → the next call)"
    )
    print(f"most calls in flight at once     {c['max_in_flight']:>8}   (the server's count)")
    print(
        f"grants that waited               {100 * c['grants_waited']:>7.1f} %  "
        f"(mean wait {c['mean_wait_ms']:.1f} ms)"
    )
    print(
        f"same agents, no limits           {c['no_limits_calls_per_s']:>8.1f} calls/s, "
        f"{c['no_limits_max_in_flight']} in flight at most"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="Turns per limits variant")
    parser.add_argument("--warm-up", type=int, default=20, help="Turns per variant not counted")
    parser.add_argument("--permits", type=int, default=3000, help="probe permits per pool")
    parser.add_argument("--calls", type=int, default=500, help="model calls timed alone")
    parser.add_argument("--agents", type=int, default=4, help="agents sharing the serial pool")
    parser.add_argument("--call-ms", type=int, default=50, help="the server's time per call")
    parser.add_argument("--seconds", type=float, default=5.0, help="per contention figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="small counts, for CI: some seconds")
    options = parser.parse_args()
    if options.quick:
        options.requests, options.warm_up, options.permits = 20, 3, 200
        options.calls, options.agents, options.seconds = 20, 2, 0.5
    result = measure(options)
    if options.json:
        print(json.dumps(result))
        return
    print_table(result)


if __name__ == "__main__":
    main()
