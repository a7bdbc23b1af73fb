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
import secrets
import signal
from pathlib import Path

SCOPE_ENV = "GOONDAN_AGENT_SCOPE"


def new_scope() -> str:
    """A token unique to one agent process."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def scope_members(scope: str, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the processes (other than this one) whose environment carries ``scope``."""
    marker = f"{SCOPE_ENV}={scope}".encode()
    me = os.getpid()
    members = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone already, or not ours to read
            continue
        if marker in environment.split(b"\0"):
            members.append(int(entry.name))
    return members


def kill_scope(scope: str | None) -> list[int]:
    """SIGKILL every process of ``scope``; the pids it signalled."""
    if not scope:
        return []
    killed = []
    for pid in scope_members(scope):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
