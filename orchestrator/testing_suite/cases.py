"""The cases of a bundle's TestSuites, and where each one's cassette lives."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from bundle import Bundle, load_bundle
from bundle.spec_testsuite import Fixture, TestCase, TestSuiteSpec

DEFAULT_CASSETTES = Path("tests") / "cassettes"
"""Where cassettes live by default, relative to the bundle's directory."""


@dataclass(frozen=True, slots=True)
class SuiteCase:
    """One case of one suite, with what running it needs."""

    suite: str
    case: TestCase
    swarm: str
    entry_agent: str
    agents: tuple[str, ...]
    fixtures: tuple[Fixture, ...]
    base_dir: Path
    """The directory of the suite's file (fixture ``source`` paths start there)."""

    @property
    def id(self) -> str:
        """``suite/case``: what ``-k`` matches and reports name."""
        return f"{self.suite}/{self.case.name}"

    @property
    def agent(self) -> str:
        """The agent the case talks to."""
        return self.case.agent or self.entry_agent

    @property
    def instance_key(self) -> str:
        """The conversation's key: the case's own, else its name."""
        return self.case.instance_key or self.case.name

    def cassette(self, directory: Path) -> Path:
        """The case's cassette file under ``directory`` (``.cassette.yaml``: never taken for a
        bundle file, whatever the case's name)."""
        return directory / self.suite / f"{self.case.name}.cassette.yaml"


def suite_cases(bundle: Bundle) -> list[SuiteCase]:
    """Every case of every TestSuite of ``bundle``, in declaration order."""
    found: list[SuiteCase] = []
    for suite in bundle.of_kind("TestSuite"):
        spec: TestSuiteSpec = suite.spec
        swarm = bundle.swarm(spec.swarm)
        agents = tuple(agent.name for agent in bundle.swarm_agents(swarm))
        found += [
            SuiteCase(
                suite=suite.name,
                case=case,
                swarm=swarm.name,
                entry_agent=swarm.spec.entry_agent.name,
                agents=agents,
                fixtures=tuple(spec.fixtures),
                base_dir=suite.base_dir,
            )
            for case in spec.cases
        ]
    return found


def load_cases(bundle_path: Path) -> tuple[Bundle, list[SuiteCase]]:
    """The bundle at ``bundle_path`` and its cases; raises ``BundleError`` when it (or one of
    its suites) does not validate."""
    bundle = load_bundle(bundle_path, check_handlers=False)
    return bundle, suite_cases(bundle)


def selected(cases: list[SuiteCase], pattern: str | None) -> list[SuiteCase]:
    """The cases ``pattern`` selects: a glob (``smoke/*``) or a substring of ``suite/case``;
    several patterns separated by ``or`` (every case without one)."""
    if not pattern:
        return list(cases)
    words = [w.strip() for w in pattern.split(" or ") if w.strip()]

    def hit(case: SuiteCase) -> bool:
        return any(
            w in case.id
            or fnmatch.fnmatchcase(case.id, w)
            or fnmatch.fnmatchcase(case.case.name, w)
            for w in words
        )

    return [case for case in cases if hit(case)]
