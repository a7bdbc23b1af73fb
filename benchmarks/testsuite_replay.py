"""Cost of ``goondan test``: replaying a suite of cases from their cassettes, and what the
cassette seam costs a swarm that is not under test.

The suite: a coordinator that hands each case's file to a worker (``agents__request``), which
writes it with the real ``file-system`` tool; ``--cases`` cases (default 20), each a daemon of
its own with two agent processes, run four at a time as ``goondan test`` runs them. The suite
is recorded once (the ``scripted`` provider behind the cassette), then replayed ``--repeats``
times; each replay's wall time divided by the cases is the figure, beside the target of 2 s a
case.

Not under test, a Model's plan has no cassette and ``build_model`` returns the provider itself:
the seam is one ``is None`` check when an agent boots, nothing per call. The figure beside it
shows it: a scripted model's ``complete`` timed as ``build_model`` returns it and as built
directly, the two taking turns (``--calls`` each).

Run: ``python benchmarks/testsuite_replay.py [--cases N] [--repeats R] [--calls N] [--json]
[--quick]``. ``--json`` prints one object: ``cases``, ``record_seconds``,
``replay_seconds_per_case`` (median of the replays), ``replays`` (each replay's per-case
seconds), ``target_seconds_per_case``, and ``not_recording`` (``direct_us``, ``built_us``,
``overhead_us``: medians per call; ``same_model``: the built model is the provider itself).
``--quick`` runs 4 cases, one replay, few calls. Every case must pass, every replay too.
Not a test: no figure gates anything.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # before this folder, whose ipc.py is not the package

from benchmarks._checks import expect  # noqa: E402

TARGET_SECONDS_PER_CASE = 2.0

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: coordinator-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: worker, input: "write {file} {text}"}}
      - when: {toolResult: agents__request}
        reply: "done: {result.response}"
      - reply: "say: write FILE TEXT"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {toolResult: file-system__write}
        reply: "wrote {result.path}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig: {modelRef: Model/coordinator-brain}
  prompt: {system: You hand file work to the worker.}
  tools: [{ref: {kind: Tool, name: agents, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: Model/worker-brain}
  prompt: {system: You write files.}
  tools: [{ref: {kind: Tool, name: file-system, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents: [Agent/coordinator, Agent/worker]
---
apiVersion: goondan.ai/v1
kind: TestSuite
metadata: {name: bench}
spec:
  cases:
"""

CASE = """\
    - name: case-{i}
      input: write file-{i}.txt text {i}
      expect:
        answer: {{equals: "done: wrote file-{i}.txt"}}
        handoffs: [worker]
"""


def write_suite(directory: Path, cases: int) -> Path:
    path = directory / "goondan.yaml"
    path.write_text(SWARM + "".join(CASE.format(i=i) for i in range(cases)))
    return path


async def run_suite(bundle: Path, record: bool) -> float:
    """Run every case; the wall seconds it took."""
    from orchestrator.testing_suite.cases import load_cases
    from orchestrator.testing_suite.runner import RunSettings, run_cases

    _, cases = load_cases(bundle)
    settings = RunSettings(bundle, bundle.parent / "tests" / "cassettes", record=record)
    started = time.perf_counter()
    results = await run_cases(cases, settings)
    seconds = time.perf_counter() - started
    failed = [(r.case.id, r.failures) for r in results if not r.passed]
    expect(not failed, failed)
    return seconds


def not_recording(calls: int) -> dict[str, object]:
    """A scripted model's call as ``build_model`` returns it (no cassette) and built directly."""
    from agent_process.boot import build_model
    from agent_process.models.base import ChatModel, ModelRequest
    from agent_process.models.scripted import ScriptedModel
    from bundle.plan import ModelPlan
    from bundle.scripted import ScriptSpec
    from tools_base import Message

    script = ScriptSpec.model_validate({"rules": [{"reply": "fine"}]})
    plan = ModelPlan(name="brain", provider="scripted", model="rules", script=script)
    built = build_model(plan, "agent")
    direct = ScriptedModel(script, agent_name="agent", model_name="brain")
    request = ModelRequest(messages=[Message(id="m", role="user", content="hi")], tools=[])

    async def timed(model: ChatModel) -> float:
        started = time.perf_counter_ns()
        answer = await model.complete(request)
        elapsed = (time.perf_counter_ns() - started) / 1000
        expect(answer.text == "fine", answer)
        return elapsed

    async def measure() -> tuple[list[float], list[float]]:
        direct_us, built_us = [], []
        for _ in range(calls):  # taking turns: drift and load hit both alike
            direct_us.append(await timed(direct))
            built_us.append(await timed(built))
        return direct_us, built_us

    direct_us, built_us = asyncio.run(measure())
    return {
        "direct_us": round(statistics.median(direct_us), 2),
        "built_us": round(statistics.median(built_us), 2),
        "overhead_us": round(statistics.median(built_us) - statistics.median(direct_us), 2),
        "same_model": type(built) is ScriptedModel,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.repeats, args.calls = 4, 1, 200
    os.environ.setdefault("GOONDAN_LOG_LEVEL", "error")
    from ipc.logs import configure_logging

    configure_logging("error")
    with tempfile.TemporaryDirectory(prefix="goondan-bench-suite-") as scratch:
        bundle = write_suite(Path(scratch), args.cases)
        record_seconds = asyncio.run(run_suite(bundle, record=True))
        replays = [
            asyncio.run(run_suite(bundle, record=False)) / args.cases for _ in range(args.repeats)
        ]
    figures = {
        "cases": args.cases,
        "record_seconds": round(record_seconds, 3),
        "replay_seconds_per_case": round(statistics.median(replays), 3),
        "replays": [round(r, 3) for r in replays],
        "target_seconds_per_case": TARGET_SECONDS_PER_CASE,
        "not_recording": not_recording(args.calls),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"{args.cases} cases, recorded in {figures['record_seconds']} s")
        print(
            f"replay: {figures['replay_seconds_per_case']} s a case "
            f"(target < {TARGET_SECONDS_PER_CASE} s); each replay: {figures['replays']}"
        )
        print(f"not recording: {figures['not_recording']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
