"""How long the command line keeps an operator, a script or a shell completing a word waiting:
``goondan --help``, ``status`` and ``send`` against a daemon of many agents, and completion,
each beside what any Python command costs.

Every figure is the wall time of a fresh interpreter run as a subprocess (from just before it
is started to its exit, its output read), with the modules' bytecode cached as an installed
package has it (a run of each command first, not counted). The commands run in rounds, each
round running every one once in turn, so a change in the machine's load weighs on all of them
alike; a figure is the median of its rounds. The floors, measured in the same rounds:

* ``bare``: ``python -c pass``, the interpreter's own start (``site`` and the install's
  ``.pth`` files included);
* ``status_http`` and ``send_http``: the HTTP request alone (``GET /v1/agents``; ``send``'s
  ``POST /v1/agents/NAME/requests`` to an idle agent, its answer as events), from a client
  already running in a process of its own, on the daemon's ``api.sock``.

The commands: ``python -m orchestrator --help``; ``status`` (its table of every agent);
``send AGENT TEXT`` to an idle agent (a scripted Turn, its answer printed); completion, as the
shell runs it (argcomplete's ``_ARGCOMPLETE`` protocol) to complete the agent of ``send``.
Each ratio divides a command by its floor: ``--help`` and completion by ``bare``, ``status``
by ``bare + status_http``, ``send`` by ``bare + send_http``; the target is 1.5.

The daemon: the real Orchestrator in this process, its HTTP API on its ``api.sock``, with
``--agents`` agents declared and started (one scripted Model; the file declares the first
agent, every other one a copy of its plan, as ``benchmarks/scale.py`` builds them). Every
command's output is checked (each agent's row, the Turn's answer, the completed names).

The imports of ``--help``: ``-X importtime`` of ``--help`` against ``-c pass``, the summed time
of the imports each process makes (the interpreter's own included), measured in the same rounds;
``help_import_ratio`` is their ratio. ``help_daemon_imports`` lists the modules of the daemon's
stack (:data:`DAEMON_STACK`) ``--help`` imported. ``--quick`` (3 agents, 5 rounds, for CI) exits
non-zero when that list is not empty, so a change that makes ``--help`` import the daemon's
stack again fails the build; it gates on which modules, never on a time, which a loaded machine
would move. Nothing else gates.

Run: ``python benchmarks/cli.py [--agents 500] [--rounds 15] [--json] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._checks import expect
from benchmarks.scale import AGENT, MODEL, _grow

DAEMON_STACK = frozenset(
    {
        *("asyncio", "multiprocessing", "ssl", "http.client", "email"),
        *("ipc", "bundle", "orchestrator.daemon", "orchestrator.operations"),
        *("structlog", "rich", "yaml", "uvloop", "httpx", "pydantic", "msgspec"),
    }
)
"""What ``--help`` must not import (each a module, or a package with all below it): the
daemon's stack, and the typed answers of the commands that talk to it."""
TARGET_RATIO = 1.5
"""What each command may cost beside its floor."""
SEND_TEXT = "hello"
SEND_ANSWER = f"got: {SEND_TEXT}"
INSTANCE = "bench"
FLOOR_CALLS = 5
"""Requests the warm client times per round (their median is the round's floor)."""

_FLOOR_CHILD = """
import json, statistics, sys, time
from pathlib import Path
from orchestrator.http.client import DaemonApi

state_dir, agent, instance, text, calls = sys.argv[1:6]
api = DaemonApi(Path(state_dir))
body = {"input": text, "instanceKey": instance, "approvals": True}
figures = {}
for name, call in (
    ("status", lambda: api.call("GET", "/v1/agents")),
    ("send", lambda: api.call_with_events(f"/v1/agents/{agent}/requests", body, lambda *_: None)),
):
    call()  # warm: the connection code, the daemon's route
    times = []
    for _ in range(int(calls)):
        started = time.perf_counter()
        status, _answer = call()
        times.append((time.perf_counter() - started) * 1000)
        assert status == 200, (name, status, _answer)
    figures[name] = statistics.median(times)
print(json.dumps(figures))
"""
"""A client already running: the HTTP requests of ``status`` and ``send`` alone."""


def write_bundle(directory: Path, first: str) -> Path:
    """``goondan.yaml`` declaring the Model and agent ``first``, the Swarm's entry."""
    swarm = (
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\n"
        f"spec:\n  entryAgent: Agent/{first}\n  agents: [Agent/{first}]\n"
    )
    path = directory / "goondan.yaml"
    path.write_text(MODEL + AGENT.format(name=first) + swarm)
    return path


def importtime_rows(stderr: bytes) -> Iterator[tuple[int, str]]:
    """``(cumulative µs, name)`` of each module ``-X importtime`` reports, the name with the
    spaces before it that give its depth (one space: imported at the top level)."""
    for line in stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line.split("|", 2)
        if cumulative.strip().isdigit():  # not the header
            yield int(cumulative), name


def daemon_imports(stderr: bytes) -> list[str]:
    """The modules of :data:`DAEMON_STACK` that ``-X importtime`` says were imported."""
    names = {name.strip() for _, name in importtime_rows(stderr)}
    return sorted(
        name
        for name in names
        if any(name == top or name.startswith(f"{top}.") for top in DAEMON_STACK)
    )


def import_ms(stderr: bytes) -> float:
    """The summed cumulative time (ms) of the top-level imports ``-X importtime`` reports."""
    top_level = (
        cumulative
        for cumulative, name in importtime_rows(stderr)
        if name.startswith(" ") and not name.startswith("  ")
    )
    return sum(top_level) / 1000


class Runner:
    """Runs commands as fresh interpreters, in the environment every figure shares."""

    def __init__(self, cache: Path) -> None:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
        env.pop("_ARGCOMPLETE", None)
        self.env = env

    async def run(
        self, argv: list[str], extra_env: dict[str, str] | None = None
    ) -> tuple[float, bytes, bytes]:
        """``(wall ms, stdout, stderr)`` of ``python ARGV``; a non-zero exit fails the run."""
        env = {**self.env, **(extra_env or {})}
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            env=env,
        )
        async with asyncio.timeout(120):
            out, err = await process.communicate()
        elapsed = (time.perf_counter() - started) * 1000
        expect(process.returncode == 0, (argv, process.returncode, err.decode()[-2000:]))
        return elapsed, out, err


class Commands:
    """Each measured command: its run and the check of its output."""

    def __init__(self, runner: Runner, bundle: Path, state_dir: Path, agents: list[str]) -> None:
        self.runner = runner
        self.where = ["-c", str(bundle), "--state-dir", str(state_dir)]
        self.state_dir = state_dir
        self.agents = agents
        self.completions = state_dir.parent / "completions.txt"

    async def bare(self) -> float:
        return (await self.runner.run(["-c", "pass"]))[0]

    async def help(self) -> float:
        wall, out, _ = await self.runner.run(["-m", "orchestrator", "--help"])
        expect(b"status" in out and b"send" in out, out[-500:])
        return wall

    async def status(self) -> float:
        wall, out, _ = await self.runner.run(["-m", "orchestrator", "status", *self.where])
        text = out.decode()
        missing = [name for name in self.agents if name not in text]
        expect(not missing, missing[:5])
        return wall

    async def send(self) -> float:
        argv = ["-m", "orchestrator", "send", self.agents[0], SEND_TEXT, "--instance", INSTANCE]
        wall, out, _ = await self.runner.run([*argv, *self.where])
        expect(out.decode().strip() == SEND_ANSWER, out)
        return wall

    async def completion(self) -> float:
        line = f"goondan send --state-dir {self.state_dir} {self.agents[0][:-1]}"
        wall, _, _ = await self.runner.run(
            ["-m", "orchestrator"],
            {
                "_ARGCOMPLETE": "1",
                "_ARGCOMPLETE_IFS": "\n",
                "COMP_LINE": line,
                "COMP_POINT": str(len(line)),
                "COMP_TYPE": "9",
                "_ARGCOMPLETE_STDOUT_FILENAME": str(self.completions),
            },
        )
        words = self.completions.read_text().split()
        expect(self.agents[0] in words, words)
        return wall

    async def floors(self) -> dict[str, float]:
        argv = ["-c", _FLOOR_CHILD, str(self.state_dir), self.agents[0], INSTANCE, SEND_TEXT]
        _, out, _ = await self.runner.run([*argv, str(FLOOR_CALLS)])
        figures: dict[str, float] = json.loads(out)
        return figures

    async def help_imports(self) -> tuple[float, float, list[str]]:
        """Import time (ms) of ``--help`` and of ``-c pass``, and the modules of the daemon's
        stack ``--help`` imported."""
        _, _, help_err = await self.runner.run(["-X", "importtime", "-m", "orchestrator", "--help"])
        _, _, bare_err = await self.runner.run(["-X", "importtime", "-c", "pass"])
        return import_ms(help_err), import_ms(bare_err), daemon_imports(help_err)


async def _measure(commands: Commands, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    stack: set[str] = set()

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    # Warm: bytecode written, the agent's instance made, the floor child's imports cached.
    for warm in (commands.bare, commands.help, commands.status, commands.send):
        await warm()
    await commands.completion()
    await commands.floors()
    await commands.help_imports()
    for _ in range(rounds):
        add("bare_ms", await commands.bare())
        add("help_ms", await commands.help())
        add("status_ms", await commands.status())
        add("send_ms", await commands.send())
        add("completion_ms", await commands.completion())
        floors = await commands.floors()
        add("status_http_ms", floors["status"])
        add("send_http_ms", floors["send"])
        help_import, bare_import, imported = await commands.help_imports()
        stack.update(imported)
        add("help_import_ms", help_import)
        add("bare_import_ms", bare_import)
        add("help_import_ratio", help_import / bare_import)
    out: dict[str, Any] = {
        name: round(statistics.median(values), 2) for name, values in samples.items()
    }
    out["help_daemon_imports"] = sorted(stack)
    return out


async def _run(agents: int, rounds: int) -> dict[str, Any]:
    from orchestrator.daemon import Orchestrator

    names = [f"agent-{n:04d}" for n in range(agents)]
    out: dict[str, Any] = {"agents": agents, "rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        bundle = write_bundle(directory, names[0])
        state_dir = directory / "state"
        orchestrator = Orchestrator.from_bundle(bundle, state_dir=state_dir)
        await _grow(orchestrator.supervisor, names)
        await orchestrator.start()
        try:
            supervisor = orchestrator.supervisor
            await asyncio.gather(*(supervisor.ensure_running(name) for name in names))
            commands = Commands(Runner(directory / "bytecode"), bundle, state_dir, names)
            out["load_average_before"] = [round(load, 2) for load in os.getloadavg()]
            out.update(await _measure(commands, rounds))
            out["load_average_after"] = [round(load, 2) for load in os.getloadavg()]
        finally:
            await orchestrator.shutdown()
    out["ratios"] = {
        "help": round(out["help_ms"] / out["bare_ms"], 2),
        "status": round(out["status_ms"] / (out["bare_ms"] + out["status_http_ms"]), 2),
        "send": round(out["send_ms"] / (out["bare_ms"] + out["send_http_ms"]), 2),
        "completion": round(out["completion_ms"] / out["bare_ms"], 2),
    }
    out["target_ratio"] = TARGET_RATIO
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=15, help="runs of each command")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 agents, 5 rounds, for CI: exits 1 when --help imports the daemon's stack",
    )
    options = parser.parse_args()
    if options.quick:
        options.agents, options.rounds = 3, 5
    from ipc.logs import configure_logging

    os.environ["GOONDAN_LOG_LEVEL"] = "warning"  # the agents' too: a Turn logs nothing
    configure_logging("warning")
    import uvloop

    result = uvloop.run(_run(options.agents, options.rounds))
    if options.json:
        print(json.dumps(result))
    else:
        _print(result)
    if options.quick and result["help_daemon_imports"]:
        print(
            "--help imports the daemon's stack: " + ", ".join(result["help_daemon_imports"]),
            file=sys.stderr,
        )
        raise SystemExit(1)


def _print(result: dict[str, Any]) -> None:
    ratios = result["ratios"]
    bare = result["bare_ms"]
    print(
        f"the command line, {result['agents']} agents started, median of {result['rounds']} "
        f"rounds (load average {result['load_average_before']} → {result['load_average_after']})"
    )
    print(f"  python -c pass                 {bare:>8.1f} ms")
    rows = (
        ("goondan --help", "help", "bare"),
        ("goondan status", "status", f"bare + GET /v1/agents {result['status_http_ms']:.1f} ms"),
        (
            "goondan send (idle agent)",
            "send",
            f"bare + its request {result['send_http_ms']:.1f} ms",
        ),
        ("completion of send's AGENT", "completion", "bare"),
    )
    for label, key, floor in rows:
        print(f"  {label:<30} {result[f'{key}_ms']:>8.1f} ms  {ratios[key]:.2f}x {floor}")
    print(
        f"  --help's imports               {result['help_import_ms']:>8.1f} ms  "
        f"{result['help_import_ratio']:.2f}x those of -c pass ({result['bare_import_ms']:.1f} ms)"
    )
    print(f"  --help's imports of the daemon's stack: {result['help_daemon_imports'] or 'none'}")
    print(f"  target: each ratio ≤ {result['target_ratio']:g}")


if __name__ == "__main__":
    main()
