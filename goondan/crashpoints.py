"""Named points where a test may freeze a process, to kill it exactly there.

Durability claims ("an accepted event survives a crash between X and Y") can only be tested by
crashing at X-and-not-Y. A test sets :data:`ENV` to ``<point>=<fifo>`` before starting the
daemon (its agents and connectors get it too); the first process to reach :func:`point` with
that name claims the FIFO (renames it to ``<fifo>.reached``: one process wins, the point
freezes nothing after that, in any process), writes ``<point> <pid>`` to it (the test holds it
open for reading, so the write is the test's signal) and stops itself with ``SIGSTOP``. The
test then sends ``SIGKILL`` (the crash) or ``SIGCONT``. Unset, a point costs one lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "GOONDAN_CRASHPOINT"
"""``<point>=<path of a FIFO>``; read only by tests."""


def point(name: str) -> None:
    """Freeze this process here if a test asked for ``name`` (see the module docstring)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    wanted, _, fifo = spec.partition("=")
    if wanted != name or not fifo:
        return
    claimed = fifo + ".reached"
    try:
        os.rename(fifo, claimed)
    except FileNotFoundError:  # reached already, here or in another process
        return
    with open(claimed, "w", encoding="utf-8") as signal_to_test:
        signal_to_test.write(f"{name} {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGSTOP)
