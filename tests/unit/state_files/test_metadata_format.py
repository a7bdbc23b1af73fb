"""An instance's ``metadata.json``: written by the agent, listed by the daemon and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goondan.defaults import INSTANCE_METADATA_FORMAT
from goondan.state_files import ConversationStorageError, ConversationUnreadable
from goondan.state_files import metadata as files


def instance(state: Path, agent: str, name: str) -> Path:
    directory = state / "agents" / agent / "instances" / name
    directory.mkdir(parents=True)
    return directory


def test_written_metadata_reads_back_and_is_listed(tmp_path: Path) -> None:
    directory = instance(tmp_path, "helper", "k1")
    metadata = {
        "formatVersion": INSTANCE_METADATA_FORMAT,
        "agentName": "helper",
        "instanceKey": "k1",
        "status": "idle",
        "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7, "cost": 0.5, "calls": 1},
    }
    data = files.write_metadata(directory, metadata)
    assert (directory / files.FILE_NAME).read_bytes() == data
    assert data == json.dumps(metadata, indent=2).encode()  # the bytes existing files hold
    assert files.read_metadata(directory) == metadata
    other = instance(tmp_path, "writer", "k2")
    files.write_metadata(other, {**metadata, "agentName": "writer", "instanceKey": "k2"})
    rows = files.list_instances(tmp_path)
    assert [(r["agentName"], r["directory"]) for r in rows] == [
        ("helper", str(directory)),
        ("writer", str(other)),
    ]
    assert [r["instanceKey"] for r in files.list_instances(tmp_path, "writer")] == ["k2"]


def test_missing_or_damaged_metadata_is_empty_and_left_out(tmp_path: Path) -> None:
    assert files.read_metadata(instance(tmp_path, "a", "missing")) == {}
    damaged = instance(tmp_path, "a", "damaged")
    (damaged / files.FILE_NAME).write_text('{"agentName": "a", "instanceKey": ')
    assert files.read_metadata(damaged) == {}
    assert files.list_instances(tmp_path) == []


def test_a_newer_format_is_refused_and_named_in_the_listing(tmp_path: Path) -> None:
    directory = instance(tmp_path, "helper", "k1")
    newer = {"formatVersion": INSTANCE_METADATA_FORMAT + 1, "agentName": "helper"}
    (directory / files.FILE_NAME).write_text(json.dumps(newer))
    with pytest.raises(ConversationUnreadable, match="upgrade goondan"):
        files.read_metadata(directory)
    [row] = files.list_instances(tmp_path)
    assert row["agentName"] == "helper"
    assert row["instanceKey"] is None
    assert "upgrade goondan" in row["error"]


def test_a_failed_write_names_the_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    directory = instance(tmp_path, "helper", "k1")
    files.write_metadata(directory, {"instanceKey": "k1"})
    with pytest.raises(ConversationStorageError, match=r"metadata\.json"):
        files.write_metadata(directory / "missing", {"instanceKey": "k1"})
    assert files.read_metadata(directory) == {"instanceKey": "k1"}
