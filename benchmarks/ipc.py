"""IPC and process costs of the daemon, each against a baseline measured in the same run.

1. raw pipe round trip between two bare processes (msgpack, ~200 B)
2. a bare asyncio broker relaying A → broker → B → broker → A
3. our delegate round trip A → Orchestrator → B → Orchestrator → A: real Channel, real
   IpcMessage validation, real Router and Supervisor, trivial handler, no model
   (ratios 3/2 and 3/1)
4. one full handoff Turn through real AgentProcesses with the scripted model (for scale)
5. spawn-to-ready of one agent and of 20 at once, crash-to-ready, idle memory of an AgentProcess

Run: ``python benchmarks/ipc.py [--count N]``. Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _ipc_baselines as baselines
from ipc import EventMessage, IpcMessage
from ipc.logs import configure_logging
from orchestrator.dispatch import Dispatcher
from orchestrator.router import Router
from orchestrator.status import ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.testing import fake_plans
from orchestrator.transport import MultiprocessingTransport


def ours(count: int) -> list[float]:
    """(3): pinger → Orchestrator (Router) → echo → Orchestrator → pinger."""
    samples: list[float] = []

    async def main() -> None:
        done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        router: Router

        def on_message(sender: str, message: IpcMessage) -> None:
            if isinstance(message, EventMessage) and message.kind == "bench_done":
                done.set_result(list(message.payload["samples"]))
            else:
                dispatch(sender, message)

        pinger_transport = MultiprocessingTransport(entry="benchmarks._ipc_agents:pinger")
        echo_transport = MultiprocessingTransport(entry="benchmarks._ipc_agents:echo")

        class Split:
            async def start(self, name: str, plan: Any, on_message: Any) -> Any:
                transport = pinger_transport if name == "pinger" else echo_transport
                return await transport.start(name, plan, on_message)

        supervisor = Supervisor(
            fake_plans("pinger", "echo"),
            Split(),
            on_message=on_message,
            on_exit=lambda name, info: router.on_agent_exit(name),
        )
        router = Router(supervisor)
        dispatch = Dispatcher(router, supervisor.event_handlers)
        pinger = await supervisor.ensure_running("pinger")
        await supervisor.ensure_running("echo")
        assert pinger.worker is not None
        start = {"kind": "bench_start", "count": count}
        pinger.worker.send(EventMessage(sender="orchestrator", to="pinger", payload=start))
        samples.extend(await asyncio.wait_for(done, 120))
        await supervisor.shutdown(2)

    uvloop.run(main())
    return samples


def swarm_figures(count: int) -> dict[str, Any]:
    """(4) and (5) with the real AgentProcess."""
    from orchestrator.daemon import Orchestrator
    from tests.support.swarm import write_swarm

    out: dict[str, Any] = {}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            orchestrator = Orchestrator(write_swarm(directory), state_dir=directory / "state")
            await orchestrator.start()  # pays the fork server's cold start once
            supervisor = orchestrator.supervisor
            started = time.perf_counter()
            await supervisor.ensure_running("beta")
            out["spawn_one_ms"] = (time.perf_counter() - started) * 1000
            turns = []
            for _ in range(count):
                started = time.perf_counter()
                answer = await orchestrator.request("ask beta hi")
                turns.append(time.perf_counter() - started)
                assert answer.ok, answer
            out["handoff_turn"] = turns
            beta = supervisor.handles["beta"]
            crash_times = []
            for _ in range(3):
                pid = beta.pid
                assert pid is not None
                started = time.perf_counter()
                os.kill(pid, signal.SIGKILL)
                await supervisor.wait_for_status("beta", ProcessStatus.CRASHED)
                await supervisor.wait_for_status("beta", ProcessStatus.IDLE)
                crash_times.append((time.perf_counter() - started) * 1000)
                beta.consecutive_crashes = 0
            out["crash_to_ready_ms"] = statistics.median(crash_times)
            out["memory"] = _memory(beta.pid)
            await orchestrator.shutdown()

            spawned = Supervisor(
                {"one": supervisor.handles["beta"].plan},
                MultiprocessingTransport("spawn"),
            )
            started = time.perf_counter()
            await spawned.ensure_running("one")
            out["spawn_method_ms"] = (time.perf_counter() - started) * 1000
            await spawned.shutdown(5)

            many = {
                f"agent{i}": plan for i, plan in enumerate([supervisor.handles["beta"].plan] * 20)
            }
            fleet = Supervisor(
                many,
                MultiprocessingTransport(),
            )
            started = time.perf_counter()
            await asyncio.gather(*(fleet.ensure_running(name) for name in many))
            out["spawn_twenty_ms"] = (time.perf_counter() - started) * 1000
            out["memory_twenty"] = [_memory(h.pid) for h in fleet.handles.values()]
            await fleet.shutdown(5)

    uvloop.run(main())
    return out


def _memory(pid: int | None) -> dict[str, float]:
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                fields[key] = int(rest.split()[0]) / 1024
    fields["Uss"] = fields.pop("Private_Clean", 0) + fields.pop("Private_Dirty", 0)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--round-trips-only", action="store_true", help="skip the swarm figures (4) and (5)"
    )
    options = parser.parse_args()
    n = options.count
    configure_logging("warning")
    # The fork server starts with the first process: give it the daemon's preload before that.
    MultiprocessingTransport()
    raw = baselines.summary(baselines.raw_pipe_round_trip(n))
    broker = baselines.summary(baselines.broker_round_trip(n, use_uvloop=True))
    ours_ = baselines.summary(ours(n))
    result: dict[str, Any] = {
        "raw_pipe_us": {"median": raw[0], "p99": raw[1]},
        "bare_broker_us": {"median": broker[0], "p99": broker[1]},
        "delegate_us": {"median": ours_[0], "p99": ours_[1]},
        "ratio_to_broker": round(ours_[0] / broker[0], 3),
        "ratio_to_raw_pipe": round(ours_[0] / raw[0], 3),
    }
    if not options.round_trips_only:
        figures = swarm_figures(max(n // 25, 50))
        result["swarm"] = {k: v for k, v in figures.items() if k != "handoff_turn"}
        result["handoff_turn_us"] = dict(
            zip(("median", "p99"), baselines.summary(figures["handoff_turn"]), strict=True)
        )
    if options.json:
        print(json.dumps(result))
        return
    print(f"{'round trip':<46} {'median µs':>10} {'p99 µs':>9}")
    print(f"{'(1) raw pipe A <-> B':<46} {raw[0]:>10.1f} {raw[1]:>9.1f}")
    print(f"{'(2) bare uvloop broker A->b->B->b->A':<46} {broker[0]:>10.1f} {broker[1]:>9.1f}")
    print(f"{'(3) goondan delegate A->Orch->B->Orch->A':<46} {ours_[0]:>10.1f} {ours_[1]:>9.1f}")
    print(f"ratio (3)/(2) = {ours_[0] / broker[0]:.2f}x   (3)/(1) = {ours_[0] / raw[0]:.2f}x")
    if options.round_trips_only:
        return
    turn = baselines.summary(figures["handoff_turn"])
    print(
        f"(4) full handoff Turn alpha->beta (scripted model, tools, files): median {turn[0]:.0f} µs, p99 {turn[1]:.0f} µs"
    )
    print(
        f"spawn-to-ready, one agent:     {figures['spawn_one_ms']:.1f} ms (forkserver, preloaded)"
    )
    print(f"  same with the spawn method:  {figures['spawn_method_ms']:.1f} ms")
    print(f"spawn-to-ready, 20 at once:    {figures['spawn_twenty_ms']:.1f} ms")
    print(f"crash-to-ready (SIGKILL):      {figures['crash_to_ready_ms']:.1f} ms")
    memory = figures["memory"]
    print(
        f"idle AgentProcess memory:      RSS {memory['Rss']:.1f} MiB, PSS {memory['Pss']:.1f} MiB, USS {memory['Uss']:.1f} MiB"
    )
    fleet = figures["memory_twenty"]
    print(
        f"20 idle AgentProcesses:        PSS total {sum(m['Pss'] for m in fleet):.1f} MiB, "
        f"USS median {statistics.median(m['Uss'] for m in fleet):.1f} MiB"
    )


if __name__ == "__main__":
    main()
