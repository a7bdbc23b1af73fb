"""The floor of an agent start for ``benchmarks/_process_figures.py``: a child that does nothing.

It is started exactly as an AgentProcess is (the daemon's fork server and preload, the same
trampoline, the same pipe) and reports ready at once; then it only waits for the pipe to
close. Nothing an agent does can start faster, or cost less memory, than this.
"""

from __future__ import annotations

import contextlib
import os
from multiprocessing.connection import Connection

READY = b"ready"


def ready(conn: Connection, plan: object) -> None:
    """Report ready, then wait for the parent to close the pipe."""
    conn.send_bytes(READY)
    with contextlib.suppress(EOFError, OSError):
        conn.recv_bytes()
    os._exit(0)
