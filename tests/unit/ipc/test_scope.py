"""Finding the processes of an agent's scope in ``/proc``."""

from __future__ import annotations

from pathlib import Path

from ipc.scope import SCOPE_ENV, scope_members


def fake_proc(root: Path, environments: dict[int, bytes]) -> Path:
    for pid, environment in environments.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "environ").write_bytes(environment)
    (root / "self").mkdir()  # not a pid: ignored
    return root


def test_only_a_whole_matching_entry_is_a_member(tmp_path: Path) -> None:
    scope = "42-abc"
    proc = fake_proc(
        tmp_path,
        {
            10: f"PATH=/bin\0{SCOPE_ENV}={scope}\0".encode(),
            11: f"{SCOPE_ENV}={scope}\0".encode(),
            12: f"{SCOPE_ENV}={scope}-longer\0".encode(),
            13: f"OTHER={SCOPE_ENV}={scope}\0".encode(),
            14: b"PATH=/bin\0",
        },
    )
    assert sorted(scope_members(scope, proc)) == [10, 11]


def test_skipped_processes_are_not_read(tmp_path: Path) -> None:
    scope = "42-abc"
    proc = fake_proc(tmp_path, {10: f"{SCOPE_ENV}={scope}\0".encode()})
    assert scope_members(scope, proc, skip={10}) == []
    assert scope_members(scope, tmp_path / "missing") == []
