"""file-system: the workdir sandbox (traversal, absolute paths, symlinks), limits, each export."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from tools_base import JsonObject, ToolConfigError, ToolContext, ToolError
from tools_base.tools import file_system
from tools_base.tools._sandbox import Workspace
from tools_base.tools.file_system import configure

H = file_system.handlers


def call(ctx: ToolContext, export: str, **args: Any) -> dict[str, Any]:
    out = H[export](ctx, args)
    assert isinstance(out, dict)
    return out


def refused(ctx: ToolContext, export: str, code: str, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as exc_info:
        H[export](ctx, args)
    assert exc_info.value.code == code, exc_info.value.message
    return exc_info.value


# --- write / read -------------------------------------------------------------------------


def test_write_then_read(ctx: ToolContext, workdir: Path) -> None:
    out = call(ctx, "write", path="notes/today.txt", content="héllo\n")
    assert out == {"path": "notes/today.txt", "size": 7, "written": True, "append": False}
    assert (workdir / "notes" / "today.txt").read_text() == "héllo\n"
    read = call(ctx, "read", path="notes/today.txt")
    assert read == {"path": "notes/today.txt", "size": 7, "truncated": False, "content": "héllo\n"}


def test_write_overwrites_and_appends(ctx: ToolContext, workdir: Path) -> None:
    call(ctx, "write", path="a.txt", content="first version")
    call(ctx, "write", path="a.txt", content="second")
    out = call(ctx, "write", path="a.txt", content="+more", append=True)
    assert out["append"] is True
    assert out["size"] == len("second+more")
    assert (workdir / "a.txt").read_text() == "second+more"


def test_read_max_bytes_truncates(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("0123456789")
    out = call(ctx, "read", path="f.txt", maxBytes=4)
    assert out == {"path": "f.txt", "size": 10, "truncated": True, "content": "0123"}
    assert call(ctx, "read", path="f.txt", maxBytes=10)["truncated"] is False


def test_read_reads_only_max_bytes(
    ctx: ToolContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (workdir / "big.bin").open("wb") as f:
        f.truncate(50 * 1024 * 1024)
    real_read = os.read
    requested: list[int] = []

    def spy(fd: int, n: int) -> bytes:
        requested.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", spy)
    out = call(ctx, "read", path="big.bin", maxBytes=1000)
    assert out["size"] == 50 * 1024 * 1024
    assert out["truncated"] is True
    assert sum(requested) <= 1001


def test_read_default_max_bytes_is_100000(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("x" * 100_001)
    out = call(ctx, "read", path="f.txt")
    assert len(out["content"]) == 100_000
    assert out["truncated"] is True


def test_read_drops_a_character_cut_by_the_limit(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("hé")  # é is two bytes
    assert call(ctx, "read", path="f.txt", maxBytes=2)["content"] == "h"


def test_read_replaces_invalid_utf8(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.bin").write_bytes(b"ok\xff")
    assert call(ctx, "read", path="f.bin")["content"] == "ok\ufffd"


@pytest.mark.parametrize("max_bytes", [0, -5, 0.5])
def test_read_rejects_a_non_positive_max_bytes(ctx: ToolContext, max_bytes: float) -> None:
    refused(ctx, "read", "E_TOOL_INVALID_ARGS", path="x", maxBytes=max_bytes)


def test_read_missing_file(ctx: ToolContext) -> None:
    error = refused(ctx, "read", "E_FS_NOT_FOUND", path="missing.txt")
    assert "missing.txt" in error.message


def test_read_a_directory(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "d").mkdir()
    refused(ctx, "read", "E_FS_IS_A_DIRECTORY", path="d")
    refused(ctx, "read", "E_FS_IS_A_DIRECTORY", path=".")


def test_read_and_write_a_fifo_do_not_hang(ctx: ToolContext, workdir: Path) -> None:
    os.mkfifo(workdir / "pipe")
    refused(ctx, "read", "E_FS_NOT_A_FILE", path="pipe")
    refused(ctx, "write", "E_FS_NOT_A_FILE", path="pipe", content="x")


def test_write_to_a_fifo_with_a_reader_is_refused_unwritten(
    ctx: ToolContext, workdir: Path
) -> None:
    os.mkfifo(workdir / "pipe")
    reader = os.open(workdir / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        refused(ctx, "write", "E_FS_NOT_A_FILE", path="pipe", content="x")
        refused(ctx, "write", "E_FS_NOT_A_FILE", path="pipe", content="x", append=True)
        assert os.read(reader, 1) == b""  # nothing reached the pipe, and no writer holds it
    finally:
        os.close(reader)


def test_sockets_and_devices_are_not_files(
    ctx: ToolContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)  # a relative name: the socket path limit is 108 bytes
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("sock")
        server.listen()
        refused(ctx, "read", "E_FS_NOT_A_FILE", path="sock")
        refused(ctx, "write", "E_FS_NOT_A_FILE", path="sock", content="x")
    try:
        os.mknod(workdir / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return  # no CAP_MKNOD here: the socket stands for every special file
    refused(ctx, "read", "E_FS_NOT_A_FILE", path="null")
    refused(ctx, "write", "E_FS_NOT_A_FILE", path="null", content="x")


@pytest.mark.parametrize("second_name_inside", [False, True])
def test_a_hard_link_is_refused_for_read_write_and_append(
    ctx: ToolContext, workdir: Path, outside: Path, second_name_inside: bool
) -> None:
    # What a program in the workspace can plant: a second name for another file's data.
    target = workdir / "mine.txt" if second_name_inside else outside / "secret.txt"
    if second_name_inside:
        target.write_text("top secret")
    os.link(target, workdir / "linked.txt")
    error = refused(ctx, "read", "E_FS_PATH_OUTSIDE_WORKDIR", path="linked.txt")
    assert "2 hard links" in error.message
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="linked.txt", content="pwned")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="linked.txt", content="x", append=True)
    assert target.read_text() == "top secret"  # not truncated, not appended to
    # the way out: deleting the name removes only the link
    call(ctx, "delete", path="linked.txt")
    call(ctx, "write", path="linked.txt", content="fresh")
    assert target.read_text() == "top secret"


def test_allow_outside_workdir_allows_hard_links(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workdir / "linked.txt")
    handlers = configure({"allowOutsideWorkdir": True})
    out = handlers["read"](ctx, {"path": "linked.txt"})
    assert isinstance(out, dict)
    assert out["content"] == "top secret"


def test_an_opened_file_is_blocking_again_and_never_truncated_unchecked(workdir: Path) -> None:
    (workdir / "f.txt").write_text("x")
    ws = Workspace(workdir, allow_outside=False, code="E_FS_PATH_OUTSIDE_WORKDIR")
    target = ws.resolve("f.txt")
    parent = ws.open_dir(target.base, target.parent_parts)
    try:
        fd, info = ws.open_file(parent, target, os.O_RDONLY)
        try:
            assert os.get_blocking(fd)
            assert info.st_nlink == 1
        finally:
            os.close(fd)
        with pytest.raises(ValueError, match="O_TRUNC"):
            ws.open_file(parent, target, os.O_WRONLY | os.O_TRUNC)
    finally:
        os.close(parent)
    assert (workdir / "f.txt").read_text() == "x"


def test_write_size_limit(ctx: ToolContext, workdir: Path) -> None:
    handler = configure({"maxWriteBytes": 4})["write"]
    with pytest.raises(ToolError) as exc_info:
        handler(ctx, {"path": "f.txt", "content": "héllo"})
    assert exc_info.value.code == "E_FS_WRITE_TOO_LARGE"
    assert not (workdir / "f.txt").exists()
    assert handler(ctx, {"path": "f.txt", "content": "hé"}) is not None


def test_write_requires_content(ctx: ToolContext) -> None:
    refused(ctx, "write", "E_TOOL_INVALID_ARGS", path="f.txt", content="")
    refused(ctx, "write", "E_TOOL_INVALID_ARGS", path="", content="x")


def test_write_onto_a_directory(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "d").mkdir()
    refused(ctx, "write", "E_FS_IS_A_DIRECTORY", path="d", content="x")


# --- the sandbox --------------------------------------------------------------------------

ESCAPES = ["../outside/secret.txt", "sub/../../outside/secret.txt", "..", "../outside"]
EXPORT_ARGS: list[tuple[str, JsonObject]] = [
    ("read", {}),
    ("write", {"content": "pwned"}),
    ("list", {}),
    ("mkdir", {}),
    ("delete", {"recursive": True}),
    ("stat", {}),
]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize(("export", "extra"), EXPORT_ARGS)
def test_dot_dot_escapes_are_refused(
    ctx: ToolContext, outside: Path, path: str, export: str, extra: JsonObject
) -> None:
    error = refused(ctx, export, "E_FS_PATH_OUTSIDE_WORKDIR", path=path, **extra)
    assert error.suggestion
    assert "allowOutsideWorkdir" in error.suggestion
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.parametrize(("export", "extra"), EXPORT_ARGS)
def test_absolute_paths_outside_are_refused(
    ctx: ToolContext, outside: Path, export: str, extra: JsonObject
) -> None:
    refused(ctx, export, "E_FS_PATH_OUTSIDE_WORKDIR", path=str(outside / "secret.txt"), **extra)
    refused(ctx, export, "E_FS_PATH_OUTSIDE_WORKDIR", path="/etc/passwd", **extra)
    assert (outside / "secret.txt").read_text() == "top secret"


def test_absolute_path_inside_the_workdir_is_fine(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("inside")
    out = call(ctx, "read", path=str(workdir / "f.txt"))
    assert out["content"] == "inside"
    assert out["path"] == "f.txt"


def test_dot_dot_that_stays_inside_is_fine(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a").mkdir()
    (workdir / "f.txt").write_text("ok")
    assert call(ctx, "read", path="a/../f.txt")["content"] == "ok"


def test_symlink_to_a_file_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "link.txt").symlink_to(outside / "secret.txt")
    refused(ctx, "read", "E_FS_PATH_OUTSIDE_WORKDIR", path="link.txt")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="link.txt", content="pwned")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="link.txt", content="x", append=True)
    assert (outside / "secret.txt").read_text() == "top secret"


def test_dangling_symlink_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "dangling").symlink_to(outside / "new.txt")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="dangling", content="pwned")
    assert not (outside / "new.txt").exists()


def test_symlinked_parent_directory_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "linkdir").symlink_to(outside, target_is_directory=True)
    refused(ctx, "read", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir/secret.txt")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir/new.txt", content="x")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir/deep/new.txt", content="x")
    refused(ctx, "list", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir")
    refused(ctx, "mkdir", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir/sub")
    refused(ctx, "delete", "E_FS_PATH_OUTSIDE_WORKDIR", path="linkdir/secret.txt")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"


def test_symlink_that_stays_inside_is_followed(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "real").mkdir()
    (workdir / "real" / "f.txt").write_text("data")
    (workdir / "alias").symlink_to(workdir / "real", target_is_directory=True)
    out = call(ctx, "read", path="alias/f.txt")
    assert out["content"] == "data"
    assert out["path"] == "real/f.txt"


def test_a_directory_swapped_for_a_symlink_after_the_check_is_refused(
    workdir: Path, outside: Path
) -> None:
    (workdir / "d").mkdir()
    ws = Workspace(workdir, allow_outside=False, code="E_FS_PATH_OUTSIDE_WORKDIR")
    target = ws.resolve("d/new.txt")
    (workdir / "d").rmdir()
    (workdir / "d").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError) as exc_info:
        ws.open_dir(target.base, target.parent_parts)
    assert exc_info.value.code == "E_FS_PATH_OUTSIDE_WORKDIR"


def test_allow_outside_workdir(ctx: ToolContext, outside: Path) -> None:
    handlers = configure({"allowOutsideWorkdir": True})
    out = handlers["read"](ctx, {"path": "../outside/secret.txt"})
    assert isinstance(out, dict)
    assert out["content"] == "top secret"
    assert out["path"] == os.path.realpath(outside / "secret.txt")
    handlers["write"](ctx, {"path": str(outside / "new.txt"), "content": "allowed"})
    assert (outside / "new.txt").read_text() == "allowed"


# --- list -----------------------------------------------------------------------------------


@pytest.fixture
def tree(workdir: Path, outside: Path) -> Path:
    (workdir / "b.txt").write_text("bb")
    (workdir / "a").mkdir()
    (workdir / "a" / "z.txt").write_text("z")
    (workdir / "a" / "inner").mkdir()
    (workdir / "a.txt").write_text("a")
    (workdir / "link").symlink_to(outside, target_is_directory=True)
    (workdir / "flink.txt").symlink_to(workdir / "b.txt")
    os.mkfifo(workdir / "fifo")
    return workdir


def test_list_is_sorted_and_skips_symlinks(ctx: ToolContext, tree: Path) -> None:
    out = call(ctx, "list")
    assert out["path"] == "."
    assert out["recursive"] is False
    assert out["truncated"] is False
    assert out["entries"] == [
        {"name": "a", "path": "a", "type": "dir"},
        {"name": "a.txt", "path": "a.txt", "type": "file", "size": 1},
        {"name": "b.txt", "path": "b.txt", "type": "file", "size": 2},
    ]
    assert out["count"] == 3


def test_list_recursive_and_filters(ctx: ToolContext, tree: Path) -> None:
    paths = [e["path"] for e in call(ctx, "list", recursive=True)["entries"]]
    assert paths == ["a", "a.txt", "a/inner", "a/z.txt", "b.txt"]
    files = call(ctx, "list", recursive=True, includeDirs=False)["entries"]
    assert [e["path"] for e in files] == ["a.txt", "a/z.txt", "b.txt"]
    dirs = call(ctx, "list", recursive=True, includeFiles=False)["entries"]
    assert [e["path"] for e in dirs] == ["a", "a/inner"]


def test_list_a_subdirectory(ctx: ToolContext, tree: Path) -> None:
    out = call(ctx, "list", path="a")
    assert out["path"] == "a"
    assert [e["path"] for e in out["entries"]] == ["a/inner", "a/z.txt"]


def test_list_entry_limit(ctx: ToolContext, tree: Path) -> None:
    out = configure({"maxListEntries": 2})["list"](ctx, {"recursive": True})
    assert isinstance(out, dict)
    assert out["count"] == 2
    assert out["truncated"] is True


def test_list_errors(ctx: ToolContext, tree: Path) -> None:
    refused(ctx, "list", "E_FS_NOT_FOUND", path="missing")
    refused(ctx, "list", "E_FS_NOT_A_DIRECTORY", path="b.txt")


# --- mkdir ----------------------------------------------------------------------------------


def test_mkdir(ctx: ToolContext, workdir: Path) -> None:
    assert call(ctx, "mkdir", path="x/y/z") == {"path": "x/y/z", "created": True, "recursive": True}
    assert (workdir / "x" / "y" / "z").is_dir()
    assert call(ctx, "mkdir", path="x/y/z")["created"] is False
    assert call(ctx, "mkdir", path="solo", recursive=False)["created"] is True


def test_mkdir_errors(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "file").write_text("x")
    (workdir / "d").mkdir()
    refused(ctx, "mkdir", "E_FS_ALREADY_EXISTS", path="file")
    refused(ctx, "mkdir", "E_FS_ALREADY_EXISTS", path="d", recursive=False)
    refused(ctx, "mkdir", "E_FS_NOT_FOUND", path="no/parent", recursive=False)
    refused(ctx, "mkdir", "E_FS_NOT_A_DIRECTORY", path="file/sub")


# --- delete ---------------------------------------------------------------------------------


def test_delete_file_and_directories(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("x")
    (workdir / "empty").mkdir()
    (workdir / "full" / "deep").mkdir(parents=True)
    (workdir / "full" / "deep" / "g.txt").write_text("x")
    assert call(ctx, "delete", path="f.txt") == {"path": "f.txt", "deleted": True, "type": "file"}
    assert call(ctx, "delete", path="empty")["type"] == "dir"
    refused(ctx, "delete", "E_FS_NOT_EMPTY", path="full")
    assert call(ctx, "delete", path="full", recursive=True)["deleted"] is True
    assert sorted(p.name for p in workdir.iterdir()) == []


def test_delete_removes_a_symlink_not_its_target(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "link").symlink_to(outside, target_is_directory=True)
    assert call(ctx, "delete", path="link", recursive=True)["type"] == "symlink"
    assert not (workdir / "link").exists()
    assert (outside / "secret.txt").read_text() == "top secret"


def test_delete_refuses_the_workdir_and_reports_missing(ctx: ToolContext, workdir: Path) -> None:
    refused(ctx, "delete", "E_FS_REFUSED", path=".", recursive=True)
    refused(ctx, "delete", "E_FS_REFUSED", path=str(workdir), recursive=True)
    refused(ctx, "delete", "E_FS_NOT_FOUND", path="missing")
    assert workdir.is_dir()


# --- stat -----------------------------------------------------------------------------------


def test_stat(ctx: ToolContext, workdir: Path, outside: Path) -> None:
    (workdir / "f.txt").write_text("hello")
    (workdir / "f.txt").chmod(0o640)
    (workdir / "link").symlink_to(outside / "secret.txt")
    out = call(ctx, "stat", path="f.txt")
    assert out["exists"] is True
    assert out["type"] == "file"
    assert out["size"] == 5
    assert out["mode"] == "0640"
    assert str(out["modifiedAt"]).endswith("+00:00")
    assert call(ctx, "stat", path=".")["type"] == "dir"
    link = call(ctx, "stat", path="link")
    assert link["type"] == "symlink"
    assert link["linkTarget"] == str(outside / "secret.txt")
    assert call(ctx, "stat", path="missing") == {"path": "missing", "exists": False}


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"allowOutsideWorkDir": True},
        {"allowOutsideWorkdir": 1},
        {"maxWriteBytes": 0},
        {"maxReadBytes": True},
        {"maxListEntries": "10"},
    ],
)
def test_bad_config_is_rejected(config: dict[str, Any]) -> None:
    with pytest.raises(ToolConfigError):
        configure(config)


def test_max_read_bytes_caps_max_bytes(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("0123456789")
    out = configure({"maxReadBytes": 3})["read"](ctx, {"path": "f.txt", "maxBytes": 100})
    assert isinstance(out, dict)
    assert out["content"] == "012"
    assert out["truncated"] is True


def test_a_file_swapped_for_a_symlink_after_the_check_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / "f.txt").write_text("mine")
    stale = Workspace(workdir, allow_outside=False, code="E_FS_PATH_OUTSIDE_WORKDIR").resolve(
        "f.txt"
    )
    (workdir / "f.txt").unlink()
    (workdir / "f.txt").symlink_to(outside / "secret.txt")
    monkeypatch.setattr(Workspace, "resolve", lambda self, path, follow_final=True: stale)
    refused(ctx, "read", "E_FS_PATH_OUTSIDE_WORKDIR", path="f.txt")
    refused(ctx, "write", "E_FS_PATH_OUTSIDE_WORKDIR", path="f.txt", content="pwned")
    assert (outside / "secret.txt").read_text() == "top secret"
