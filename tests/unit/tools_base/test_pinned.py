"""Workdirs pinned by descriptor: paths resolved beneath the descriptor (``openat2``, and the
component walk used without it, each forced in turn), the pin's checks at every use, and
``file-system`` refusing a workdir swapped after it was pinned."""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import DeliveryCode, ToolCode
from tests.support.tool_context import make_ctx
from tools_base import JsonObject, ToolError
from tools_base import _pinned as pinned
from tools_base._pinned import PinnedDir, WorkdirRefused, open_beneath, open_dir_beneath
from tools_base.tools import file_system
from tools_base.tools._sandbox import Workspace

REFUSED = DeliveryCode.E_SPAWN_CWD_REFUSED


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs once with ``openat2`` and once with the walk; the other one is made to
    fail, so a pass proves the one named did the work."""

    def unused(*args: Any) -> int:
        raise AssertionError("the other resolver was used")

    if request.param == "openat2":
        assert pinned.have_openat2(), "this kernel has openat2 (Linux 5.6+)"
        monkeypatch.setattr(pinned, "_walk", unused)
    else:
        monkeypatch.setattr(pinned, "use_openat2", False)
        monkeypatch.setattr(pinned, "_openat2", unused)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root/a/b/f.txt``, an inside link ``root/a/in -> b``, an outside one ``root/a/out``,
    and ``outside/f.txt`` next to ``root``."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("inside")
    (root / "a" / "in").symlink_to("b")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text("outside")
    (root / "a" / "out").symlink_to(tmp_path / "outside")
    return root


def read(dir_fd: int, path: str) -> str:
    fd = open_beneath(dir_fd, path, os.O_RDONLY)
    try:
        return os.read(fd, 100).decode()
    finally:
        os.close(fd)


def errno_of(dir_fd: int, path: str, flags: int = os.O_RDONLY) -> int | None:
    try:
        os.close(open_beneath(dir_fd, path, flags))
    except OSError as exc:
        return exc.errno
    return None


@pytest.fixture
def root_fd(tree: Path) -> Iterator[int]:
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_paths_beneath_open(resolver: str, root_fd: int) -> None:
    assert read(root_fd, "a/b/f.txt") == "inside"
    assert read(root_fd, "./a//b/./f.txt") == "inside"
    assert read(root_fd, "a/b/../b/f.txt") == "inside"  # a `..` that stays beneath
    assert errno_of(root_fd, "a/b", os.O_RDONLY | os.O_DIRECTORY) is None
    assert errno_of(root_fd, "", os.O_RDONLY | os.O_DIRECTORY) is None


def test_climbing_out_and_absolute_paths_are_refused(resolver: str, root_fd: int) -> None:
    assert errno_of(root_fd, "../outside/f.txt") == errno.EXDEV
    assert errno_of(root_fd, "a/../../outside/f.txt") == errno.EXDEV
    assert errno_of(root_fd, "a/b/../../..") == errno.EXDEV
    assert errno_of(root_fd, "/etc/passwd") == errno.EXDEV


def test_a_symlink_anywhere_on_the_way_is_refused(resolver: str, root_fd: int) -> None:
    assert errno_of(root_fd, "a/out/f.txt") == errno.ELOOP  # in the middle, pointing out
    assert errno_of(root_fd, "a/in/f.txt") == errno.ELOOP  # in the middle, pointing inside
    assert errno_of(root_fd, "a/in") == errno.ELOOP  # the last component
    assert errno_of(root_fd, "a/in", os.O_RDONLY | os.O_DIRECTORY) == errno.ELOOP


def test_mkdir_beneath_never_follows_a_symlink(resolver: str, root_fd: int, tree: Path) -> None:
    made = open_dir_beneath(root_fd, ("a", "new", "deeper"), create=True)
    os.close(made)
    assert (tree / "a" / "new" / "deeper").is_dir()
    with pytest.raises(OSError, match=r"symlink|levels") as raised:
        open_dir_beneath(root_fd, ("a", "out", "planted"), create=True)
    assert raised.value.errno == errno.ELOOP
    assert not (tree.parent / "outside" / "planted").exists()


def test_a_directory_swapped_for_a_symlink_between_check_and_use(
    resolver: str, root_fd: int, tree: Path
) -> None:
    """The file-system tool checks the path, then a program swaps a directory on its way."""
    ws = Workspace(tree, allow_outside=False, code="E_OUT", root_fd=root_fd)
    target = ws.resolve("a/b/f.txt")
    assert target.parts == ("a", "b", "f.txt")
    os.rename(tree / "a" / "b", tree / "a" / "b.old")
    (tree / "a" / "b").symlink_to(tree.parent / "outside")
    with pytest.raises(ToolError) as refused:
        ws.open_dir(target.base, target.parent_parts)
    assert refused.value.code == "E_OUT"
    with pytest.raises(ToolError):
        ws.open_dir(target.base, target.parent_parts, create=True)


# --- the pin ------------------------------------------------------------------------------


def test_a_pin_refuses_a_symlink_below_its_root(resolver: str, tree: Path) -> None:
    with pytest.raises(WorkdirRefused) as refused:
        PinnedDir.open(tree / "a" / "out", root=str(tree))
    assert refused.value.code == REFUSED
    with pytest.raises(WorkdirRefused):
        PinnedDir.open(tree / "a" / "in" / "sub", root=str(tree), create=True)
    assert not (tree / "a" / "b" / "sub").exists()
    with pytest.raises(WorkdirRefused):
        PinnedDir.open(tree.parent / "outside", root=str(tree))  # not below the root


def test_a_sibling_spelled_like_the_root_is_not_below_it(tmp_path: Path, tree: Path) -> None:
    sibling = tree.parent / (tree.name + "-twin")
    sibling.mkdir()
    with pytest.raises(WorkdirRefused):
        PinnedDir.open(sibling, root=str(tree))
    with pytest.raises(WorkdirRefused):
        PinnedDir.open(tree / ".." / sibling.name, root=str(tree))
    pin = PinnedDir.open(tree / "a" / ".." / "a" / "b", root=str(tree) + "/")
    assert pin.path == str(tree / "a" / "b")
    pin.close()
    whole = PinnedDir.open(tree, root=str(tree))
    assert whole.path == str(tree)
    whole.close()


def test_the_root_itself_may_be_reached_through_a_symlink(tmp_path: Path, tree: Path) -> None:
    """The root is trusted as configured (a state directory under a linked /var, say)."""
    (tmp_path / "link").symlink_to(tree)
    pin = PinnedDir.open(tmp_path / "link" / "a" / "b", root=str(tmp_path / "link"))
    assert pin.path == str(tree / "a" / "b")
    pin.verify()
    pin.close()


def test_a_pin_is_verified_at_every_use(resolver: str, tree: Path) -> None:
    work = tree / "a" / "b"
    pin = PinnedDir.open(work, root=str(tree))
    pin.verify()
    os.rename(work, tree / "a" / "b.old")
    work.symlink_to(tree.parent / "outside")  # swapped for a symlink
    with pytest.raises(WorkdirRefused, match="symlink"):
        pin.verify()
    work.unlink()
    work.mkdir()  # replaced by another directory
    with pytest.raises(WorkdirRefused, match="another directory"):
        pin.acquire()
    work.rmdir()  # gone
    with pytest.raises(WorkdirRefused, match="gone"):
        pin.verify()
    os.rename(tree / "a" / "b.old", work)  # put back: the same directory again
    fd = pin.acquire()
    pin.close()  # a use in flight keeps its own duplicate
    assert sorted(os.listdir(fd)) == ["f.txt"]
    os.close(fd)
    with pytest.raises(WorkdirRefused, match="released"):
        pin.acquire()


def test_a_parent_swapped_above_the_pin_is_refused(resolver: str, tree: Path) -> None:
    pin = PinnedDir.open(tree / "a" / "b", root=str(tree))
    os.rename(tree / "a", tree / "a.old")
    (tree / "a").symlink_to(tree / "a.old")  # the same directory, through a link
    with pytest.raises(WorkdirRefused):
        pin.verify()
    pin.close()


# --- file-system on a pinned workdir -------------------------------------------------------


def test_file_system_refuses_a_swapped_workdir(resolver: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    work = state / "ws" / "job"
    work.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    pin = PinnedDir.open(work, root=str(state))
    ctx = dataclasses.replace(make_ctx(work), workdir_pin=pin)
    fs = file_system.handlers
    written = fs["write"](ctx, {"path": "notes/a.txt", "content": "mine"})
    assert written == {"path": "notes/a.txt", "size": 4, "written": True, "append": False}
    os.rename(work, state / "ws" / "job.old")
    work.symlink_to(outside)
    calls: list[tuple[str, JsonObject]] = [
        ("read", {"path": "secret.txt"}),
        ("write", {"path": "planted.txt", "content": "x"}),
        ("list", {}),
        ("stat", {"path": "secret.txt"}),
        ("mkdir", {"path": "planted"}),
        ("delete", {"path": "secret.txt"}),
    ]
    for export, args in calls:
        with pytest.raises(ToolError) as refused:
            fs[export](ctx, args)
        assert refused.value.code == REFUSED, (export, refused.value.message)
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    work.unlink()
    os.rename(state / "ws" / "job.old", work)
    out = fs["read"](ctx, {"path": "notes/a.txt"})
    assert isinstance(out, dict)
    assert out["content"] == "mine"
    pin.close()


def test_file_system_keeps_its_rules_beneath_the_descriptor(resolver: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside.txt").write_text("outside")
    (work / "inner").mkdir()
    (work / "inner" / "f.txt").write_text("inner")
    (work / "in-link").symlink_to("inner")
    (work / "out-link").symlink_to(tmp_path)
    os.link(tmp_path / "outside.txt", work / "hard.txt")
    os.mkfifo(work / "fifo")
    pin = PinnedDir.open(work, root=str(work))
    ctx = dataclasses.replace(make_ctx(work), workdir_pin=pin)
    fs = file_system.handlers
    out = fs["read"](ctx, {"path": "in-link/f.txt"})  # a link that stays inside: as before
    assert isinstance(out, dict)
    assert out["content"] == "inner"
    for path, code in (
        ("out-link/outside.txt", ToolCode.E_FS_PATH_OUTSIDE_WORKDIR),
        ("../outside.txt", ToolCode.E_FS_PATH_OUTSIDE_WORKDIR),
        (str(tmp_path / "outside.txt"), ToolCode.E_FS_PATH_OUTSIDE_WORKDIR),
        ("hard.txt", ToolCode.E_FS_PATH_OUTSIDE_WORKDIR),
        ("fifo", ToolCode.E_FS_NOT_A_FILE),
    ):
        with pytest.raises(ToolError) as refused:
            fs["read"](ctx, {"path": path})
        assert refused.value.code == code, path
    pin.close()
