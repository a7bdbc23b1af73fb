"""The runtime event log's files: appended, rotated, read back from an offset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goondan.state_files import eventlog as files


def header() -> bytes:
    return json.dumps({"type": files.HEADER_TYPE, "formatVersion": 1}).encode() + b"\n"


def line(number: int) -> bytes:
    return json.dumps({"type": "turn.started", "n": number}).encode() + b"\n"


def test_lines_append_after_a_heading_and_read_back_from_an_offset(tmp_path: Path) -> None:
    log = files.EventLogFile(tmp_path, header)
    log.append(line(1))
    log.append(line(2))
    log.close()
    path = tmp_path / files.FILE_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    read = list(files.read_lines(path))
    assert [raw for _, raw in read] == [header(), line(1), line(2)]
    assert [raw for _, raw in files.read_lines(path, read[1][0])] == [line(2)]
    # a reopened log goes on after what is there, with no second heading
    files.EventLogFile(tmp_path, header).append(line(3))
    assert [raw for _, raw in files.read_lines(path)][-2:] == [line(2), line(3)]


def test_a_line_still_being_written_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / files.FILE_NAME
    path.write_bytes(line(1) + b'{"type": "turn.fin')
    assert [raw for _, raw in files.read_lines(path)] == [line(1)]
    assert list(files.read_lines(tmp_path / "missing.jsonl")) == []


def test_the_log_rotates_by_size_and_is_listed_oldest_first(tmp_path: Path) -> None:
    log = files.EventLogFile(tmp_path, header, max_bytes=len(header()) + len(line(0)), kept=2)
    for number in range(4):
        log.append(line(number))
    log.close()
    names = [p.name for p in files.log_files(tmp_path)]
    assert names == [f"{files.FILE_NAME}.2", f"{files.FILE_NAME}.1", files.FILE_NAME]
    lines = [raw for path in files.log_files(tmp_path) for _, raw in files.read_lines(path)]
    assert [raw for raw in lines if raw != header()] == [line(1), line(2), line(3)]
    assert all(raw == header() for raw in lines[::2])  # every file has its heading


def test_a_newer_heading_is_refused_by_name(tmp_path: Path) -> None:
    files.check_header(tmp_path / files.FILE_NAME, 1, 1)
    with pytest.raises(files.EventLogTooNew, match="upgrade goondan"):
        files.check_header(tmp_path / files.FILE_NAME, 2, 1)
