"""The process scope of an agent: every program its tools start, found again by a marker.

An agent sets ``GOONDAN_AGENT_SCOPE`` in its environment to a token of its own, and programs
its tools start inherit it (the ``bash`` tool passes it on explicitly), however they detach:
``nohup``, ``setsid``, double forks. When the agent stops, or dies, whoever notices kills every
process still carrying the token, so no tool program outlives its agent. A program that clears
its own environment escapes this; only a cgroup would hold it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection
from pathlib import Path

SCOPE_ENV = "GOONDAN_AGENT_SCOPE"


def new_scope() -> str:
    """A token unique to one agent process (64 random bits after its pid)."""
    return f"{os.getpid()}-{os.urandom(8).hex()}"


def scope_members(scope: str, proc: Path = Path("/proc"), skip: Collection[int] = ()) -> list[int]:
    """Pids of the processes (other than this one and ``skip``) whose environment carries
    ``scope``.

    This reads the environment of every process on the machine, so it is kept lean: the
    processes a caller knows to be others (a supervisor's running agents) are skipped, and an
    environment is split into entries only when the marker occurs in it at all.
    """
    marker = f"{SCOPE_ENV}={scope}".encode()
    me = os.getpid()
    members = []
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid in skip:
            continue
        try:
            with open(os.path.join(proc, name, "environ"), "rb", buffering=0) as environ:
                environment = environ.read()
        except OSError:  # gone already, or not ours to read
            continue
        if marker in environment and marker in environment.split(b"\0"):
            members.append(pid)
    return members


def kill_scope(scope: str | None, skip: Collection[int] = ()) -> list[int]:
    """SIGKILL every process of ``scope`` (``skip`` being known not to belong to it); the pids
    it signalled."""
    if not scope:
        return []
    killed = []
    for pid in scope_members(scope, skip=skip):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
