"""Imported first in the fork server (see ``transport.PRELOAD``), for one side effect.

A ``systemctl stop`` (``KillMode=control-group``) or ``kill -TERM -<pgid>`` sends SIGTERM to
every process of the daemon's group, the fork server included. A fork server that died of it
would make every agent look as if it had exited (``multiprocessing`` reads the loss of the
server as exit code 255) while they still drain their Turns. So the fork server ignores
SIGTERM; it still exits when the Orchestrator does, since it watches the Orchestrator's pipe.
Agents forked from it inherit the ignored SIGTERM until they install their own handler.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
