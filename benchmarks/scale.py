"""A swarm of many agents, all started: how long until every one is ready, what they cost in
memory, how long ``status`` takes against that daemon, and whether idle agents slow a delegate.

The swarm: ``--agents`` real AgentProcesses (one scripted Model, the ``agents`` and
``file-system`` built-in tools each, a system prompt), plus the ``pinger`` and ``echo``
benchmark agents of ``benchmarks/_ipc_agents.py`` (real Channel, real messages, no Turn) to
time delegate round trips through the real Orchestrator. Everything runs in one real
Orchestrator (this process) with its HTTP API on its Unix socket. One ``goondan.yaml`` holds
at most 100 documents, so the file declares the first agent and every other one gets a copy
of its plan under its own name, each plan listing all the swarm's agents as a declared swarm
of that size would.

1. ``pinger`` and ``echo`` start; ``--count`` delegate round trips with only them running.
2. All ``--agents`` agents start at once (``Supervisor.ensure_running`` of each, concurrently,
   as when they all get their first request together): ``all_ready_s``.
3. ``total_pss_mib``: the PSS of every process of the swarm (the daemon, its fork server, every
   agent), after a second of idling; ``agent_faults_median``: the minor page faults of an
   agent by then (mostly the fork server's pages it copied by writing to them).
4. ``status_ms``: the median wall time of ``python -m orchestrator status --json`` run as a
   subprocess against this daemon, exactly what an operator waits for (interpreter start,
   the HTTP request on ``api.sock``, printing every row), with the modules' bytecode cached
   as an installed package has it; ``status_uncached_ms``: the same compiling every module
   from source each time; ``status_api_ms``: the HTTP request alone, from a client already
   running.
5. The same delegate round trips with every agent idle, then once more after they all
   stopped (``all_stopped_s``): ``delegate_rtt_ratio_500_vs_2`` = median round trip with all
   agents up / median of the two series with only two (one before, one after, so a change in
   the machine's load meanwhile weighs on both sides).

Every delegate's answer is checked, and a few agents each answer a request once all are up.
Run: ``python benchmarks/scale.py [--agents 500] [--json] [--quick]`` (``--quick``: 3 agents,
200 round trips, for CI). Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing.forkserver
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._checks import expect
from benchmarks._process_figures import cpu_ms, descendants, memory_mib, minor_faults
from benchmarks._split_transport import SplitTransport
from bundle.plan import AgentPlan
from ipc import EventMessage, IpcMessage
from orchestrator.plans import SharedParts
from orchestrator.supervisor import Supervisor

BENCH_AGENTS = ("pinger", "echo")
STATUS_RUNS = 7
"""Runs of ``status`` per figure (its median); ``--quick`` makes it 2."""
CHECKED_AGENTS = 5
"""About how many of the swarm's agents answer a request, checked, once all are up."""

MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {toolResult: agents__request}
        reply: "{result.response}"
      - when: {toolResult: file-system__write}
        reply: "wrote {result.size} bytes"
      - reply: "got: {input}"
"""

AGENT = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/brain}}
  prompt: {{system: "You are {name}, one agent of a large swarm."}}
  tools:
    - {{ref: {{kind: Tool, name: agents, package: "@goondan/base"}}}}
    - {{ref: {{kind: Tool, name: file-system, package: "@goondan/base"}}}}
"""


def write_swarm(directory: Path, agents: list[str]) -> Path:
    """``goondan.yaml`` with ``agents`` plus the two benchmark agents; echo is the entry."""
    documents = [MODEL]
    documents += [AGENT.format(name=name) for name in [*BENCH_AGENTS, *agents]]
    names = ", ".join(f"Agent/{name}" for name in [*BENCH_AGENTS, *agents])
    documents.append(
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\n"
        f"spec:\n  entryAgent: Agent/echo\n  agents: [{names}]\n"
    )
    path = directory / "goondan.yaml"
    path.write_text("".join(documents))
    return path


async def _delegate_round_trips(orchestrator: Any, done: dict[str, Any], count: int) -> list[float]:
    """Start ``pinger`` afresh, let it time ``count`` delegates to ``echo``.

    A pinger times one series and then only waits for its shutdown: each series gets a new one.
    """
    supervisor = orchestrator.supervisor
    if supervisor.handle("pinger").worker is not None:
        await supervisor.stop_agent("pinger", 5, "benchmark")
    pinger = await supervisor.ensure_running("pinger")
    future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
    done["future"] = future
    assert pinger.worker is not None
    start = {"kind": "bench_start", "count": count}
    pinger.worker.send(EventMessage(sender="orchestrator", to="pinger", payload=start))
    return await asyncio.wait_for(future, 300)


async def _status_api_ms(state_dir: Path, runs: int) -> float:
    """Median time of ``GET /v1/agents`` alone (the CLI's request, from a warm client)."""
    from orchestrator.http.client import DaemonApi

    api = DaemonApi(state_dir)
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        status, _ = await asyncio.to_thread(api.call, "GET", "/v1/agents")
        times.append((time.perf_counter() - started) * 1000)
        expect(status == 200, status)
    return statistics.median(times)


async def _status_ms(
    bundle: Path, state_dir: Path, runs: int, *, bytecode_cache: Path | None
) -> tuple[float, int]:
    """Median wall time of the ``status`` CLI against the running daemon, and its row count.

    With ``bytecode_cache``, modules are compiled once into it (one run first, not counted),
    as an installed package has its bytecode; without, every run compiles every module it
    imports from source (what ``PYTHONDONTWRITEBYTECODE=1`` without bytecode on disk costs).
    """
    env = dict(os.environ)
    if bytecode_cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(state_dir / "no-bytecode-here")
    command = [sys.executable, "-m", "orchestrator", "status"]
    command += ["-c", str(bundle), "--state-dir", str(state_dir), "--json"]
    times: list[float] = []
    rows = 0
    for run in range(runs + (bytecode_cache is not None)):
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, env=env
        )
        output, _ = await process.communicate()
        elapsed = (time.perf_counter() - started) * 1000
        expect(process.returncode == 0, process.returncode)
        rows = len(json.loads(output)["agents"])
        if run or bytecode_cache is None:
            times.append(elapsed)
    return statistics.median(times), rows


async def _run(agents: int, count: int, status_runs: int) -> dict[str, Any]:
    from orchestrator.daemon import Orchestrator

    names = [f"agent-{n:04d}" for n in range(agents)]
    out: dict[str, Any] = {"agents": agents}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        bundle = write_swarm(directory, names[:1])
        state_dir = directory / "state"
        transport = SplitTransport(
            {name: f"benchmarks._ipc_agents:{name}" for name in BENCH_AGENTS}
        )
        orchestrator = Orchestrator.from_bundle(bundle, state_dir=state_dir, transport=transport)
        await _grow(orchestrator.supervisor, names)
        done: dict[str, Any] = {}
        dispatch = orchestrator.dispatch

        def on_message(sender: str, message: IpcMessage) -> None:
            if isinstance(message, EventMessage) and message.kind == "bench_done":
                expect(not message.payload.get("wrong"), message.payload.get("wrong"))
                done["future"].set_result(list(message.payload["samples"]))
            else:
                dispatch(sender, message)

        orchestrator.supervisor.on_message = on_message
        await orchestrator.start()
        supervisor = orchestrator.supervisor
        try:
            two = await _delegate_round_trips(orchestrator, done, count)

            fork_server = _fork_server_pid()
            fork_server_cpu = cpu_ms(fork_server)
            daemon_cpu = time.process_time()
            started = time.perf_counter()
            await asyncio.gather(*(supervisor.ensure_running(name) for name in names))
            out["all_ready_s"] = round(time.perf_counter() - started, 3)
            # Where the CPU time of starting them went (ms per agent).
            out["start_cpu_ms_per_agent"] = {
                "daemon": round((time.process_time() - daemon_cpu) * 1000 / agents, 2),
                "fork_server": round((cpu_ms(fork_server) - fork_server_cpu) / agents, 2),
                "agent": round(
                    statistics.median(
                        cpu_ms(pid) for n in names if (pid := supervisor.handle(n).pid)
                    ),
                    2,
                ),
            }

            await asyncio.sleep(1.0)
            # Every process of the swarm: the daemon and all it started (the fork server,
            # multiprocessing's resource tracker, the agents, the spare process).
            pids = descendants(os.getpid())
            memory = {pid: memory_mib(pid) for pid in pids}
            agent_memory = [memory[h.pid] for h in supervisor.handles() if h.pid in memory]
            out["total_pss_mib"] = round(sum(m["Pss"] for m in memory.values()), 1)
            out["daemon_pss_mib"] = round(memory[os.getpid()]["Pss"], 1)
            out["fork_server_pss_mib"] = round(memory[_fork_server_pid()]["Pss"], 1)
            out["agent_pss_mib_median"] = round(
                statistics.median(m["Pss"] for m in agent_memory), 2
            )
            out["agent_uss_mib_median"] = round(
                statistics.median(m["Uss"] for m in agent_memory), 2
            )
            out["processes"] = len(pids)
            # Each page an agent copied from the fork server was one minor fault (and some
            # were its own new pages): the count says how much of the preload it wrote to.
            out["agent_faults_median"] = statistics.median(
                minor_faults(h.pid) for h in supervisor.handles() if h.pid in memory
            )

            many = await _delegate_round_trips(orchestrator, done, count)
            # Started is not enough: a few of them (spread over the swarm) run a Turn each.
            for name in names[:: max(1, agents // CHECKED_AGENTS)]:
                answer = await orchestrator.request("hello", agent=name, instance_key="check")
                expect(answer.ok and answer.output == "got: hello", (name, answer))

            status_ms, rows = await _status_ms(
                bundle, state_dir, status_runs, bytecode_cache=directory / "bytecode"
            )
            out["status_ms"] = round(status_ms, 1)
            out["status_rows"] = rows
            uncached_ms, _ = await _status_ms(bundle, state_dir, status_runs, bytecode_cache=None)
            out["status_uncached_ms"] = round(uncached_ms, 1)
            out["status_api_ms"] = round(await _status_api_ms(state_dir, status_runs), 1)

            started = time.perf_counter()
            await asyncio.gather(*(supervisor.stop_agent(n, 10, "benchmark") for n in names))
            out["all_stopped_s"] = round(time.perf_counter() - started, 3)
            two += await _delegate_round_trips(orchestrator, done, count)
        finally:
            await orchestrator.shutdown()
            await transport.close()
    rtt_two, rtt_many = statistics.median(two), statistics.median(many)
    out["delegate_rtt_us_2"] = round(rtt_two * 1e6, 1)
    out[f"delegate_rtt_us_{agents}"] = round(rtt_many * 1e6, 1)
    out[f"delegate_rtt_ratio_{agents}_vs_2"] = round(rtt_many / rtt_two, 3)
    return out


async def _grow(supervisor: Supervisor, names: list[str]) -> None:
    """Give the supervisor every agent of ``names``, each with the plan ``Orchestrator``
    would build for it were it declared like the first: a plan of its own (a deep copy, with
    its own list of the swarm's agents), its common parts shared as ``build_plans`` shares
    them. Nothing runs yet, so adopting the plans starts nothing."""
    everyone = sorted({*supervisor.names(), *names})
    first = supervisor.handle(names[0])
    assert first is not None
    template = first.plan
    assert isinstance(template, AgentPlan)
    parts = SharedParts()
    plans: dict[str, AgentPlan] = {}
    for name in everyone:
        handle = supervisor.handle(name)
        plan = handle.plan if handle is not None else template
        assert isinstance(plan, AgentPlan)
        update = {"agents": list(everyone), "agent_name": name}
        plans[name] = parts.share(plan.model_copy(update=update, deep=True))
    await supervisor.replace_plans(plans, grace=0)


def _fork_server_pid() -> int:
    pid = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert isinstance(pid, int)
    return pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--count", type=int, default=2000, help="delegate round trips per phase")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="3 agents, 200 round trips, for CI")
    options = parser.parse_args()
    if options.quick:
        options.agents, options.count = 3, 200
    from ipc.logs import configure_logging

    configure_logging("warning")
    import uvloop

    status_runs = 2 if options.quick else STATUS_RUNS
    result = uvloop.run(_run(options.agents, options.count, status_runs))
    if options.json:
        print(json.dumps(result))
        return
    n = options.agents
    print(f"swarm of {n} agents (+ pinger and echo), all started")
    print(f"  all ready after                  {result['all_ready_s']:>9.2f} s")
    cpu = result["start_cpu_ms_per_agent"]
    print(
        f"  CPU per agent started            daemon {cpu['daemon']} ms, fork server "
        f"{cpu['fork_server']} ms, the agent itself {cpu['agent']} ms (median)"
    )
    print(
        f"  total PSS                        {result['total_pss_mib']:>9.1f} MiB "
        f"(daemon {result['daemon_pss_mib']}, fork server {result['fork_server_pss_mib']}, "
        f"agent median {result['agent_pss_mib_median']} PSS / {result['agent_uss_mib_median']} USS)"
    )
    print(f"  minor page faults per agent      {result['agent_faults_median']:>9.0f} (median)")
    print(
        f"  `status` CLI (subprocess)        {result['status_ms']:>9.1f} ms "
        f"({result['status_rows']} rows; without bytecode {result['status_uncached_ms']} ms; "
        f"the HTTP request alone {result['status_api_ms']} ms)"
    )
    print(f"  all stopped after                {result['all_stopped_s']:>9.2f} s")
    print(
        f"  delegate round trip, 2 agents    {result['delegate_rtt_us_2']:>9.1f} µs\n"
        f"  ... with {n} idle agents        {result[f'delegate_rtt_us_{n}']:>9.1f} µs "
        f"(ratio {result[f'delegate_rtt_ratio_{n}_vs_2']:.3f})"
    )


if __name__ == "__main__":
    main()
