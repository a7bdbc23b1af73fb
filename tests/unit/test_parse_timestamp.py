"""The one way a timestamp is read back: what every reader of event, state and schedule times
accepts and refuses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goondan.time import parse_timestamp, utc_timestamp


def test_reads_back_what_is_written() -> None:
    stamp = utc_timestamp(1_769_860_800.25)
    assert parse_timestamp(stamp) == datetime(2026, 1, 31, 12, 0, 0, 250_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-31T12:00:00Z", datetime(2026, 1, 31, 12, tzinfo=UTC)),
        ("2026-01-31T12:00:00.000Z", datetime(2026, 1, 31, 12, tzinfo=UTC)),
        ("2026-01-31T14:00:00+02:00", datetime(2026, 1, 31, 12, tzinfo=UTC)),
        ("2026-01-31T07:00:00-05:00", datetime(2026, 1, 31, 12, tzinfo=UTC)),
    ],
)
def test_offsets_land_in_utc(text: str, expected: datetime) -> None:
    moment = parse_timestamp(text)
    assert moment == expected
    assert moment.tzinfo is UTC


def test_no_offset_is_refused_unless_read_as_utc() -> None:
    with pytest.raises(ValueError, match="no offset"):
        parse_timestamp("2026-01-31T12:00:00")
    assert parse_timestamp("2026-01-31T12:00:00", naive_is_utc=True) == datetime(
        2026, 1, 31, 12, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-31T12:00:00Zjunk", "0001-01-01T00:00+01:00"],
)
def test_malformed_or_out_of_range_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"isoformat|must be in|out of range"):
        parse_timestamp(text, naive_is_utc=True)
