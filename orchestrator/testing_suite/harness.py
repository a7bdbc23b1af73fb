"""A swarm running for a test written in Python, its model calls on a cassette.

:class:`SwarmUnderTest` runs the swarm of a bundle as ``goondan test`` runs a case (its own
temporary state directory, real agent processes and tools, model calls replayed from a
cassette or recorded to it) on an event loop of its own, so a plain synchronous test talks to
it::

    with SwarmUnderTest("goondan.yaml", cassette="tests/cassettes/python/hello.cassette.yaml") as swarm:
        answer = swarm.ask("hello")
        assert answer.ok and "hi" in answer.output
        assert swarm.seen.handoffs == []

The pytest plugin (:mod:`orchestrator.testing_suite.pytest_plugin`) hands one out as the
``goondan_swarm`` fixture.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from bundle.cassette_plan import CassettePlan
from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from orchestrator.testing_suite.observe import Observation
from orchestrator.testing_suite.runner import START_SECONDS, gather_recordings

if TYPE_CHECKING:
    from orchestrator.daemon import Orchestrator

T = TypeVar("T")


def _ignored(agent: str, delta: TextDelta) -> None:
    """Streamed text (the Turn streams, so its cassette keeps the pieces); the answer is
    returned whole."""


class SwarmUnderTest:
    """The swarm of ``bundle`` on a cassette (see the module's docstring). ``record``: model
    calls go to the real provider and the cassette is written when the swarm stops."""

    def __init__(
        self,
        bundle: str | Path,
        *,
        cassette: str | Path,
        record: bool = False,
        swarm: str | None = None,
    ) -> None:
        self.bundle = Path(bundle)
        self.cassette = Path(cassette)
        self.record = record
        self.swarm = swarm
        self.seen = Observation()
        """What the swarm did so far: tool calls, handoffs, Steps, tokens, errors."""
        self._scratch: Path | None = None
        self._daemon: Orchestrator | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="goondan-swarm", daemon=True
        )

    def _call(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def start(self) -> SwarmUnderTest:
        """Start the swarm (its entry agent ready)."""
        if not self.record and not self.cassette.is_file():
            raise FileNotFoundError(
                f"no cassette {self.cassette}: record it first (pytest --goondan-record)"
            )
        self._scratch = Path(tempfile.mkdtemp(prefix="goondan-swarm-"))
        self._thread.start()
        plan = CassettePlan(
            mode="record" if self.record else "replay",
            path=str(self.cassette.resolve()),
            work_dir=str(self._scratch / "cassette"),
        )
        self._daemon = self._call(self._open(plan), START_SECONDS)
        return self

    async def _open(self, plan: CassettePlan) -> Orchestrator:
        from orchestrator.assembly import assemble
        from orchestrator.daemon import Orchestrator

        assert self._scratch is not None
        state = self._scratch / "state"
        daemon = Orchestrator(
            assemble(
                self.bundle, state_dir=state, swarm=self.swarm, cassette=plan, connections=False
            )
        )
        daemon.events.listeners.append(self.seen.observe)
        await daemon.start()
        return daemon

    def ask(
        self,
        text: str,
        *,
        agent: str | None = None,
        instance_key: str = "default",
        timeout: float = 120.0,
    ) -> DelegateAnswer:
        """One Turn of ``agent`` (default: the entry agent) in conversation ``instance_key``:
        its answer, kept in :attr:`seen` too."""
        daemon = self._daemon
        if daemon is None:
            raise RuntimeError("the swarm is not running: call start() first")
        asked = daemon.request(
            text, agent=agent, instance_key=instance_key, on_delta=_ignored, relay=True
        )
        answer = self._call(asked, timeout)
        self.seen.answers.append(answer)
        return answer

    def misses(self) -> list[str]:
        """The model calls the cassette had no answer for, each with its diff."""
        if self._scratch is None:
            return []
        directory = self._scratch / "cassette" / "misses"
        return (
            [p.read_text() for p in sorted(directory.glob("*.txt"))] if directory.is_dir() else []
        )

    def stop(self) -> None:
        """Stop the swarm; when recording, write the cassette."""
        try:
            if self._daemon is not None:
                self._call(self._daemon.shutdown(), START_SECONDS)
                self._daemon = None
                if self.record and self._scratch is not None:
                    gather_recordings(self._scratch / "cassette", self.cassette)
        finally:
            if self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=START_SECONDS)
            self._loop.close()
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> SwarmUnderTest:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
