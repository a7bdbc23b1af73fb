"""The pieces of the root daemon's user namespace: which host ids, which ``/etc`` entries are
masked, and idmapped copies of a directory taken by path or by descriptor."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tools_base.sandbox import _userns

pytestmark = pytest.mark.timeout(30)
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def test_the_subordinate_id_of_root_is_the_first_of_its_range(tmp_path: Path) -> None:
    table = tmp_path / "subuid"
    table.write_text("alice:100000:65536\nroot:200000:65536\n0:300000:10\n")
    assert _userns._subordinate(str(table), ("root", "0")) == 200000
    assert _userns._subordinate(str(table), ("bob",)) is None
    assert _userns._subordinate(str(tmp_path / "missing"), ("root",)) is None


def test_private_etc_lists_what_others_may_not_read(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "ssl" / "private").mkdir(parents=True)
    (etc / "ssl" / "private" / "key.pem").write_text("secret")
    (etc / "ssl" / "private").chmod(0o700)
    (etc / "shadow").write_text("root:x")
    (etc / "shadow").chmod(0o640)
    (etc / "hosts").write_text("127.0.0.1 localhost")
    (etc / "hosts").chmod(0o644)
    (etc / "link").symlink_to("shadow")
    found = _userns.private_etc(str(etc))
    assert found == [str(etc / "shadow"), str(etc / "ssl" / "private")]


def _in_child_with_private_mounts(tree: int, target: str) -> dict[str, object]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            _userns.private_mounts()
            _userns.attach(tree, target)
            info = os.stat(os.path.join(target, "file"))
            seen = {"names": sorted(os.listdir(target)), "uid": info.st_uid}
            os.write(write_end, json.dumps(seen).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = os.read(read_end, 65536)
    os.close(read_end)
    os.waitpid(pid, 0)
    answer: dict[str, object] = json.loads(data)
    return answer


@root_only
def test_an_idmapped_copy_by_descriptor_is_the_directory_opened(tmp_path: Path) -> None:
    pinned = tmp_path / "workspace"
    pinned.mkdir()
    (pinned / "file").write_text("mine")
    opened = os.open(pinned, os.O_PATH | os.O_DIRECTORY)
    # The name moves on and something else takes it: the copy is still of what was opened.
    pinned.rename(tmp_path / "moved")
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "other").write_text("not mine")
    userns = _userns.idmap_userns(65534, 65534)
    try:
        tree = _userns.idmapped_tree(opened, userns)
    finally:
        os.close(userns)
        os.close(opened)
    target = tmp_path / "target"
    target.mkdir()
    try:
        seen = _in_child_with_private_mounts(tree, str(target))
    finally:
        os.close(tree)
    assert seen == {"names": ["file"], "uid": 65534}  # disk id 0 read as the host id
    assert stat.S_ISDIR(os.stat(target).st_mode)
    assert os.listdir(target) == []  # the mount stayed in the child's namespace
