"""One case on its own daemon, and a suite's cases in parallel up to a bound.

A case runs in a temporary state directory: its fixtures are placed in the workspaces of its
conversation, an :class:`~orchestrator.daemon.Orchestrator` is assembled with the case's
cassette (every agent's model calls recorded to it or answered from it), the inputs are sent
one Turn after another, and the daemon is shut down. Its runtime events, heard as they are
recorded, are what the expectations are checked against.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from bundle.cassette_plan import CassettePlan
from ipc.events import TextDelta
from orchestrator.assembly import assemble
from orchestrator.testing_suite.cases import SuiteCase
from orchestrator.testing_suite.expect import failures
from orchestrator.testing_suite.observe import Observation

DEFAULT_PARALLEL = 4
"""Cases run at once by default: each is a daemon with a process per agent it talks to."""
START_SECONDS = 60.0
"""How long a case's daemon may take to start, and to stop."""
PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$")
"""An instance key that names its own directory (fixtures are placed there)."""

MISS_MARK = "no recorded model call"
"""How a cassette's miss begins (and how a Turn that failed on one says so)."""

Status = Literal["passed", "failed", "error"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How cases are run."""

    bundle_path: Path
    cassettes: Path
    """The directory of the cassettes (one file per case under ``<suite>/``)."""
    record: bool = False
    """Send model calls to the real provider and write the cassettes."""
    parallel: int = DEFAULT_PARALLEL


@dataclass(slots=True)
class CaseResult:
    """How one case went."""

    case: SuiteCase
    status: Status
    failures: list[str] = field(default_factory=list)
    """Why it failed: cassette misses first (with their diffs), then unmet expectations."""
    seconds: float = 0.0
    observation: Observation = field(default_factory=Observation)
    recorded: bool = False

    @property
    def passed(self) -> bool:
        """Every expectation held."""
        return self.status == "passed"

    def to_json(self) -> dict[str, object]:
        """The ``--json`` form."""
        seen = self.observation
        return {
            "id": self.case.id,
            "suite": self.case.suite,
            "case": self.case.case.name,
            "status": self.status,
            "failures": self.failures,
            "seconds": round(self.seconds, 3),
            "recorded": self.recorded,
            "answer": seen.answer,
            "handoffs": seen.handoffs,
            "tools": [call.to_json() for call in seen.tools],
            "steps": seen.steps,
            "tokens": seen.tokens,
        }


async def run_case(case: SuiteCase, settings: RunSettings) -> CaseResult:
    """Run ``case`` on a daemon of its own; never raises for the case's own failures."""
    started = time.perf_counter()
    cassette = case.cassette(settings.cassettes)
    if not settings.record and not cassette.is_file():
        return CaseResult(
            case,
            "error",
            [f"no cassette {cassette}: record the case first (goondan test --record)"],
        )
    problem = None if settings.record else _unreadable(cassette)
    if problem is not None:
        return CaseResult(case, "error", [problem])
    with tempfile.TemporaryDirectory(prefix="goondan-test-") as scratch:
        root = Path(scratch)
        plan = CassettePlan(
            mode="record" if settings.record else "replay",
            path=str(cassette.resolve()),
            work_dir=str(root / "cassette"),
        )
        result = await _run_on_daemon(case, settings.bundle_path, root / "state", plan)
        misses = _misses(root / "cassette")
        if misses:  # the Turn errors that only repeat a miss say nothing more
            kept = [f for f in result.failures if MISS_MARK not in f]
            result.failures = misses + kept
        if result.failures and result.status == "passed":
            result.status = "failed"
        if settings.record and result.status != "error":
            gather_recordings(root / "cassette", cassette)
            result.recorded = True
    result.seconds = time.perf_counter() - started
    return result


async def _run_on_daemon(
    case: SuiteCase, bundle_path: Path, state: Path, cassette: CassettePlan
) -> CaseResult:
    from orchestrator.daemon import Orchestrator

    seen = Observation()
    try:
        _place_fixtures(case, state)
        daemon = Orchestrator(
            assemble(
                bundle_path, state_dir=state, swarm=case.swarm, cassette=cassette, connections=False
            )
        )
    except (OSError, ValueError) as exc:
        return CaseResult(case, "error", [f"the case could not start: {exc}"], observation=seen)
    daemon.events.listeners.append(seen.observe)
    try:
        async with asyncio.timeout(START_SECONDS):
            await daemon.start()
        for text in case.case.input:
            answer = await daemon.request(
                text,
                agent=case.agent,
                instance_key=case.instance_key,
                on_delta=_streamed,  # as a chat front door asks: the cassette keeps the pieces
                relay=True,  # the agents it hands off to stream too
            )
            seen.answers.append(answer)
            if not answer.ok:
                break
    finally:
        async with asyncio.timeout(START_SECONDS):
            await daemon.shutdown()
    found = failures(case.case.expect, seen)
    return CaseResult(case, "failed" if found else "passed", found, observation=seen)


def _unreadable(cassette: Path) -> str | None:
    """Why ``cassette`` cannot be replayed (``None`` when it reads as YAML documents)."""
    try:
        for _ in yaml.safe_load_all(cassette.read_text(encoding="utf-8")):
            pass
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return f"the cassette {cassette} cannot be read: {exc}; record the case again (--record)"
    return None


def _streamed(agent: str, delta: TextDelta) -> None:
    """Where a case's streamed text goes: nowhere (the answer is checked whole)."""


def _place_fixtures(case: SuiteCase, state: Path) -> None:
    """Write the suite's fixtures into the workspaces of the case's conversation."""
    if not case.fixtures:
        return
    key = case.instance_key
    if not PLAIN_KEY.match(key):
        raise ValueError(
            f"fixtures need an instance key of letters, digits, '_', '.' and '-'; got {key!r}"
        )
    for fixture in case.fixtures:
        content = (
            fixture.content.encode()
            if fixture.content is not None
            else (case.base_dir / str(fixture.source)).read_bytes()
        )
        for agent in fixture.agents or case.agents:
            target = state / "agents" / agent / "instances" / key / "workspace" / fixture.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)


def _misses(work_dir: Path) -> list[str]:
    """The model calls the cassette had no answer for, each with its diff, in the order they
    happened; a miss whose request differs only by an earlier miss's error is left out."""
    directory = work_dir / "misses"
    if not directory.is_dir():
        return []
    every = [path.read_text().rstrip("\n") for path in sorted(directory.glob("*.txt"))]
    causes = [text for text in every if MISS_MARK not in text.split("\n", 1)[-1]]
    return causes or every


def gather_recordings(work_dir: Path, cassette: Path) -> None:
    """The agents' recordings as the case's cassette: each agent's calls in order, the agents
    by name (so the file does not change when nothing did)."""
    parts = sorted(work_dir.glob("*.yaml"))
    cassette.parent.mkdir(parents=True, exist_ok=True)
    temporary = cassette.with_name(cassette.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        out.write(f"# Recorded by `goondan test --record`: {len(parts)} agent(s).\n")
        for part in parts:
            out.write(part.read_text(encoding="utf-8"))
    temporary.replace(cassette)


async def run_cases(
    cases: list[SuiteCase],
    settings: RunSettings,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run ``cases``, at most ``settings.parallel`` at once; the results in ``cases`` order.
    ``on_result`` hears each as it finishes."""
    bound = asyncio.Semaphore(max(1, settings.parallel))

    async def one(case: SuiteCase) -> CaseResult:
        async with bound:
            try:
                result = await run_case(case, settings)
            except Exception as exc:  # one case's breakage is its own result, not the run's
                result = CaseResult(case, "error", [f"{type(exc).__name__}: {exc}"])
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(case) for case in cases)))
