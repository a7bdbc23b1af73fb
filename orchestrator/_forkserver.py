"""Imported first in the fork server (see ``transport.PRELOAD``), for one side effect.

A ``systemctl stop`` (``KillMode=control-group``) or ``kill -TERM -<pgid>`` sends SIGTERM to
every process of the daemon's group, the fork server included. A fork server that died of it
would make every agent look as if it had exited (``multiprocessing`` reads the loss of the
server as exit code 255) while they still drain their Turns. So the fork server ignores
SIGTERM; it still exits when the Orchestrator does, since it watches the Orchestrator's pipe.

SIGINT (Ctrl-C) is ignored here too. ``multiprocessing`` ignores it in the server anyway, but
gives each forked child the disposition the server had before, which without this line is
Python's ``KeyboardInterrupt``: an agent forked at the moment of a Ctrl-C would die of it
before its own code runs. Agents set both dispositions themselves first thing
(``agent_process.main.serve``); this only closes the window before that.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
