"""What a crash costs a caller: from an agent's SIGKILL mid-Turn to its resumed Turn's answer.

The real Orchestrator and real agent processes run the ledger swarm of the crash tests
(``tests/support/ledger.py``, offline: a scripted model). Each sample sends ``front`` two
requests in turn, each a Turn of one tool call and an answer:

* ``work K``: the tool appends its effect and returns: the Turn as it runs without a crash;
* ``append K``: the tool appends its effect, then SIGKILLs its own agent process. The caller
  keeps waiting; the supervisor restarts the agent, the router delivers the request again and
  the agent takes the Turn up from its conversation (the call is not idempotent, so the model
  is told ``E_TOOL_INTERRUPTED``, and answers).

The kill comes where the first Turn's tool returns, so ``killed − plain`` is the time from the
SIGKILL to the resumed Turn's answer. Beside it, the floor measured in the same run: an idle
agent SIGKILLed until its restart is ready (``crash_ready_ms``, as ``benchmarks/ipc.py``
measures it): what any restart costs before a Turn can go on. Every answer is checked.

Run: ``python benchmarks/resumed_turn.py [--samples N] [--json] [--quick]``; ``--quick``: 3
samples. Exits non-zero on a wrong answer or a doubled effect. Prints figures; gates nothing.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._checks import WrongAnswer, expect
from ipc.logs import configure_logging
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.ledger import effects, ledger_swarm

AGENT = "front"
RESUMED_ANSWER = "unsure E_TOOL_INTERRUPTED"


async def _timed(swarm: Orchestrator, text: str, expected: str) -> float:
    started = time.perf_counter()
    async with asyncio.timeout(60):
        answer = await swarm.request(text, agent=AGENT)
    elapsed = (time.perf_counter() - started) * 1000
    expect(
        (answer.status, answer.output) == ("ok", expected),
        f"{text!r}: {answer.status} {answer.output!r} {answer.error!r}",
    )
    return elapsed


async def _crash_to_ready(swarm: Orchestrator) -> float:
    """SIGKILL the idle agent, wait until its restart is ready; milliseconds."""
    supervisor = swarm.supervisor
    handle = supervisor.handle(AGENT)
    pid = handle.pid if handle is not None else None
    expect(pid is not None, f"{AGENT} not running")
    assert pid is not None  # for the type checker: expect raised otherwise
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    await supervisor.wait_for_status(AGENT, ProcessStatus.CRASHED)
    await supervisor.wait_for_status(AGENT, ProcessStatus.IDLE)
    return (time.perf_counter() - started) * 1000


def _forget_crashes(swarm: Orchestrator) -> None:
    handle = swarm.supervisor.handle(AGENT)
    if handle is not None:
        handle.consecutive_crashes = 0  # each sample's kill, not a crash loop: no backoff


async def _figures(samples: int, directory: Path) -> dict[str, Any]:
    plain: list[float] = []
    killed: list[float] = []
    ready: list[float] = []
    async with ledger_swarm(directory, attempts=3) as swarm:
        await _timed(swarm, "work warm", "done 1")  # the agent started, its caches warm
        for sample in range(samples):
            plain.append(await _timed(swarm, f"work p{sample}", "done 1"))
            killed.append(await _timed(swarm, f"append k{sample}", RESUMED_ANSWER))
            _forget_crashes(swarm)
            ready.append(await _crash_to_ready(swarm))
            _forget_crashes(swarm)
    doubled = [line for line in effects(directory) if effects(directory).count(line) > 1]
    expect(not doubled, f"no effect doubled: {sorted(set(doubled))}")
    turn_ms = statistics.median(plain)
    killed_ms = statistics.median(killed)
    crash_ready_ms = statistics.median(ready)
    kill_to_answer_ms = max(0.0, killed_ms - turn_ms)
    return {
        "samples": samples,
        "turn_ms": round(turn_ms, 2),
        "killed_turn_ms": round(killed_ms, 2),
        "kill_to_answer_ms": round(kill_to_answer_ms, 2),
        "crash_ready_ms": round(crash_ready_ms, 2),
        "kill_to_answer_over_crash_ready": round(kill_to_answer_ms / crash_ready_ms, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="3 samples (CI runs this)")
    args = parser.parse_args()
    samples = 3 if args.quick else args.samples
    configure_logging(level="warning")  # the daemon's log on stderr: stdout is the figures
    with tempfile.TemporaryDirectory() as temp:
        try:
            figures = asyncio.run(_figures(samples, Path(temp)))
        except WrongAnswer as exc:
            print(f"wrong answer: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{'':<44} {'median ms':>10}")
    print(f"{'a Turn, no crash':<44} {figures['turn_ms']:>10.1f}")
    print(f"{'the same Turn, its agent SIGKILLed mid-Turn':<44} {figures['killed_turn_ms']:>10.1f}")
    print(f"{'SIGKILL -> the resumed Turn answers':<44} {figures['kill_to_answer_ms']:>10.1f}")
    print(f"{'floor: SIGKILL -> an idle agent ready again':<44} {figures['crash_ready_ms']:>10.1f}")
    ratio = figures["kill_to_answer_over_crash_ready"]
    print(f"resumed answer / crash-to-ready floor: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
