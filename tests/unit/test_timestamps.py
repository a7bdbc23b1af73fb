"""Everything written under the state directory carries one timestamp format."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent_process.events import EventRecorder
from goondan.time import utc_timestamp, utc_timestamp_us
from ipc.runtime_events import ProcessSpawnedEvent, RuntimeEvent, TurnStartedEvent
from orchestrator.eventlog import EventLog, read_events

FORMAT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_the_format_is_iso_utc_with_milliseconds() -> None:
    assert utc_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert utc_timestamp(1.9996) == "1970-01-01T00:00:01.999Z"
    assert FORMAT.match(utc_timestamp())


def test_stamps_of_seconds_in_any_order_name_their_own_second() -> None:
    # The formatted second is kept between calls: going back and forth must not reuse it.
    moments = [1767225599.25, 1767225600.5, 1767225599.75, 86400.0, 1767225600.0625]
    assert [utc_timestamp(moment) for moment in moments] == [
        "2025-12-31T23:59:59.250Z",
        "2026-01-01T00:00:00.500Z",
        "2025-12-31T23:59:59.750Z",
        "1970-01-02T00:00:00.000Z",
        "2026-01-01T00:00:00.062Z",
    ]


def test_runtime_and_lifecycle_events_use_it(tmp_path: Path) -> None:
    seen: list[RuntimeEvent] = []
    EventRecorder(seen.append, agent_name="a", instance_key="k", trace_id="t").emit(
        TurnStartedEvent(), "s1", None
    )
    log = EventLog(tmp_path)
    log.append(seen[0])
    log.lifecycle(ProcessSpawnedEvent(pid=1), "a")
    log.close()
    stamps = [event["timestamp"] for _, event in read_events(log.path)]
    assert len(stamps) == 2
    assert all(FORMAT.match(stamp) for stamp in stamps), stamps
    json.dumps(stamps)


def test_a_process_log_stamp_has_microseconds_and_a_fixed_width() -> None:
    assert utc_timestamp_us(1767225599.25) == "2025-12-31T23:59:59.250000Z"
    assert utc_timestamp_us(0.5) == "1970-01-01T00:00:00.500000Z"
    stamps = [utc_timestamp_us(moment) for moment in (86399.75, 86400.0, 86400.125)]
    assert stamps == sorted(stamps)
    assert len({len(text) for text in stamps}) == 1
