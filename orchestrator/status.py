"""Process status, exit causes and the crash-loop backoff: data and pure functions."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from goondan.defaults import CRASH_THRESHOLD, INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS
from ipc.protocol import EXIT_BOOT_FAILURE, EXIT_REASONS
from ipc.runtime_events import ProcessExitedEvent

__all__ = [
    "EXIT_BOOT_FAILURE",
    "EXIT_REASONS",
    "ExitInfo",
    "ProcessStatus",
    "next_restart_delay",
]


class ProcessStatus(enum.StrEnum):
    """Lifecycle of one AgentProcess (DESIGN.md "Supervision").

    The seven states of the design, plus :attr:`NOT_STARTED`: agents start on first use, and
    one that never ran has not terminated.
    """

    NOT_STARTED = "notStarted"
    """No process was ever started for it (it starts when first asked)."""
    SPAWNING = "spawning"
    IDLE = "idle"
    PROCESSING = "processing"
    DRAINING = "draining"
    TERMINATED = "terminated"
    """Its process exited when asked to (a stop, a restart, the daemon stopping)."""
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

    def event(self, expected: bool, consecutive_crashes: int) -> ProcessExitedEvent:
        """The ``process.exited`` event of this exit (``expected``: it was asked for)."""
        return ProcessExitedEvent(
            expected=expected,
            consecutive_crashes=consecutive_crashes,
            exit_code=self.exitcode if self.signal is None else None,
            signal=self.signal_name,
            reason=self.describe(),
        )

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
