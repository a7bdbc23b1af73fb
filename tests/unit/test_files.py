"""The one atomic write of a file under the state directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.files import write_atomic


@pytest.mark.parametrize("fsync", [True, False])
def test_the_file_is_replaced_whole_and_private(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, b"first", fsync=fsync)
    write_atomic(path, b"second", fsync=fsync)
    assert path.read_bytes() == b"second"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("a directory cannot be replaced by a file")
    with pytest.raises(IsADirectoryError):
        write_atomic(target, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "state.json", b"new")
