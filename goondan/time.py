"""The one timestamp format of everything written under the state directory and on the wire,
and the one way to read a timestamp back."""

from __future__ import annotations

import time
from datetime import UTC, datetime

_second: tuple[int, str] = (-1, "")
"""The last whole second formatted, and its text: a Turn stamps many records in one second,
and ``strftime`` is most of a stamp's cost."""


def _second_text(whole: int) -> str:
    global _second
    second = _second  # one read: another thread may replace it meanwhile
    if second[0] != whole:
        second = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return second[1]


def utc_timestamp(seconds: float | None = None) -> str:
    """ISO 8601 UTC with milliseconds and a ``Z``: ``2026-01-31T12:00:00.000Z``."""
    now = time.time() if seconds is None else seconds
    whole = int(now)
    return f"{_second_text(whole)}.{int((now - whole) * 1000):03d}Z"


def utc_timestamp_us(seconds: float | None = None) -> str:
    """:func:`utc_timestamp` with microseconds, fixed width (stamps sort as text): the prefix
    of a stored process log line, ``2026-01-31T12:00:00.000000Z``."""
    now = time.time() if seconds is None else seconds
    whole = int(now)
    return f"{_second_text(whole)}.{int((now - whole) * 1_000_000):06d}Z"


def parse_timestamp(text: str, *, naive_is_utc: bool = False) -> datetime:
    """An ISO 8601 timestamp (``Z`` or a ``+hh:mm`` offset) as an aware datetime in UTC.

    One without an offset is refused, unless ``naive_is_utc`` reads it as UTC (for what a person
    types, or a record written before offsets were). ``ValueError`` for anything else, a moment
    that leaves the years 1 to 9999 once in UTC included.
    """
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        if not naive_is_utc:
            raise ValueError(f"{text!r} has no offset")
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{text!r} is out of range in UTC") from None
