"""The pytest plugin: TestSuite cases as pytest items, and a swarm fixture for Python tests.

Enable it with ``pytest -p orchestrator.testing_suite.pytest_plugin`` (or the ``goondan``
``pytest11`` entry point of an installed goondan-py). Then:

- a ``goondan.yaml`` that declares a ``kind: TestSuite`` (in itself or in the bundle directory
  around it) is collected: each case is an item ``goondan.yaml::suite/case``, run as
  ``goondan test`` runs it, so ``-k``, ``-x``, ``-n`` (xdist) and ``--junitxml`` apply;
- the ``goondan_swarm`` fixture starts the swarm of a bundle on a cassette of the test's own
  (``tests/cassettes/python/<test>.cassette.yaml`` beside the bundle) and stops it after
  the test (see :class:`~orchestrator.testing_suite.harness.SwarmUnderTest`);
- ``--goondan-record`` records every cassette against the real providers instead;
  ``--goondan-cassettes DIR`` puts them elsewhere.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SUITE_MARK = re.compile(r"^kind:\s*TestSuite\s*$", re.MULTILINE)
BUNDLE_FILE = "goondan.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--goondan-record`` and ``--goondan-cassettes``."""
    group = parser.getgroup("goondan", "goondan swarm tests")
    group.addoption(
        "--goondan-record",
        action="store_true",
        help="send model calls to the real providers and write the cassettes",
    )
    group.addoption(
        "--goondan-cassettes",
        metavar="DIR",
        help="where cassettes are (default: tests/cassettes beside each bundle)",
    )


def bundle_of(path: Path) -> Path | None:
    """What to load for the ``goondan.yaml`` at ``path``: the file itself when it declares a
    TestSuite (as ``goondan test`` reads it), else its directory when a file beside it does
    (``testsuite.yaml``), else ``None``."""
    from bundle.scan import bundle_files

    if SUITE_MARK.search(path.read_text(errors="replace")):
        return path
    beside = [f for f in bundle_files(path.parent) if f != path]
    return (
        path.parent
        if any(SUITE_MARK.search(f.read_text(errors="replace")) for f in beside)
        else None
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A ``goondan.yaml`` with TestSuites (in it or beside it) becomes a :class:`SuiteFile`."""
    if file_path.name != BUNDLE_FILE or bundle_of(file_path) is None:
        return None
    suite_file: SuiteFile = SuiteFile.from_parent(parent, path=file_path)
    return suite_file


class SuiteFile(pytest.File):
    """The cases of one bundle's TestSuites."""

    def collect(self) -> Iterator[pytest.Item]:
        from bundle import BundleError
        from orchestrator.testing_suite.cases import load_cases

        bundle = bundle_of(self.path) or self.path
        try:
            _, cases = load_cases(bundle)
        except BundleError as exc:
            raise self.CollectError("\n".join(issue.format() for issue in exc.errors)) from None
        for case in cases:
            item: SuiteCaseItem = SuiteCaseItem.from_parent(self, name=case.id)
            item.case = case
            yield item


class SuiteCaseItem(pytest.Item):
    """One TestSuite case, run on its own daemon."""

    case: object = None

    def runtest(self) -> None:
        from orchestrator.testing_suite.cases import DEFAULT_CASSETTES, SuiteCase
        from orchestrator.testing_suite.runner import RunSettings, run_case

        assert isinstance(self.case, SuiteCase)
        bundle = bundle_of(self.path) or self.path
        settings = RunSettings(
            bundle_path=bundle,
            cassettes=_cassettes(self.config) or self.path.parent / DEFAULT_CASSETTES,
            record=bool(self.config.getoption("goondan_record")),
            parallel=1,
        )
        result = asyncio.run(run_case(self.case, settings))
        if not result.passed:
            raise CaseFailed(result.failures)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: object = None,
    ) -> str:
        """The case's failures as ``goondan test`` shows them."""
        if isinstance(excinfo.value, CaseFailed):
            return "\n".join(excinfo.value.failures)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"TestSuite case {self.name}"


class CaseFailed(AssertionError):
    """A case's expectations did not hold (or it could not run)."""

    def __init__(self, failures: list[str]) -> None:
        super().__init__("\n".join(failures))
        self.failures = failures


def _cassettes(config: pytest.Config) -> Path | None:
    given = config.getoption("goondan_cassettes")
    return Path(str(given)) if given else None


SwarmFactory = Callable[..., object]


@pytest.fixture
def goondan_swarm(request: pytest.FixtureRequest) -> Iterator[SwarmFactory]:
    """``goondan_swarm(bundle, cassette=None, swarm=None)``: a started
    :class:`~orchestrator.testing_suite.harness.SwarmUnderTest`, stopped after the test. Its
    cassette defaults to ``tests/cassettes/python/<test name>.cassette.yaml`` beside the
    bundle (a second swarm of the same test adds ``-2``, ``-3``...)."""
    from orchestrator.testing_suite.cases import DEFAULT_CASSETTES
    from orchestrator.testing_suite.harness import SwarmUnderTest

    started: list[SwarmUnderTest] = []
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-.") or "test"

    def start(
        bundle: str | Path, cassette: str | Path | None = None, swarm: str | None = None
    ) -> SwarmUnderTest:
        path = Path(bundle)
        root = path if path.is_dir() else path.parent
        if cassette is None:
            base = _cassettes(request.config) or root / DEFAULT_CASSETTES
            suffix = f"-{len(started) + 1}" if started else ""
            cassette = base / "python" / f"{name}{suffix}.cassette.yaml"
        under_test = SwarmUnderTest(
            path,
            cassette=cassette,
            record=bool(request.config.getoption("goondan_record")),
            swarm=swarm,
        )
        started.append(under_test)
        return under_test.start()

    yield start
    for under_test in reversed(started):
        under_test.stop()
