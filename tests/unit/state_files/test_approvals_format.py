"""An approval record: written by the agent that parked the call, read back by it at boot and
listed by the daemon, the CLI and the studio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goondan.state_files import ConversationStorageError
from goondan.state_files import approvals as files


def record(state: Path, approval_id: str = "apr_0123456789abcdef") -> files.Approval:
    directory = state / "agents" / "helper" / "instances" / "k1" / files.DIRECTORY
    return files.Approval(
        approval_id=approval_id,
        tool_call_id="call-1",
        tool_name="bash__exec",
        arguments={"command": "ls ü"},
        agent_name="helper",
        instance_key="k1",
        trace_id="t" * 32,
        turn_id="turn-1",
        requested_at="2026-01-01T00:00:00.000Z",
        expires_at_unix=1_767_225_900.0,
        path=directory / f"{approval_id}.json",
    )


def test_a_record_round_trips_and_keeps_its_bytes(tmp_path: Path) -> None:
    approval = record(tmp_path)
    approval.status = "approved"
    approval.decided_by = {"via": "unix", "uid": 1000}
    data = files.write_approval(approval)
    assert approval.path.read_bytes() == data
    assert json.loads(data)["v"] == files.FORMAT_VERSION
    assert data == json.dumps(approval.to_json(), ensure_ascii=False).encode()
    instances = tmp_path / "agents" / "helper" / "instances"
    assert files.read_approvals(instances) == [approval]
    [row] = files.read_rows(tmp_path)
    assert "v" not in row
    assert row == {k: v for k, v in approval.to_json().items() if k != "v"}


def test_rows_are_found_by_id_and_damaged_records_are_skipped(tmp_path: Path) -> None:
    first, second = record(tmp_path), record(tmp_path, "apr_fedcba9876543210")
    files.write_approval(first)
    files.write_approval(second)
    damaged = first.path.with_name("apr_0000000000000000.json")
    damaged.write_text('{"approvalId": "apr_0000000000000000", ')
    assert [r["approvalId"] for r in files.read_rows(tmp_path)] == [
        first.approval_id,
        second.approval_id,
    ]
    assert [r["approvalId"] for r in files.read_rows(tmp_path, second.approval_id)] == [
        second.approval_id
    ]
    instances = tmp_path / "agents" / "helper" / "instances"
    assert [a.approval_id for a in files.read_approvals(instances)] == [
        first.approval_id,
        second.approval_id,
    ]


def test_a_record_of_an_unknown_status_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown status"):
        files.Approval.from_json({**record(tmp_path).to_json(), "status": "maybe"}, tmp_path)


def test_a_failed_write_names_the_file(tmp_path: Path) -> None:
    approval = record(tmp_path)
    approval.path.parent.parent.mkdir(parents=True)
    approval.path.parent.write_text("a file where the directory belongs")
    with pytest.raises(ConversationStorageError, match="apr_0123456789abcdef"):
        files.write_approval(approval)
