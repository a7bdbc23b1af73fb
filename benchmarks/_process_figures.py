"""Start, restart and memory of an AgentProcess, each against a floor measured in the same run.

The floor is a child of the daemon's own fork server (the same ``multiprocessing`` context,
so the same preload, ``orchestrator.transport.PRELOAD``, and the same trampoline) that reports
ready over its pipe at once and does nothing else (``benchmarks/_floor_child.py``). The agent
is ``beta`` of the test swarm (``tests/support/swarm.py``: a scripted model with 60 rules,
three built-in tools and a tool module loaded from its path), started by a real
Orchestrator: ``Supervisor.ensure_running`` through ``MultiprocessingTransport``.

Figures (medians of ``samples`` runs, floor and agent samples taken in turns so that noise
falls on both alike):

* ``floor_child_ready_ms``: ``Process.start()`` until the floor child's ``ready`` arrives;
* ``spawn_ready_ms``: ``ensure_running`` of a stopped agent until it is ready (a start a
  moment after the previous one: the transport's spare process is waiting, as it is in a
  running swarm); ``spawn_unpooled_ms``: the same with no spare (the fork on the start's path);
* ``crash_ready_ms``: SIGKILL of an agent idle for a moment until its restart is ready;
* ``floor_child_uss_mib`` / ``agent_uss_mib`` (and ``*_pss_mib``): memory of an idle floor
  child and of an idle, freshly started agent, from ``/proc/<pid>/smaps_rollup``;
* ``floor_child_cpu_ms`` / ``agent_ready_cpu_ms``: CPU time the child used from its fork until
  it was ready (``/proc/<pid>/task/*/schedstat``), which other load on the machine barely
  changes;
* ``bare_child_*_uss_mib``: an idle agent's USS taken apart (``benchmarks/_touch_child.py``):
  a child of the same fork server that does nothing at all (``bare_child_nothing``: no
  trampoline, no entry, no event loop), and the same child after one ``gc.collect()``, after
  ``gc.unfreeze()`` and ``gc.collect()`` (what a fork server that had not frozen its preload
  would cost), and after reading every loaded module's globals once (reference-count writes);
  ``preload_frozen_objects`` is how many objects the fork server froze;
  ``agent_uss_over_bare_child`` and ``bare_child_share_of_agent_uss`` set the agent beside the
  do-nothing child;
* ``agent_copied_mib`` / ``agent_new_mib`` (and ``bare_child_copied_mib`` /
  ``bare_child_new_mib``): the same private memory by origin (``benchmarks/_page_origin.py``):
  pages copied from the fork server on write, and pages the child allocated itself.

Imported by ``benchmarks/ipc.py``; ``python benchmarks/_process_figures.py [--json]`` prints
the figures alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _touch_child
from benchmarks._page_origin import parent_pid, private_origin_mib
from orchestrator._child import run_entry
from orchestrator.status import ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.transport import MultiprocessingTransport

FLOOR_ENTRY = "benchmarks._floor_child:ready"
AGENT = "beta"
SETTLE_SECONDS = 0.5
"""How long a child idles before its memory is read (its first allocations done)."""


def cpu_ms(pid: int) -> float:
    """CPU time ``pid`` has used so far, all its threads (``schedstat``: nanoseconds), in ms."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e6


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parent = int(stat.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def minor_faults(pid: int) -> int:
    """Minor page faults of ``pid`` so far (each copy-on-write of a page is one)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[7])


def memory_mib(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + private dirty) of ``pid``, in MiB."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                fields[key] = int(rest.split()[0]) / 1024
    fields["Uss"] = fields.pop("Private_Clean", 0.0) + fields.pop("Private_Dirty", 0.0)
    return fields


class FloorChild:
    """One floor child: started through the transport's context, ready at once."""

    def __init__(self, transport: MultiprocessingTransport) -> None:
        parent_end, child_end = transport.context.Pipe()
        self.conn = parent_end
        self.process = transport.context.Process(  # type: ignore[attr-defined]
            target=run_entry, args=(FLOOR_ENTRY, child_end, {}), daemon=True
        )
        started = time.perf_counter()
        self.process.start()
        child_end.close()
        ready = parent_end.recv_bytes()
        self.ready_ms = (time.perf_counter() - started) * 1000
        self.cpu_ms = cpu_ms(self.process.pid)
        self.faults = minor_faults(self.process.pid)
        assert ready == b"ready", ready

    def close(self) -> None:
        """Close the pipe: the child exits."""
        self.conn.close()
        self.process.join(5)


class TouchChild:
    """One child of ``benchmarks/_touch_child.py``: started, its action done, ready."""

    def __init__(self, transport: MultiprocessingTransport, action: str) -> None:
        parent_end, child_end = transport.context.Pipe()
        self.conn = parent_end
        self.process = transport.context.Process(  # type: ignore[attr-defined]
            target=_touch_child.run, args=(child_end, action), daemon=True
        )
        self.process.start()
        child_end.close()
        if not parent_end.poll(30):
            raise RuntimeError(f"touch child {action!r} not ready in 30 s")
        self.frozen = int(parent_end.recv_bytes())

    def close(self) -> None:
        """Close the pipe: the child exits."""
        self.conn.close()
        self.process.join(5)


def touch_figures(transport: MultiprocessingTransport, samples: int) -> dict[str, float]:
    """Median USS of each touch child over ``samples`` starts, and the preload's frozen count."""
    uss: dict[str, list[float]] = {action: [] for action in _touch_child.ACTIONS}
    frozen = 0
    origin: dict[str, list[float]] = {"copied": [], "new": []}
    for _ in range(samples):
        for action in _touch_child.ACTIONS:
            child = TouchChild(transport, action)
            try:
                pid = child.process.pid
                uss[action].append(memory_mib(pid)["Uss"])
                if action == _touch_child.NOTHING:
                    for kind, mib in private_origin_mib(pid, parent_pid(pid)).items():
                        origin[kind].append(mib)
                frozen = child.frozen
            finally:
                child.close()
    out = {
        f"bare_child_{action}_uss_mib": round(statistics.median(values), 2)
        for action, values in uss.items()
    }
    for kind, values in origin.items():
        out[f"bare_child_{kind}_mib"] = round(statistics.median(values), 2)
    out["preload_frozen_objects"] = frozen
    return out


async def _figures(samples: int) -> dict[str, Any]:
    from orchestrator.daemon import Orchestrator
    from tests.support.swarm import write_swarm

    transport = MultiprocessingTransport()
    FloorChild(transport).close()  # the fork server's cold start, paid once, not measured
    floor_ready: list[float] = []
    floor_cpu: list[float] = []
    agent_cpu: list[float] = []
    floor_faults: list[float] = []
    agent_faults: list[float] = []
    spawn_ready: list[float] = []
    spawn_unpooled: list[float] = []
    crash_ready: list[float] = []
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        orchestrator = Orchestrator.from_bundle(
            write_swarm(directory), state_dir=directory / "state", transport=transport
        )
        await orchestrator.start()
        supervisor: Supervisor = orchestrator.supervisor
        try:
            await supervisor.ensure_running(AGENT)  # its first start compiles its tool module
            for _ in range(samples):
                floor = FloorChild(transport)
                floor_ready.append(floor.ready_ms)
                floor_cpu.append(floor.cpu_ms)
                floor_faults.append(floor.faults)
                floor.close()
                await supervisor.stop_agent(AGENT, 5, "benchmark")
                await asyncio.sleep(SETTLE_SECONDS)  # a start comes a while after the last
                spawn_ready.append(await _spawn_ms(supervisor))
                handle = supervisor.handle(AGENT)
                assert handle.pid is not None
                agent_cpu.append(cpu_ms(handle.pid))
                agent_faults.append(minor_faults(handle.pid))
                await asyncio.sleep(SETTLE_SECONDS)  # and a crash a while after the start
                crash_ready.append(await _crash_to_ready(supervisor))
            floor = FloorChild(transport)
            await asyncio.sleep(SETTLE_SECONDS)
            floor_memory = memory_mib(floor.process.pid)
            agent_pid = supervisor.handle(AGENT).pid
            assert agent_pid is not None
            agent_memory = memory_mib(agent_pid)
            agent_origin = private_origin_mib(agent_pid, parent_pid(agent_pid))
            floor.close()
            out.update(touch_figures(transport, max(3, samples // 3)))
            # The same start without a spare process waiting (every fork on the start's path).
            await transport.close()
            for _ in range(max(3, samples // 3)):
                await supervisor.stop_agent(AGENT, 5, "benchmark")
                spawn_unpooled.append(await _spawn_ms(supervisor))
        finally:
            await orchestrator.shutdown()
            await transport.close()
    out["floor_child_ready_ms"] = round(statistics.median(floor_ready), 2)
    out["spawn_ready_ms"] = round(statistics.median(spawn_ready), 2)
    out["spawn_unpooled_ms"] = round(statistics.median(spawn_unpooled), 2)
    out["crash_ready_ms"] = round(statistics.median(crash_ready), 2)
    out["floor_child_cpu_ms"] = round(statistics.median(floor_cpu), 2)
    out["agent_ready_cpu_ms"] = round(statistics.median(agent_cpu), 2)
    out["floor_child_faults"] = statistics.median(floor_faults)
    out["agent_ready_faults"] = statistics.median(agent_faults)
    out["floor_child_uss_mib"] = round(floor_memory["Uss"], 2)
    out["floor_child_pss_mib"] = round(floor_memory["Pss"], 2)
    out["agent_uss_mib"] = round(agent_memory["Uss"], 2)
    out["agent_pss_mib"] = round(agent_memory["Pss"], 2)
    out["spawn_ready_ratio"] = round(out["spawn_ready_ms"] / out["floor_child_ready_ms"], 2)
    out["crash_ready_ratio"] = round(out["crash_ready_ms"] / out["floor_child_ready_ms"], 2)
    out["agent_uss_ratio"] = round(out["agent_uss_mib"] / out["floor_child_uss_mib"], 2)
    bare = out["bare_child_nothing_uss_mib"]
    out["agent_copied_mib"] = round(agent_origin["copied"], 2)
    out["agent_new_mib"] = round(agent_origin["new"], 2)
    out["agent_uss_over_bare_child"] = round(out["agent_uss_mib"] / bare, 2)
    out["bare_child_share_of_agent_uss"] = round(bare / out["agent_uss_mib"], 2)
    return out


async def _spawn_ms(supervisor: Supervisor) -> float:
    """Start the stopped agent; milliseconds until it is ready."""
    started = time.perf_counter()
    await supervisor.ensure_running(AGENT)
    return (time.perf_counter() - started) * 1000


async def _crash_to_ready(supervisor: Supervisor) -> float:
    """SIGKILL the idle agent, wait until its restart is ready; milliseconds."""
    handle = supervisor.handle(AGENT)
    pid = handle.pid
    assert pid is not None
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    await supervisor.wait_for_status(AGENT, ProcessStatus.CRASHED)
    await supervisor.wait_for_status(AGENT, ProcessStatus.IDLE)
    elapsed = (time.perf_counter() - started) * 1000
    handle.consecutive_crashes = 0  # stay below the backoff threshold
    return elapsed


def process_figures(samples: int = 15) -> dict[str, Any]:
    """Every figure of the module docstring, from one run (call outside any event loop)."""
    import uvloop

    result: dict[str, Any] = uvloop.run(_figures(samples))
    return result


def print_table(figures: dict[str, Any]) -> None:
    """The figures as a human table, each against its floor."""
    floor = figures["floor_child_ready_ms"]
    print(f"{'agent start':<40} {'median ms':>10} {'x floor':>8}")
    print(f"{'floor child (fork server, ready at once)':<40} {floor:>10.1f} {1:>8.2f}")
    for key, label in (
        ("spawn_ready_ms", "spawn -> ready"),
        ("spawn_unpooled_ms", "  the same, no spare process waiting"),
        ("crash_ready_ms", "SIGKILL -> ready"),
    ):
        print(f"{label:<40} {figures[key]:>10.1f} {figures[key] / floor:>8.2f}")
    print(
        f"{'CPU from fork to ready':<40} floor {figures['floor_child_cpu_ms']:.1f} ms, "
        f"agent {figures['agent_ready_cpu_ms']:.1f} ms; minor faults "
        f"{figures['floor_child_faults']:.0f} / {figures['agent_ready_faults']:.0f}"
    )
    print(f"{'idle memory':<40} {'USS MiB':>10} {'PSS MiB':>8}")
    print(
        f"{'floor child':<40} {figures['floor_child_uss_mib']:>10.2f} "
        f"{figures['floor_child_pss_mib']:>8.2f}"
    )
    print(
        f"{'AgentProcess':<40} {figures['agent_uss_mib']:>10.2f} {figures['agent_pss_mib']:>8.2f}"
        f"   USS {figures['agent_uss_ratio']:.2f}x floor"
    )
    bare = figures["bare_child_nothing_uss_mib"]
    print(
        f"fork-server children, no trampoline ({figures['preload_frozen_objects']} "
        "preloaded objects frozen):"
    )
    for action, label in (
        ("nothing", "does nothing"),
        ("collect", "one gc.collect()"),
        ("unfrozen_collect", "gc.unfreeze(), gc.collect()"),
        ("refcount_walk", "reads every module global"),
    ):
        uss = figures[f"bare_child_{action}_uss_mib"]
        print(f"{'  ' + label:<40} {uss:>10.2f} {'':>8}   {uss / bare:.2f}x do-nothing")
    print(f"{'AgentProcess / do-nothing child':<40} {figures['agent_uss_over_bare_child']:>10.2f}")
    print(f"{'private memory by origin (MiB)':<40} {'copied':>10} {'new':>8}")
    for who, label in (("bare_child", "do-nothing child"), ("agent", "AgentProcess")):
        print(
            f"{'  ' + label:<40} {figures[who + '_copied_mib']:>10.2f} "
            f"{figures[who + '_new_mib']:>8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    options = parser.parse_args()
    from ipc.logs import configure_logging

    configure_logging("warning")
    figures = process_figures(options.samples)
    if options.json:
        print(json.dumps(figures))
    else:
        print_table(figures)


if __name__ == "__main__":
    main()
