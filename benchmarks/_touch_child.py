"""Children of the daemon's fork server that do nothing, or only touch the preload, for
``benchmarks/_process_figures.py``: what part of an idle agent's memory copy-on-write costs.

Each is started as the target of a ``Process`` of the transport's own context (the same fork
server and preload as an agent), not through the trampoline: it runs no entry, imports nothing
the preload lacks but this module, opens no event loop. It does its one action, reports the
size of the collector's permanent generation over the pipe (the objects the fork server froze),
then waits for the pipe to close. Its memory, read then, is the cost of the action and nothing
else.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from multiprocessing.connection import Connection

NOTHING = "nothing"
"""Fork and wait: the least any child of the fork server costs."""
COLLECT = "collect"
"""One full ``gc.collect()``: the collector's pass over the child's own objects."""
UNFROZEN_COLLECT = "unfrozen_collect"
"""``gc.unfreeze()`` then ``gc.collect()``: the pass a child of a fork server that had not
frozen its preload would make over every preloaded object, writing into each one's header."""
REFCOUNT_WALK = "refcount_walk"
"""Read every global of every loaded module once: each read writes the object's reference
count, as running code does to whatever it uses."""
ACTIONS = (NOTHING, COLLECT, UNFROZEN_COLLECT, REFCOUNT_WALK)


def _walk_module_globals() -> None:
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            del value


def run(conn: Connection, action: str) -> None:
    """Do ``action`` (one of :data:`ACTIONS`), report the frozen count, wait for the pipe."""
    frozen = gc.get_freeze_count()
    if action == COLLECT:
        gc.collect()
    elif action == UNFROZEN_COLLECT:
        gc.unfreeze()
        gc.collect()
    elif action == REFCOUNT_WALK:
        _walk_module_globals()
    conn.send_bytes(str(frozen).encode())
    with contextlib.suppress(EOFError, OSError):
        conn.recv_bytes()
    os._exit(0)
