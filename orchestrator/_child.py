"""The first code an AgentProcess runs: import the agent entry point by name and call it.

The Orchestrator never imports ``agent_process`` itself (DESIGN.md arrows); it names the entry
point as ``module:function`` and this trampoline resolves it inside the child. A spare process
(:func:`run_spare`) is the same trampoline started ahead of time, waiting for its entry and
plan on the pipe.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
from collections.abc import Mapping
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

from bundle.plan import Plan
from ipc.logs import LOG_FORMAT_ENV


def run_entry(
    entry: str,
    conn: Connection,
    plan: Plan | dict[str, Any],
    environment: Mapping[str, str] | None = None,
    take_output: bool = False,
) -> None:
    """Call ``entry`` (``"package.module:function"``) with the pipe end and the plan (the
    ``bundle.plan`` object the supervisor holds; a dict where a caller passes one).

    SIGINT is ignored first thing, whatever the entry: Ctrl-C in a terminal (or a signal to
    the whole process group) is meant for the Orchestrator, which drains its agents
    gracefully; an agent that died of it would lose the Turn it runs. (The fork server hands
    its children SIGINT ignored already, see ``orchestrator._forkserver``; another start
    method would not.) Then ``environment``, when given, becomes the whole ``os.environ``
    (and the environment of every program the process starts): the variables its plan names
    (``orchestrator.environment.child_environment``), before any code of the entry runs.
    With ``take_output``, the daemon sends the process's stdout and stderr (pipes it reads
    into ``orchestrator.process_logs``) on the pipe first: they replace descriptors 1 and 2,
    and the log keeps the format the daemon's own stderr chose (a terminal's, or JSON).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log_format = _take_output(conn) if take_output else None
    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)
    if log_format is not None:
        os.environ[LOG_FORMAT_ENV] = log_format
    module_name, _, function = entry.partition(":")
    target = getattr(importlib.import_module(module_name), function)
    target(conn, plan)


def run_spare(conn: Connection) -> None:
    """Wait for ``(entry, plan, environment)`` on the pipe, then run as :func:`run_entry`
    does.

    The transport forks spares ahead of need, so an agent it starts later skips the fork and
    the child's start-up. A spare whose pipe closes first (the transport closed, or the
    daemon is gone) exits at once.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        entry, plan, environment, take_output = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)
    run_entry(entry, conn, plan, environment, take_output)


def _take_output(conn: Connection) -> str:
    """Receive the two descriptors :func:`hand_output` sends and make them 1 and 2; the log
    format the descriptor 2 inherited until now called for."""
    log_format = "console" if os.isatty(2) else "json"
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        stdout, stderr = reduction.recvfds(sock, 2)
    for fd, target in ((stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    return log_format


def hand_output(conn: Connection, stdout: int, stderr: int) -> None:
    """Send a child its stdout and stderr on its pipe (read by :func:`_take_output`, before
    anything else crosses the pipe after its plan)."""
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        reduction.sendfds(sock, [stdout, stderr])
