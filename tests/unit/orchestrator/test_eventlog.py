"""The runtime event log: append, read back (skipping torn lines), filter."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ipc.runtime_events import ProcessSpawnedEvent, read_event
from orchestrator.eventlog import EventLog, matches, parse_since, read_events
from orchestrator.status import ExitInfo


def test_append_and_read_back_skipping_a_line_still_being_written(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.append(read_event({"type": "turn.started", "agentName": "a", "traceId": "t1"}))
    log.lifecycle(ProcessSpawnedEvent(pid=7), "b")
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


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("99999999999d", "before the year 1"),
        ("1000000d", "before the year 1"),
        ("yesterday", "Invalid isoformat string"),
        ("", "Invalid isoformat string"),
    ],
)
def test_since_refuses_what_it_cannot_place_with_a_value_error(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_since(text, datetime(2026, 1, 1, tzinfo=UTC))


def test_since_timestamp_and_filters() -> None:
    since = parse_since("2026-01-01T00:00:00Z")
    event = read_event(
        {"agentName": "a", "traceId": "t", "timestamp": "2026-01-01T00:00:01.000+00:00"}
    )
    assert matches(event, agent="a", trace="t", since=since)
    assert not matches(event, agent="b", trace=None, since=None)
    assert not matches(event, agent=None, trace="u", since=None)
    assert not matches(event, agent=None, trace=None, since=parse_since("2026-01-02T00:00:00Z"))


def test_each_file_opens_with_its_format_and_rotates_by_size(tmp_path: Path) -> None:
    import json

    from orchestrator.eventlog import FILE_NAME, log_files, read_all

    log = EventLog(tmp_path, max_bytes=2_000, kept=2)
    for n in range(100):
        log.append(read_event({"type": "tool.called", "agentName": "a", "n": n, "pad": "x" * 40}))
    log.close()

    files = log_files(tmp_path)
    assert [f.name for f in files] == [f"{FILE_NAME}.2", f"{FILE_NAME}.1", FILE_NAME]
    for path in files:
        lines = path.read_bytes().splitlines()
        assert json.loads(lines[0])["type"] == "eventlog.opened"
        assert json.loads(lines[0])["formatVersion"] == 1
        assert path.stat().st_size <= 2_000
    numbers = [event["n"] for event in read_all(tmp_path)]
    # The oldest files were dropped; what is kept is whole and in order.
    assert numbers == list(range(numbers[0], 100))
    assert numbers[0] > 0
    assert not (tmp_path / f"{FILE_NAME}.3").exists()


def test_a_newer_event_log_is_refused_by_name(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from orchestrator.eventlog import FILE_NAME, EventLogTooNew

    path = tmp_path / FILE_NAME
    header = {"type": "eventlog.opened", "formatVersion": 9}
    path.write_text(json.dumps(header) + "\n" + json.dumps({"type": "x"}) + "\n")
    with pytest.raises(EventLogTooNew, match="event log format 9"):
        list(read_events(path))
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "logs", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 1
    assert "event log format 9; this runtime reads up to 1: upgrade goondan" in shown.stderr


def test_logs_reads_across_rotated_files(tmp_path: Path) -> None:
    import subprocess
    import sys

    log = EventLog(tmp_path, max_bytes=1_500, kept=3)
    for n in range(30):
        log.append(read_event({"type": "turn.started", "agentName": "a", "traceId": f"t{n:02d}"}))
    log.close()
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "logs", "--state-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    import json

    traces = [json.loads(line)["traceId"] for line in shown.stdout.splitlines()]
    assert traces == [f"t{n:02d}" for n in range(30)]
    assert (tmp_path / "runtime-events.jsonl.1").exists()  # they did not fit in one file


def test_a_lifecycle_event_keeps_its_line(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.lifecycle(ExitInfo(-9).event(expected=False, consecutive_crashes=2), "a")
    log.lifecycle(ProcessSpawnedEvent(pid=5, node="n1"), "connection:c")
    log.close()
    lines = log.path.read_text().splitlines()[1:]
    stamps = [json.loads(line)["timestamp"] for line in lines]
    unstamped = [line.replace(stamp, "T", 1) for line, stamp in zip(lines, stamps, strict=True)]
    assert unstamped == [
        '{"type":"process.exited","timestamp":"T","agentName":"a","expected":false,'
        '"consecutiveCrashes":2,"exitCode":null,"signal":"SIGKILL","reason":"signal SIGKILL"}',
        '{"type":"process.spawned","timestamp":"T","agentName":"connection:c","pid":5,"node":"n1"}',
    ]


def test_a_bare_kind_is_refused_not_logged_as_a_raw_event(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    with pytest.raises(TypeError, match="not a runtime event struct"):
        log.lifecycle("spawnd", "a")  # type: ignore[arg-type]  # the misspelling under test
    log.close()
    assert not log.path.exists() or list(read_events(log.path)) == []
