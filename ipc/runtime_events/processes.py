"""The lifecycle events of an agent's or a connection's process, and of the configuration."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ipc.runtime_events.base import Number, RuntimeEvent
from ipc.runtime_events.types import EventType

# -- processes --------------------------------------------------------------------------------


class ProcessEvent(RuntimeEvent):
    """The lifecycle of an agent's or a connection's process, or of the configuration."""

    pid: int | UnsetType | None = UNSET
    node: str | UnsetType = UNSET
    """The cluster node it runs on."""
    expected: bool | UnsetType = UNSET
    """Whether the exit was asked for (``process.exited``)."""
    consecutive_crashes: int | UnsetType = UNSET
    exit_code: int | UnsetType | None = UNSET
    signal: str | UnsetType | None = UNSET
    reason: str | UnsetType | None = UNSET
    delay_seconds: Number | UnsetType = UNSET
    restarts: int | UnsetType = UNSET
    errors: list[Any] | UnsetType = UNSET
    restarted: list[str] | UnsetType = UNSET
    resumed_instance: str | UnsetType = msgspec.field(default=UNSET, name="instance")
    """The conversation instance resumed (``process.resume_pending``)."""
    fds: list[int] | UnsetType = UNSET
    swarm: str | UnsetType = UNSET
    """The swarm a daemon starts to run (the daemon's own ``process.ready``, agent
    ``orchestrator``): where the log says a daemon's life, and its counts, began."""


class ProcessSpawnedEvent(ProcessEvent, tag=EventType.PROCESS_SPAWNED.value):
    """A process was started."""


class ProcessAdoptedEvent(ProcessEvent, tag=EventType.PROCESS_ADOPTED.value):
    """A process started elsewhere (a cluster node) was taken over."""


class ProcessReadyEvent(ProcessEvent, tag=EventType.PROCESS_READY.value):
    """A process booted and serves."""


class ProcessExitedEvent(ProcessEvent, tag=EventType.PROCESS_EXITED.value):
    """A process exited."""


class ProcessBackoffEvent(ProcessEvent, tag=EventType.PROCESS_BACKOFF.value):
    """A crashing process waits ``delaySeconds`` before its next start."""


class ProcessRestartingEvent(ProcessEvent, tag=EventType.PROCESS_RESTARTING.value):
    """A crashed process is started again."""


class ProcessRestartRequestedEvent(ProcessEvent, tag=EventType.PROCESS_RESTART_REQUESTED.value):
    """An agent asked to be restarted after its Turn."""


class ProcessConfigRejectedEvent(ProcessEvent, tag=EventType.PROCESS_CONFIG_REJECTED.value):
    """A configuration change did not load; nothing changed."""


class ProcessConfigAppliedEvent(ProcessEvent, tag=EventType.PROCESS_CONFIG_APPLIED.value):
    """A configuration change was adopted."""


class ProcessResumePendingEvent(ProcessEvent, tag=EventType.PROCESS_RESUME_PENDING.value):
    """A conversation interrupted mid-Turn is resumed."""


class ProcessBrokenFdsEvent(ProcessEvent, tag=EventType.PROCESS_BROKEN_FDS.value):
    """A tool closed or replaced a standard descriptor: the agent exits to restart clean."""
