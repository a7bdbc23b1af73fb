"""The multiprocessing transport with real processes: the spare process a start takes,
children that never re-run the parent's ``__main__`` script, and what they find preloaded."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.supervisor import Supervisor
from orchestrator.testing import fake_plans
from orchestrator.transport import MultiprocessingTransport
from tests.support.fork_server import fork_one_child

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
ENTRY = "tests.support.agent_entries:ready_until_closed"


def alive(pid: int) -> bool:
    # One look at /proc, no check-then-act: the process may go between two looks.
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def wait_for(condition: Callable[[], object], seconds: float = 30) -> None:
    """Poll ``condition`` under a deadline: what it reads (other processes, a background
    fork) announces no change."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the state itself
            await asyncio.sleep(0.02)


async def test_a_start_takes_the_waiting_spare_and_another_is_forked() -> None:
    transport = MultiprocessingTransport(entry=ENTRY)
    supervisor = Supervisor(fake_plans("a", "b", "c"), transport)
    try:
        first = await supervisor.ensure_running("a")  # no spare yet: forked on the spot
        await wait_for(lambda: transport.waiting_spares)
        [spare] = transport.waiting_spares
        second = await supervisor.ensure_running("b")
        assert second.pid == spare
        assert first.pid != spare
        await wait_for(lambda: transport.waiting_spares)  # refilled
        [killed] = transport.waiting_spares
        os.kill(killed, signal.SIGKILL)  # a spare that died while it waited is passed over
        await wait_for(lambda: not alive(killed))
        third = await supervisor.ensure_running("c")
        assert third.pid not in (killed, None)
        await wait_for(lambda: transport.waiting_spares)
        last = transport.waiting_spares
    finally:
        await supervisor.shutdown(5)
        await transport.close()
    assert transport.waiting_spares == []
    await wait_for(lambda: not any(alive(pid) for pid in last))  # closed spares exit


async def test_a_transport_with_no_spares_forks_every_start() -> None:
    transport = MultiprocessingTransport(entry=ENTRY, spares=0)
    supervisor = Supervisor(fake_plans("a", "b"), transport)
    try:
        await supervisor.ensure_running("a")
        await asyncio.sleep(0.3)
        assert transport.waiting_spares == []
    finally:
        await supervisor.shutdown(5)
        await transport.close()


def test_children_do_not_run_the_parents_main_script_again(tmp_path: Path) -> None:
    """A daemon started from a script (the ``goondan`` console script, a test runner, a
    program embedding it) must not have every agent import and run that script."""
    marker = tmp_path / "runs"
    script = tmp_path / "embedding.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, sys
            sys.path.insert(0, {str(ROOT)!r})
            with open({str(marker)!r}, "a") as runs:
                runs.write("ran\\n")

            async def main():
                from orchestrator.supervisor import Supervisor
                from orchestrator.testing import fake_plans
                from orchestrator.transport import MultiprocessingTransport

                transport = MultiprocessingTransport(entry={ENTRY!r}, spares=0)
                supervisor = Supervisor(fake_plans("a"), transport)
                await supervisor.ensure_running("a")
                await supervisor.shutdown(5)

            if __name__ == "__main__":
                asyncio.run(main())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"  # the parent's run only


CATALOGUE_PROBE = """
import sys


def report(conn):
    conn.send(sorted(name for name in sys.modules if name.startswith("genai_prices")))
"""


def test_agents_are_forked_with_the_price_catalogue_already_imported(tmp_path: Path) -> None:
    """An agent whose Model declares no ``pricing`` looks its price up in the genai-prices
    catalogue at its first call; imported in the fork server, that first Turn does not wait
    on the import, and its memory is shared rather than copied into each such agent."""
    loaded = fork_one_child(tmp_path, CATALOGUE_PROBE)
    for module in ("genai_prices", "genai_prices.data", "genai_prices.data_snapshot"):
        assert module in loaded, loaded
