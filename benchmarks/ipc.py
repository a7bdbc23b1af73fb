"""IPC and process costs of the daemon, each against a floor measured in the same run.

1. raw pipe round trip between two bare processes (msgpack, ~200 B)
2. the best bare broker: uvloop, asyncio transports on the pipe fds, four hops A → broker → B →
   broker → A, same message
3. our delegate round trip A → Orchestrator → B → Orchestrator → A: real Channel, real envelope
   checks, real Router and Supervisor, trivial handler, no model
4. one full handoff Turn through real AgentProcesses with the scripted model (user → alpha,
   alpha asks beta, beta answers, alpha answers), against its floor: its six IPC hops on the
   bare broker, the fsyncs it performs, and its model Steps and tool calls run in one process
   with no IPC and no persistence
5. spawn-to-ready, crash-to-ready and idle memory of an AgentProcess, against a forkserver child
   with the same preload that does nothing but report ready
6. throughput: 50 agents, 64 concurrent callers, through the Orchestrator and through the bare
   broker moving the same messages

Every answer is checked. Run: ``python benchmarks/ipc.py [--count N] [--json] [--quick]``
(``--quick``: small counts, for CI). Prints figures and ratios; gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _ipc_baselines as baselines
from benchmarks._checks import expect
from ipc import EventMessage, IpcMessage
from ipc.logs import configure_logging
from orchestrator.dispatch import Dispatcher
from orchestrator.router import Router
from orchestrator.supervisor import Supervisor
from orchestrator.testing import fake_plans
from orchestrator.transport import MultiprocessingTransport


async def ping_echo(transport: Any, plans: dict[str, Any], count: int) -> list[float]:
    """``count`` delegates, one after another, from the ``pinger`` agent to ``echo`` through
    a real Supervisor and Router over ``transport``; the round trips pinger measured."""
    done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
    router: Router

    def on_message(sender: str, message: IpcMessage) -> None:
        if isinstance(message, EventMessage) and message.kind == "bench_done":
            expect(not message.payload.get("wrong"), message.payload.get("wrong"))
            done.set_result(list(message.payload["samples"]))
        else:
            dispatch(sender, message)

    supervisor = Supervisor(
        plans,
        transport,
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
    samples = await asyncio.wait_for(done, 300)
    await supervisor.shutdown(2)
    return samples


def ours(count: int) -> list[float]:
    """(3): pinger → Orchestrator (Router) → echo → Orchestrator → pinger."""
    samples: list[float] = []

    async def main() -> None:
        pinger_transport = MultiprocessingTransport(entry="benchmarks._ipc_agents:pinger")
        echo_transport = MultiprocessingTransport(entry="benchmarks._ipc_agents:echo")

        class Split:
            async def start(self, name: str, plan: Any, on_message: Any) -> Any:
                transport = pinger_transport if name == "pinger" else echo_transport
                return await transport.start(name, plan, on_message)

        samples.extend(await ping_echo(Split(), fake_plans("pinger", "echo"), count))

    uvloop.run(main())
    return samples


def ours_throughput(agents: int, callers: int, seconds: float) -> float:
    """(6): requests answered per second through the Orchestrator (its external request path,
    the one the HTTP API takes), ``callers`` concurrent loops over ``agents`` echo agents."""
    rate = 0.0

    async def main() -> None:
        nonlocal rate
        names = [f"echo{i}" for i in range(agents)]
        router: Router
        supervisor = Supervisor(
            fake_plans(*names),
            MultiprocessingTransport(entry="benchmarks._ipc_agents:echo"),
            on_message=lambda sender, message: dispatch(sender, message),
            on_exit=lambda name, info: router.on_agent_exit(name),
        )
        router = Router(supervisor)
        dispatch = Dispatcher(router, supervisor.event_handlers)
        await asyncio.gather(*(supervisor.ensure_running(name) for name in names))

        async def ask(index: int, sent: int) -> None:
            answer = await router.request(names[(index + sent) % agents], PAYLOAD_TEXT)
            expect(answer.ok and answer.output == PAYLOAD_TEXT, answer)

        rate = await baselines.answers_per_second(ask, callers, seconds)
        await supervisor.shutdown(2)

    uvloop.run(main())
    return rate


PAYLOAD_TEXT = "summarise the latest build log please"


HANDOFF_ANSWER = "beta got: hi"
"""What alpha answers to ``ask beta hi``, from beta's answer."""


def handoff_figures(count: int, warm_up: int = 20) -> dict[str, Any]:
    """(4): the full handoff Turn through the daemon, and the parts of its floor measured here."""
    from benchmarks._handoff_floor import inprocess_handoff
    from orchestrator.daemon import Orchestrator
    from tests.support.swarm import SWARM, write_swarm

    out: dict[str, Any] = {}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            orchestrator = Orchestrator.from_bundle(
                write_swarm(directory), state_dir=directory / "state"
            )
            await orchestrator.start()
            await orchestrator.supervisor.ensure_running("beta")
            for _ in range(warm_up):  # first Turns load conversations and tools
                answer = await orchestrator.request("ask beta hi")
                expect(answer.ok and answer.output == HANDOFF_ANSWER, answer)
            turns = []
            for _ in range(count):
                started = time.perf_counter()
                answer = await orchestrator.request("ask beta hi")
                turns.append(time.perf_counter() - started)
                expect(answer.ok and answer.output == HANDOFF_ANSWER, answer)
            await orchestrator.shutdown()
            out["turns"] = turns
            await inprocess_handoff(SWARM, directory, warm_up)
            out["inprocess"] = await inprocess_handoff(SWARM, directory, count)
            out["fsync"] = baselines.fsync_append_us(tmp, count)

    uvloop.run(main())
    return out


HANDOFF_HOPS = 6
"""IPC hops of one handoff Turn: to alpha, alpha → beta (two), beta → alpha (two), the answer."""
HANDOFF_FSYNCS = 2
"""fsyncs of one handoff Turn: each agent's fold appends its Turn to its base and syncs it."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="round trips per figure")
    parser.add_argument("--turns", type=int, default=300, help="handoff Turns")
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--round-trips-only", action="store_true", help="only figures (1) to (3)")
    parser.add_argument("--quick", action="store_true", help="small counts, for CI: some seconds")
    options = parser.parse_args()
    if options.quick:
        options.count, options.turns, options.seconds = 200, 10, 0.5
    n = options.count
    configure_logging("warning")
    # The fork server starts with the first process: give it the daemon's preload before that.
    MultiprocessingTransport()
    raw = baselines.summary(baselines.raw_pipe_round_trip(n))
    broker = baselines.summary(baselines.broker_round_trip(n, use_uvloop=True))
    delegate = baselines.summary(ours(n))
    result: dict[str, Any] = {
        "raw_pipe_rtt_us": raw[0],
        "raw_pipe_p99_us": raw[1],
        "bare_broker_rtt_us": broker[0],
        "bare_broker_p99_us": broker[1],
        "delegate_rtt_us": delegate[0],
        "delegate_p99_us": delegate[1],
    }
    if not options.round_trips_only:
        handoff = handoff_figures(options.turns, 3 if options.quick else 20)
        turn = baselines.summary(handoff["turns"])
        inprocess = baselines.summary(handoff["inprocess"])
        fsync = baselines.summary(handoff["fsync"])
        ipc_floor = broker[0] * HANDOFF_HOPS / 4
        result.update(
            {
                "handoff_turn_us": turn[0],
                "handoff_turn_p99_us": turn[1],
                "handoff_floor_us": ipc_floor + HANDOFF_FSYNCS * fsync[0] + inprocess[0],
                "handoff_floor_parts_us": {
                    "ipc_hops": ipc_floor,
                    "fsyncs": HANDOFF_FSYNCS * fsync[0],
                    "inprocess_turn": inprocess[0],
                },
            }
        )
        result.update(process_figures(3 if options.quick else 15))
        result["throughput_rps"] = ours_throughput(50, 64, options.seconds)
        result["bare_broker_throughput_rps"] = baselines.broker_throughput(50, 64, options.seconds)
    result = {key: _rounded(value) for key, value in result.items()}
    result["ratios"] = ratios(result)
    if options.json:
        print(json.dumps(result))
        return
    print_table(result)


def process_figures(samples: int) -> dict[str, float]:
    """(5), from :mod:`benchmarks._process_figures`, medians of ``samples`` runs."""
    from benchmarks import _process_figures

    return _process_figures.process_figures(samples)


RATIOS = [
    # name, numerator, denominator, target, whether lower is better
    ("delegate / raw pipe", "delegate_rtt_us", "raw_pipe_rtt_us", 2.6, True),
    # the steadier ratio: both sides cross a broker, so the machine's mood cancels out more
    ("delegate / bare broker", "delegate_rtt_us", "bare_broker_rtt_us", None, True),
    ("bare broker / raw pipe", "bare_broker_rtt_us", "raw_pipe_rtt_us", 2.2, True),
    ("delegate p99 / median", "delegate_p99_us", "delegate_rtt_us", 2.0, True),
    ("handoff Turn / floor", "handoff_turn_us", "handoff_floor_us", 2.0, True),
    ("handoff p99 / median", "handoff_turn_p99_us", "handoff_turn_us", 2.5, True),
    ("spawn / floor child", "spawn_ready_ms", "floor_child_ready_ms", 2.5, True),
    ("crash / floor child", "crash_ready_ms", "floor_child_ready_ms", 3.0, True),
    ("agent USS / floor child", "agent_uss_mib", "floor_child_uss_mib", 2.0, True),
    ("throughput / bare broker", "throughput_rps", "bare_broker_throughput_rps", 0.5, False),
]


def ratios(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each ratio of :data:`RATIOS` whose figures were measured, with its target."""
    out = {}
    for name, numerator, denominator, target, lower in RATIOS:
        if numerator in result and denominator in result and result[denominator]:
            value = round(result[numerator] / result[denominator], 3)
            row: dict[str, Any] = {"ratio": value, "target": target}
            if target is not None:
                row["met"] = value <= target if lower else value >= target
            out[name] = row
    return out


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def print_table(result: dict[str, Any]) -> None:
    """The human form of ``result``."""
    for key, value in result.items():
        if key == "ratios":
            continue
        if isinstance(value, dict):
            parts = ", ".join(f"{k} {v}" for k, v in value.items())
            print(f"{key:<32} {parts}")
        else:
            print(f"{key:<32} {value:>12}")
    print()
    print(f"{'ratio':<28} {'measured':>9} {'target':>8}")
    for name, row in result["ratios"].items():
        if row["target"] is None:
            print(f"{name:<28} {row['ratio']:>9.2f} {'(none)':>8}")
            continue
        bound = "≤" if name != "throughput / bare broker" else "≥"
        mark = "" if row["met"] else "  (not met)"
        print(f"{name:<28} {row['ratio']:>9.2f} {bound}{row['target']:>7}{mark}")


if __name__ == "__main__":
    main()
