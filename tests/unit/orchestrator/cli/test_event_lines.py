"""``logs`` lines: an approval said as the studio says it, and no line longer than the terminal
(or, piped, than :data:`PIPED_LINE_CHARS`) whatever the event holds."""

from __future__ import annotations

from ipc.runtime_events import read_event
from orchestrator.cli.event_lines import PIPED_LINE_CHARS, VALUE_CHARS, event_line
from orchestrator.studio.phrases import event_sentence

STAMP = "2026-11-23T17:58:00.000Z"


def test_an_approval_is_a_sentence_not_its_fields() -> None:
    decided = read_event(
        {
            "type": "approval.decided",
            "timestamp": STAMP,
            "agentName": "worker",
            "instanceKey": "default",
            "traceId": "5f54e149aeb22c42a25b7c35f33acfde",
            "approvalId": "apr_1f2e3d4c5b6a7980",
            "toolName": "bash__exec",
            "status": "approved",
            "args": {"command": "ls"},
            "decidedBy": {"via": "unix", "uid": 1000, "user": "alice", "pid": 4242},
        }
    )
    line = event_line(decided, 200)
    sentence = event_sentence(decided)
    assert sentence is not None
    assert line.endswith(sentence)
    assert line.startswith(f"{STAMP} worker@default")
    assert "approval.decided" in line
    assert "trace=5f54e149" in line
    assert "decidedBy=" not in line
    assert "approvalId=" not in line


def test_long_values_are_cut_and_the_line_fits_its_width() -> None:
    called = read_event(
        {
            "type": "tool.called",
            "timestamp": STAMP,
            "agentName": "worker",
            "toolName": "file-system__write",
            "toolCallId": "call_1",
            "args": {"path": "notes.txt", "content": "x" * 5000 + "\nsecond line"},
        }
    )
    wide = event_line(called, 10_000)
    args = wide.split("args=", 1)[1]
    assert len(args) == VALUE_CHARS
    assert args.endswith("…")
    assert "\n" not in wide
    assert 'toolName="file-system__write"' in wide
    assert len(wide) <= PIPED_LINE_CHARS  # what a pipe gets: cut values, whole line
    narrow = event_line(called, 80)
    assert len(narrow) == 80
    assert narrow.endswith("…")


def test_a_value_cannot_drive_the_terminal() -> None:
    # A rejection's reason is said in the sentence as it was written, not JSON-escaped.
    rejected = read_event(
        {
            "type": "approval.decided",
            "timestamp": STAMP,
            "agentName": "worker",
            "approvalId": "apr_1f2e3d4c5b6a7980",
            "toolName": "bash__exec",
            "status": "rejected",
            "reason": "no\x1b]0;owned\x07\x1b[2J",
            "decidedBy": {"via": "unix", "uid": 1000, "user": "alice", "pid": 4242},
        }
    )
    line = event_line(rejected, 10_000)
    assert "\x1b" not in line
    assert "\x07" not in line
    assert "]0;owned" in line  # the text is still there to read, only harmless
