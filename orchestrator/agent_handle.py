"""What the supervisor knows about one agent: its plan, status, process and crash counts.

One row per agent of the swarm, which the supervisor (:mod:`orchestrator.supervisor`) keeps
and changes; everything else reads it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from bundle.plan import Plan
from orchestrator.status import ExitInfo, ProcessStatus
from orchestrator.transport import Worker


@dataclass(eq=False)
class AgentHandle:
    """Everything the supervisor knows about one agent."""

    name: str
    plan: Plan
    status: ProcessStatus = ProcessStatus.NOT_STARTED
    worker: Worker | None = None
    wanted: bool = False
    """Started at least once and not stopped on purpose: restart it when it crashes."""
    restarts: int = 0
    crashes: int = 0
    consecutive_crashes: int = 0
    next_start_at: float = 0.0
    last_exit: ExitInfo | None = None
    boot_error: str | None = None
    started_at: float | None = None
    ready: asyncio.Future[None] | None = None
    stopping: bool = False
    shutdown_acked: asyncio.Event = field(default_factory=asyncio.Event)
    scope: str | None = None
    """The agent's process scope (``ipc.scope``), reported when it is ready."""
    watcher: asyncio.Task[None] | None = None
    """Waits for the current worker's exit and records it."""
    quick_clean_exits: int = 0
    """Clean exits nobody asked for, each soon after ready, in a row."""
    spawning: asyncio.Future[None] | None = None
    """Set while the transport starts a process (with the plan of that moment)."""

    @property
    def ready_now(self) -> bool:
        """Running and ready to take messages (idle or processing)."""
        return self.worker is not None and (
            self.status is ProcessStatus.IDLE or self.status is ProcessStatus.PROCESSING
        )

    @property
    def pid(self) -> int | None:
        """The worker's pid, while there is one."""
        return self.worker.pid if self.worker is not None else None

    def snapshot(self, now: float) -> dict[str, Any]:
        """A JSON row for ``status``."""
        return {
            "agent": self.name,
            "pid": self.pid,
            "status": self.status.value,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "consecutiveCrashes": self.consecutive_crashes,
            "uptimeSeconds": round(now - self.started_at, 3)
            if self.started_at and self.worker
            else None,
            "node": self.worker.node if self.worker is not None else None,
            "lastExit": self.last_exit.to_json() if self.last_exit else None,
            "bootError": self.boot_error,
            "nextStartInSeconds": round(max(0.0, self.next_start_at - now), 3)
            if self.status is ProcessStatus.CRASH_LOOP_BACK_OFF
            else None,
        }
