"""The agents of a swarm as its runtime event log tells them, for the studio after the fact (no
daemon to ask): each agent's last status, pid, restarts, crashes and last exit, and the name of
the swarm the last daemon ran.

The figures are those the daemon showed while it ran. Its counts start at each daemon's start,
which the log marks with the daemon's own ``process.ready`` (agent ``orchestrator``, carrying
the swarm's name), so they start again there. A restart is counted whichever way it came: a
crash restarted (``process.restarting`` says the count), an unasked clean exit restarted at
once, an operator's ``restart``, an edited configuration adopted: each is an exit followed by a
new start of the same agent within one daemon's life.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipc.protocol import ORCHESTRATOR
from ipc.runtime_events import (
    AnyEvent,
    EventType,
    ProcessEvent,
    TurnEvent,
    TurnStartedEvent,
    given,
)
from orchestrator.telemetry.spans import epoch_ms


def is_crash(event: AnyEvent) -> bool:
    """Whether a ``process.exited`` event is a crash: an exit nobody asked for, other than
    exit code 0 (which the daemon restarts at once and counts as no crash)."""
    if not isinstance(event, ProcessEvent):
        return False
    clean = event.exit_code == 0 and given(event.signal) is None
    return event.expected is False and not clean


@dataclass(slots=True)
class AgentRecord:
    """An agent's last recorded state, as the event log tells it (no daemon to ask)."""

    agent: str
    status: str = "terminated"
    pid: int | None = None
    restarts: int = 0
    crashes: int = 0
    last_exit: dict[str, Any] | None = None
    running_turns: int = 0
    last_crash_ms: float | None = None
    down: bool = False
    """It exited, and its next start (if one comes in this daemon's life) is a restart."""

    def add(self, event: AnyEvent) -> None:
        """Fold one event about this agent into its state."""
        kind = event.type
        if isinstance(event, ProcessEvent):
            self._process(event)
        elif isinstance(event, TurnStartedEvent):
            self.running_turns += 1
            self.status = "processing"
        elif (
            kind in (EventType.TURN_COMPLETED, EventType.TURN_FAILED)
            and isinstance(event, TurnEvent)
            and self.running_turns
        ):
            self.running_turns -= 1
            if not self.running_turns and self.status == "processing":
                self.status = "idle"

    def daemon_started(self) -> None:
        """A new daemon runs the swarm: its counts start from nothing, as the daemon's do."""
        self.restarts = 0
        self.crashes = 0
        self.down = False

    def _process(self, event: ProcessEvent) -> None:
        kind = event.type
        if kind == EventType.PROCESS_SPAWNED:
            if self.down:  # started again after an exit, in the same daemon's life
                self.restarts += 1
                self.down = False
            self.status, self.running_turns = "spawning", 0
            pid = given(event.pid)
            self.pid = pid if pid is not None else self.pid
        elif kind == EventType.PROCESS_READY:
            self.status = "idle"
        elif kind == EventType.PROCESS_EXITED:
            self._exited(event)
        elif kind == EventType.PROCESS_BACKOFF:
            self.status = "crashLoopBackOff"
        elif kind == EventType.PROCESS_RESTARTING:
            restarts = given(event.restarts)
            self.restarts = restarts if restarts is not None else self.restarts + 1
            self.down = False  # counted: the start that follows is this restart

    def _exited(self, event: ProcessEvent) -> None:
        self.running_turns = 0
        self.down = True
        self.last_exit = {
            "exitCode": given(event.exit_code),
            "signal": given(event.signal),
            "reason": given(event.reason),
        }
        if is_crash(event):
            self.status = "crashed"
            self.crashes += 1
            self.last_crash_ms = epoch_ms(event.timestamp)
        else:
            # Asked to stop (the daemon stopping, a restart), or exit code 0 unasked (the
            # daemon restarts it and counts no crash): the latest exit is no crash, so an
            # earlier one is no longer news.
            self.status = "terminated"
            self.last_crash_ms = None

    def row(self) -> dict[str, Any]:
        """A row shaped like the daemon's ``/v1/agents`` rows."""
        return {
            "agent": self.agent,
            "pid": self.pid,
            "status": self.status,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "consecutiveCrashes": None,
            "uptimeSeconds": None,
            "node": None,
            "lastExit": self.last_exit,
            "bootError": None,
            "nextStartInSeconds": None,
            "pendingDelegates": 0,
            "sendsInFlight": 0,
            "lastCrashMs": self.last_crash_ms,
        }


class AgentRecords(dict[str, AgentRecord]):
    """Every agent's :class:`AgentRecord` by name, and the swarm the last daemon ran."""

    swarm: str | None = None
    """The swarm's name, from the last daemon start the log holds (``None``: none there)."""

    def add(self, event: ProcessEvent | TurnEvent) -> None:
        """Fold one lifecycle or Turn event into the record of its agent (or, the daemon's
        own ``process.ready``, start every count afresh)."""
        agent = event.agent_name
        if agent == ORCHESTRATOR:
            if isinstance(event, ProcessEvent) and event.type == EventType.PROCESS_READY:
                self.swarm = given(event.swarm) or self.swarm
                for record in self.values():
                    record.daemon_started()
            return
        if agent not in self:
            self[agent] = AgentRecord(agent)
        self[agent].add(event)
