"""The one timestamp format of everything written under the state directory and on the wire."""

from __future__ import annotations

import time


def utc_timestamp(seconds: float | None = None) -> str:
    """ISO 8601 UTC with milliseconds and a ``Z``: ``2026-01-31T12:00:00.000Z``."""
    now = time.time() if seconds is None else seconds
    whole = int(now)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{int((now - whole) * 1000):03d}Z"
    )
