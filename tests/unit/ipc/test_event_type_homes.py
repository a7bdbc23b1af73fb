"""Runtime event types are spelled once: in ``ipc.runtime_events.types``, or in the ground-floor
module whose constant its enum member names (the event log's header line, a handoff's type).
Everywhere else the code names an ``EventType`` member, so a misspelled type is a type error."""

from __future__ import annotations

import ast
from pathlib import Path

from ipc.runtime_events import EventType

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("goondan", "bundle", "ipc", "tools_base", "agent_process", "connector_process")
HOMES = {
    ROOT / "ipc" / "runtime_events" / "types.py",
    ROOT / "goondan" / "state_files" / "eventlog.py",  # the log's header line is its format's
    ROOT / "goondan" / "handoff_events.py",  # tools_base builds handoffs and may not import ipc
}


def spelled(paths: list[Path]) -> list[str]:
    """``path:line: type`` for every string constant equal to an event type in ``paths``."""
    types = {member.value for member in EventType}
    return [
        f"{path.name}:{node.lineno}: {node.value}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and node.value in types
    ]


def test_event_types_are_spelled_only_in_their_homes() -> None:
    paths = [
        path
        for package in (*PACKAGES, "orchestrator")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in HOMES and "templates" not in path.relative_to(ROOT).parts
    ]
    assert len(paths) > 100
    assert spelled(paths) == []


def test_the_check_finds_a_spelled_type(tmp_path: Path) -> None:
    module = tmp_path / "emitter.py"
    module.write_text('record("turn.started", agent)\nrecord(EventType.TURN_COMPLETED, agent)\n')
    assert spelled([module]) == ["emitter.py:1: turn.started"]
