"""Process status, exit causes and the crash-loop backoff: data and pure functions (STYLE 3, 4)."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

CRASH_THRESHOLD = 5
"""Crashes restarted immediately before backoff starts (upstream §5.4)."""
INITIAL_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 300.0

EXIT_BOOT_FAILURE = 78
"""Exit code an AgentProcess uses when it cannot boot (bad plan, tool module fails to load).

Such a child is not restarted at full speed: the supervisor goes straight to backoff and
reports the reason, since restarting cannot fix a broken configuration.
"""


EXIT_REASONS = {
    EXIT_BOOT_FAILURE: "cannot boot",
    71: "a tool broke stdin, stdout or stderr",
    72: "memory limit reached",
}
"""What the exit codes AgentProcesses reserve mean (shown in ``status`` as the last exit)."""


class ProcessStatus(enum.StrEnum):
    """Lifecycle of one AgentProcess (DESIGN.md "Supervision")."""

    SPAWNING = "spawning"
    IDLE = "idle"
    PROCESSING = "processing"
    DRAINING = "draining"
    TERMINATED = "terminated"
    CRASHED = "crashed"
    CRASH_LOOP_BACK_OFF = "crashLoopBackOff"


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """How a child process ended: an exit code, or the signal that killed it."""

    exitcode: int | None
    """``Process.exitcode``: ``>= 0`` a normal exit, ``< 0`` killed by signal ``-exitcode``."""

    @property
    def signal(self) -> int | None:
        """The signal number that killed the process, if one did."""
        return -self.exitcode if self.exitcode is not None and self.exitcode < 0 else None

    @property
    def clean(self) -> bool:
        """Exit code 0."""
        return self.exitcode == 0

    @property
    def boot_failure(self) -> bool:
        """The child reported it could not boot."""
        return self.exitcode == EXIT_BOOT_FAILURE

    def describe(self) -> str:
        """``exit code 1`` or ``signal SIGKILL``, with the reason of a code agents reserve."""
        name = self.signal_name
        if name is not None:
            return f"signal {name}"
        reason = EXIT_REASONS.get(self.exitcode) if self.exitcode is not None else None
        return f"exit code {self.exitcode}" + (f" ({reason})" if reason else "")

    @property
    def signal_name(self) -> str | None:
        """``SIGKILL`` style name of :attr:`signal`, if any."""
        sig = self.signal
        if sig is None:
            return None
        try:
            return signal.Signals(sig).name
        except ValueError:
            return str(sig)

    def to_json(self) -> dict[str, int | str | None]:
        """``{exitCode, signal, reason}``."""
        return {
            "exitCode": self.exitcode if self.signal is None else None,
            "signal": self.signal_name,
            "reason": self.describe(),
        }


def next_restart_delay(
    consecutive_crashes: int,
    *,
    threshold: int = CRASH_THRESHOLD,
    initial: float = INITIAL_BACKOFF_SECONDS,
    maximum: float = MAX_BACKOFF_SECONDS,
) -> float:
    """Seconds to wait before restarting after ``consecutive_crashes`` crashes in a row.

    The first ``threshold`` crashes restart at once; then the delay doubles from ``initial``
    up to ``maximum``: with the defaults, crash 6 → 1 s, 7 → 2 s, 8 → 4 s, ... capped at 300 s
    (``min(1 s · 2^(n−6), 300 s)``).
    """
    if consecutive_crashes <= threshold:
        return 0.0
    exponent = consecutive_crashes - threshold - 1
    if exponent >= 64:  # 2**64 s is past any cap; avoid float overflow
        return maximum
    return float(min(initial * 2**exponent, maximum))
