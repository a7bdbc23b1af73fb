"""The health of one Connection: why it is down, since when, and when it last brought an event.

Its connector's process reports what the daemon cannot see for itself: a boot error (a missing
key, a port in use) and runtime failures (a poll answered 500, the network down), each a short
message with secrets removed, and a success after them (a poll answered, the listener up). The
daemon adds what it sees: a crash, and each event that arrives (a success too). ``status``
(table and ``--json``), ``GET /v1/agents``, the studio and the metrics show the result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goondan.time import parse_timestamp, utc_timestamp

if TYPE_CHECKING:
    from orchestrator.operations.answers import ConnectionRow


@dataclass(slots=True)
class ConnectionHealth:
    """What went wrong last, and how often in a row."""

    last_error: str | None = None
    """The last failure's message (no secrets), kept after a success to tell what happened."""
    last_error_at: float | None = None
    consecutive_failures: int = 0
    """Failures since the last success; 0 once the source works again."""
    failures: int = 0
    """Every failure since the daemon started."""
    last_event_at: float | None = None

    def failed(self, error: str, at: float | None = None) -> None:
        """Count one failure: a boot error, a runtime failure, a crash."""
        self.last_error = error
        self.last_error_at = time.time() if at is None else at
        self.consecutive_failures += 1
        self.failures += 1

    def succeeded(self) -> None:
        """The source works: the failures in a row start over."""
        self.consecutive_failures = 0

    def event_received(self, at: float | None = None) -> None:
        """An event came in: a success, and its time."""
        self.last_event_at = time.time() if at is None else at
        self.succeeded()

    def to_json(self, running: bool) -> dict[str, Any]:
        """``{up, lastError, lastErrorAt, consecutiveFailures, failures, lastEventAt}``:
        ``up`` when its process runs and its last report was no failure."""
        return {
            "up": running and self.consecutive_failures == 0,
            "lastError": self.last_error,
            "lastErrorAt": _time(self.last_error_at),
            "consecutiveFailures": self.consecutive_failures,
            "failures": self.failures,
            "lastEventAt": _time(self.last_event_at),
        }


def _time(at: float | None) -> str | None:
    return None if at is None else utc_timestamp(at)


def why_cell(row: ConnectionRow) -> str:
    """The ``WHY`` of a ``status`` row of a Connection: its last error while it is failing,
    else its boot error or last exit."""
    health = row.health
    if health.consecutive_failures and health.last_error:
        return health.last_error
    exit_reason = row.last_exit.reason if row.last_exit is not None else None
    return row.boot_error or exit_reason or "-"


def last_event_cell(row: ConnectionRow, now: float | None = None) -> str:
    """How long ago the Connection's last event came: ``12s ago``, ``5m ago``, ``-`` for none."""
    at = row.health.last_event_at
    if at is None:
        return "-"
    try:
        then = int(parse_timestamp(at, naive_is_utc=True).timestamp())
    except ValueError:
        return "-"
    seconds = max(0, int((time.time() if now is None else now) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"
