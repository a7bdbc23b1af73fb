"""The runtime event log: append, read back (skipping torn lines), filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.eventlog import EventLog, matches, parse_since, read_events


def test_append_and_read_back_skipping_a_line_still_being_written(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.append({"type": "turn.started", "agentName": "a", "traceId": "t1"})
    log.lifecycle("spawned", "b", pid=7)
    log.close()
    with open(log.path, "a") as f:
        f.write('{"type": "turn.comp')  # torn: no newline yet
    events = [e for _, e in read_events(log.path)]
    assert [e["type"] for e in events] == ["turn.started", "process.spawned"]
    offset = list(read_events(log.path))[-1][0]
    with open(log.path, "a") as f:
        f.write('leted"}\n{"type": "x"}\n')
    assert [e["type"] for _, e in read_events(log.path, offset)] == ["turn.completed", "x"]


@pytest.mark.parametrize(
    ("text", "delta"), [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400)]
)
def test_since_durations(text: str, delta: int) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_since(text, now) == now - timedelta(seconds=delta)


def test_since_timestamp_and_filters() -> None:
    since = parse_since("2026-01-01T00:00:00Z")
    event = {"agentName": "a", "traceId": "t", "timestamp": "2026-01-01T00:00:01.000+00:00"}
    assert matches(event, agent="a", trace="t", since=since)
    assert not matches(event, agent="b", trace=None, since=None)
    assert not matches(event, agent=None, trace="u", since=None)
    assert not matches(event, agent=None, trace=None, since=parse_since("2026-01-02T00:00:00Z"))
