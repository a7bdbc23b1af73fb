"""Every line the runtime writes to its event log, on a real run of the offline example, reads
back typed and writes back the same JSON object: no producer writes a field its family does not
declare (which would keep the line raw, unseen by the metrics, the budgets and the spans)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ipc.runtime_events import EventType, RawEvent, decode_line, encode_event
from tests.support.daemon import run_cli

ROOT = Path(__file__).resolve().parents[3]


def test_the_offline_example_writes_only_typed_events(tmp_path: Path) -> None:
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml.example")
    state = tmp_path / "state"
    result = run_cli(
        "run",
        "goondan.yaml.example",
        "--state-dir",
        str(state),
        "--input",
        "write notes.txt hello world",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (state / "runtime-events.jsonl").read_bytes().splitlines()
    events = [decode_line(line) for line in lines]
    raw = [line for line, event in zip(lines, events, strict=True) if isinstance(event, RawEvent)]
    assert raw == []
    for line, event in zip(lines, events, strict=True):
        assert event is not None
        assert json.loads(encode_event(event)) == json.loads(line)
    seen = {event.type for event in events if event is not None}
    # The handoff example: lifecycle, Turns, Steps and tools of two agents.
    assert {
        EventType.EVENTLOG_OPENED,
        EventType.PROCESS_SPAWNED,
        EventType.PROCESS_READY,
        EventType.PROCESS_EXITED,
        EventType.TURN_STARTED,
        EventType.TURN_COMPLETED,
        EventType.STEP_STARTED,
        EventType.STEP_COMPLETED,
        EventType.TOOL_CALLED,
        EventType.TOOL_COMPLETED,
    } <= seen
