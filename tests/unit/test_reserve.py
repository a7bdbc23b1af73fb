"""The state directory's reserve, on a real full disk: a tmpfs mounted for the test (root only,
as CI runs), never the machine's own disk."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from goondan import reserve
from goondan.files import write_atomic
from goondan.state_files import ConversationStorageError
from goondan.state_files.conversation import append_whole

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root")
_MIB = 1024 * 1024


@pytest.fixture
def disk() -> Iterator[Path]:
    point = Path(tempfile.mkdtemp(prefix="goondan-reserve-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
        with contextlib.suppress(OSError):
            point.rmdir()


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as out:
        for size in (_MIB, 4096, 1):
            with contextlib.suppress(OSError):
                while out.write(bytes(size)):
                    pass
    assert os.statvfs(path.parent).f_bavail == 0


def test_a_full_disk_still_takes_state_writes(disk: Path) -> None:
    state = disk / ".goondan"
    events = state / "agents/a/instances/default/conversation/events.jsonl"
    events.parent.mkdir(parents=True)
    assert reserve.make(state, 8)
    assert (state / reserve.RESERVE_NAME).stat().st_size == 8 * _MIB
    fill(disk / "filler")
    with pytest.raises(OSError, match="No space left") as full:
        (disk / "other").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    # Each write that runs out gives back a part of the reserve and goes through.
    append_whole(events, b'{"kind": "message"}\n' * 100)
    write_atomic(state / "agents/a/metadata.json", b"{}" * 1000)
    assert (state / reserve.RESERVE_NAME).stat().st_size == 8 * _MIB - reserve.RELEASE_MIB * _MIB
    assert events.read_bytes().count(b"\n") == 100
    # Taken again by the filler, the rest of the reserve is given back too.
    fill(disk / "filler-2")
    append_whole(events, b'{"kind": "message"}\n' * 500)
    assert not (state / reserve.RESERVE_NAME).exists()
    # With the reserve gone, a full disk is an error again, and nothing torn is left.
    fill(disk / "filler-3")
    with pytest.raises(ConversationStorageError):
        append_whole(events, b'{"kind": "message"}\n' * 1000)
    assert events.read_bytes().count(b"\n") == 600


def test_the_reserve_is_made_only_with_room_twice_over(disk: Path) -> None:
    state = disk / "state"
    state.mkdir()
    assert not reserve.make(state, 20)  # 32 MiB holds no 20 MiB reserve twice over
    assert not (state / reserve.RESERVE_NAME).exists()
    assert reserve.make(state, 8)
    assert reserve.make(state, 8)  # already held
    assert reserve.reserve_mib({"GOONDAN_STATE_RESERVE_MIB": "0"}) == 0
    assert reserve.reserve_mib({}) == reserve.DEFAULT_RESERVE_MIB
