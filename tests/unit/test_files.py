"""The one atomic write of a file under the state directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from goondan.files import shift_rotated, write_atomic

SIZE = 4 * 1024 * 1024
"""Big enough that a write takes many system calls, so a kill lands inside one."""

WRITER = """
import sys
from pathlib import Path
from goondan.files import write_atomic

path, size = Path(sys.argv[1]), int(sys.argv[2])
for turn in range(1_000_000):
    data = (b"A" if turn % 2 else b"B") * size
    print(turn, flush=True)  # about to write: the parent kills somewhere from here on
    write_atomic(path, data)
"""


def test_the_file_is_replaced_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, b"first")
    write_atomic(path, b"second")
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


@pytest.mark.parametrize("writes_before_kill", [1, 2, 3])
def test_a_writer_killed_mid_write_leaves_a_whole_file(
    tmp_path: Path, writes_before_kill: int
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(SIZE)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout is not None
        for _ in range(writes_before_kill):
            assert child.stdout.readline(), "the writer died before it was killed"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    data = path.read_bytes()
    assert data in (b"old", b"A" * SIZE, b"B" * SIZE), f"torn: {len(data)} bytes"
    # whatever the kill left behind has a name of its own, never the final one
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "state.json"]
    assert all(name.startswith(".state.json.") and name.endswith(".tmp") for name in leftovers)


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, b"A" * SIZE)
    seen: set[int] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(len(path.read_bytes()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for turn in range(8):
            write_atomic(path, (b"B" if turn % 2 else b"C") * SIZE)
    finally:
        done.set()
        reader.join(timeout=30)
    assert seen == {SIZE}
    assert os.listdir(tmp_path) == ["state.json"]


def test_rotation_shifts_each_file_up_and_drops_the_oldest(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    for name, text in (
        ("events.jsonl", "now"),
        ("events.jsonl.1", "one"),
        ("events.jsonl.2", "two"),
    ):
        (tmp_path / name).write_text(text)
    shift_rotated(log, kept=2)
    assert not log.exists()
    assert (tmp_path / "events.jsonl.1").read_text() == "now"
    assert (tmp_path / "events.jsonl.2").read_text() == "one"
    assert not (tmp_path / "events.jsonl.3").exists()


def test_rotation_with_gaps_moves_what_exists(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text("now")
    shift_rotated(log, kept=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.log.1"]
