"""``file-system``: read, write, list, create and delete files in the instance workdir.

Paths are relative to ``ctx.workdir``. A path that resolves outside it (``../x``,
``/etc/passwd``, a symlink pointing out, a file under a symlinked directory pointing out) is
refused with ``E_FS_PATH_OUTSIDE_WORKDIR``; an absolute path or symlink that stays inside is
accepted. ``read`` and ``write`` judge the file by its opened descriptor: a file with more than
one hard link is refused with ``E_FS_PATH_OUTSIDE_WORKDIR`` too (its data may be another
name's, outside the workdir), and a FIFO, socket or device with ``E_FS_NOT_A_FILE``; nothing
is truncated before those checks. Output ``path`` fields are workdir-relative (``.`` is the
workdir itself), or absolute for a path outside it when the config allows that. Upstream
returned absolute host paths; relative ones can be passed straight back to the next call.

Exports (required parameters in **bold**):

``read``: **path**, ``maxBytes`` (default 100000, ≥ 1, capped by config ``maxReadBytes``).
    Reads at most that many bytes (never the whole file) and decodes them as UTF-8, replacing
    invalid bytes; a multi-byte character cut by the limit is dropped.
    → ``{path, size, truncated, content}``; ``size`` is the file's size in bytes.
``write``: **path**, **content** (non-empty string), ``append`` (default false).
    Creates missing parent directories. Content over config ``maxWriteBytes`` (UTF-8 bytes)
    is refused. → ``{path, size, written: true, append}``; ``size`` is the file size after.
``list``: ``path`` (default ``.``), ``recursive`` (false), ``includeDirs`` (true),
    ``includeFiles`` (true). Symlinks and special files are skipped, entries are sorted by
    path, at most config ``maxListEntries`` are returned, and recursion stops 100 levels down.
    → ``{path, recursive, count, truncated, entries: [{name, path, type: "file"|"dir",
    size (files only)}]}``.
``mkdir``: **path**, ``recursive`` (default true: create parents, an existing directory is
    fine). → ``{path, created, recursive}``; ``created`` is false when it already existed.
``delete``: **path**, ``recursive`` (default false; needed for a non-empty directory). A
    symlink is removed itself, never its target; the workdir itself cannot be deleted.
    → ``{path, deleted: true, type: "file"|"dir"|"symlink"|"other"}``.
``stat``: **path**. Does not follow a final symlink. → ``{path, exists: false}`` or
    ``{path, exists: true, type, size, modifiedAt (ISO 8601 UTC), mode ("0644"),
    linkTarget (symlinks only)}``.

Config (``configure``):

``allowOutsideWorkdir`` (bool, default false) accept paths outside the workdir, and files
    with more than one hard link.
``maxReadBytes`` (int, default 10485760) upper bound for ``read``'s ``maxBytes``.
``maxWriteBytes`` (int, default 10485760) largest ``write`` content in bytes.
``maxListEntries`` (int, default 10000) entries ``list`` returns before ``truncated``.
``diskMiB`` (int or null, default 1024) the workspace's disk quota: a ``write`` or ``mkdir``
    that would take the workspace past it, or leave its disk with less than 64 MiB free, is
    refused with ``E_WORKSPACE_QUOTA`` (``delete`` never is); ``null`` lifts the quota.

The workdir itself is the directory the instance was given, opened once: each call works
beneath that descriptor (no symlink followed on the way) after checking that the workdir's path
still names it; a workdir since replaced (by a symlink, another directory) or moved is refused
with ``E_SPAWN_CWD_REFUSED``.

Error codes: ``E_FS_PATH_OUTSIDE_WORKDIR`` (also a hard-linked file), ``E_FS_NOT_FOUND``, ``E_FS_NOT_A_DIRECTORY``,
``E_FS_IS_A_DIRECTORY``, ``E_FS_NOT_A_FILE`` (FIFO, device, socket), ``E_FS_ALREADY_EXISTS``,
``E_FS_NOT_EMPTY``, ``E_FS_PERMISSION_DENIED``, ``E_FS_WRITE_TOO_LARGE``, ``E_FS_REFUSED``
(deleting the workdir), ``E_FS_IO`` (any other OS error), ``E_WORKSPACE_QUOTA`` (the disk
quota), ``E_TOOL_INVALID_ARGS``, ``E_SPAWN_CWD_REFUSED`` (the workdir was swapped).

Handlers are synchronous: the executor runs them in a worker thread.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import os
import shutil
import stat as stat_mod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.sandbox._quota import DEFAULT_DISK_MIB, check_write, parse_disk_mib
from tools_base.tools._common import (
    ConfigReader,
    invalid_arg,
    optional_bool,
    optional_string,
    positive_int,
    require_string,
)
from tools_base.tools._sandbox import Target, Workspace, pinned_workspace

OUTSIDE_WORKDIR = ToolCode.E_FS_PATH_OUTSIDE_WORKDIR
DEFAULT_READ_BYTES = 100_000
MAX_LIST_DEPTH = 100
_MIB = 1024 * 1024
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY_BYTES = 4096
"""What a new directory is counted as against the disk quota."""

_ERRNO_CODES = {
    errno.ENOENT: (
        ToolCode.E_FS_NOT_FOUND,
        "no such file or directory",
        "Check the path with list.",
    ),
    errno.ENOTDIR: (ToolCode.E_FS_NOT_A_DIRECTORY, "not a directory", None),
    errno.EISDIR: (ToolCode.E_FS_IS_A_DIRECTORY, "is a directory", "Use list for directories."),
    errno.EEXIST: (ToolCode.E_FS_ALREADY_EXISTS, "already exists", None),
    errno.ENOTEMPTY: (
        ToolCode.E_FS_NOT_EMPTY,
        "directory is not empty",
        "Pass recursive: true to delete it with its contents.",
    ),
    errno.EACCES: (ToolCode.E_FS_PERMISSION_DENIED, "permission denied", None),
    errno.EPERM: (ToolCode.E_FS_PERMISSION_DENIED, "operation not permitted", None),
    errno.ENXIO: (ToolCode.E_FS_NOT_A_FILE, "not a regular file", None),
    errno.ELOOP: (
        OUTSIDE_WORKDIR,
        "a symlink appeared in the path while it was in use",
        "Retry; do not swap files for symlinks meanwhile.",
    ),
}


@contextlib.contextmanager
def _os_errors(display: str) -> Iterator[None]:
    """Turn an ``OSError`` into a ToolError naming the path the model gave."""
    try:
        yield
    except OSError as exc:
        code, what, suggestion = _ERRNO_CODES.get(
            exc.errno or 0, (ToolCode.E_FS_IO, exc.strerror or str(exc), None)
        )
        raise ToolError(f"{what}: {display!r}", code=code, suggestion=suggestion) from exc


def _child(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent.rstrip('/')}/{name}"


def _kind(mode: int) -> str:
    if stat_mod.S_ISREG(mode):
        return "file"
    if stat_mod.S_ISDIR(mode):
        return "dir"
    if stat_mod.S_ISLNK(mode):
        return "symlink"
    return "other"


@dataclass(frozen=True, slots=True)
class FileSystemConfig:
    """Parsed Tool config."""

    allow_outside_workdir: bool = False
    max_read_bytes: int = 10 * _MIB
    max_write_bytes: int = 10 * _MIB
    max_list_entries: int = 10_000
    disk_mib: int | None = DEFAULT_DISK_MIB
    """The workspace's disk quota; ``None``: none."""


class FileSystemTool:
    """The handlers, bound to one config."""

    def __init__(self, config: FileSystemConfig) -> None:
        self.config = config

    def _bind(self, export: Callable[[Workspace, JsonObject], JsonValue]) -> ToolHandler:
        """The handler of ``export``: it works beneath the workdir's descriptor, checked to be
        the instance's own directory first (``E_SPAWN_CWD_REFUSED`` otherwise)."""

        @functools.wraps(export)
        def handler(ctx: ToolContext, input: JsonObject) -> JsonValue:
            allow = self.config.allow_outside_workdir
            with contextlib.ExitStack() as stack:
                with _os_errors("."):
                    ws = stack.enter_context(
                        pinned_workspace(ctx, allow_outside=allow, code=OUTSIDE_WORKDIR)
                    )
                return export(ws, input)

        return handler

    @contextlib.contextmanager
    def _in_parent(self, ws: Workspace, target: Target, *, create: bool = False) -> Iterator[int]:
        """The open directory that holds ``target``, closed after the block; an OS error in
        the block is reported naming ``target``."""
        with _os_errors(target.display):
            parent_fd = ws.open_dir(target.base, target.parent_parts, create=create)
        try:
            with _os_errors(target.display):
                yield parent_fd
        finally:
            os.close(parent_fd)

    def read(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``read``: the first ``maxBytes`` bytes of a file."""
        path = require_string(input, "path")
        max_bytes = min(
            positive_int(input, "maxBytes", DEFAULT_READ_BYTES), self.config.max_read_bytes
        )
        target = ws.resolve(path)
        if not target.parts:
            raise ToolError(
                f"is a directory: {path!r}",
                code=ToolCode.E_FS_IS_A_DIRECTORY,
                suggestion="Use list for directories.",
            )
        with self._in_parent(ws, target) as parent_fd:
            fd, info = ws.open_file(parent_fd, target, os.O_RDONLY)
        with _os_errors(target.display):
            try:
                chunks: list[bytes] = []
                wanted = max_bytes + 1
                while wanted > 0:
                    chunk = os.read(fd, min(wanted, _MIB))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    wanted -= len(chunk)
            finally:
                os.close(fd)
        data = b"".join(chunks)
        truncated = len(data) > max_bytes
        data = data[:max_bytes]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return {
            "path": target.display,
            "size": max(info.st_size, len(data)),
            "truncated": truncated,
            "content": decoder.decode(data, final=not truncated),
        }

    def write(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``write``: create or overwrite (or append to) a file."""
        path = require_string(input, "path")
        content = require_string(input, "content")
        append = optional_bool(input, "append", False)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise invalid_arg(f"'content' is not valid Unicode text: {exc.reason}") from exc
        if len(data) > self.config.max_write_bytes:
            raise ToolError(
                f"content is {len(data)} bytes; the limit is {self.config.max_write_bytes}",
                code=ToolCode.E_FS_WRITE_TOO_LARGE,
                suggestion="Write the file in smaller parts with append: true.",
            )
        target = ws.resolve(path)
        if not target.parts:
            raise ToolError(f"is a directory: {path!r}", code=ToolCode.E_FS_IS_A_DIRECTORY)
        check_write(ws.root, len(data), self.config.disk_mib)
        # No O_TRUNC: an existing file is truncated only once its descriptor passed the checks.
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
        with self._in_parent(ws, target, create=True) as parent_fd:
            fd, _ = ws.open_file(parent_fd, target, flags)
        with _os_errors(target.display):
            try:
                if not append:
                    os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
        return {"path": target.display, "size": size, "written": True, "append": append}

    def list(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``list``: directory entries, optionally recursive."""
        path = optional_string(input, "path") or "."
        recursive = optional_bool(input, "recursive", False)
        include_dirs = optional_bool(input, "includeDirs", True)
        include_files = optional_bool(input, "includeFiles", True)
        target = ws.resolve(path)
        limit = self.config.max_list_entries
        entries: list[tuple[str, JsonValue]] = []
        truncated = False

        def visit(dir_fd: int, prefix: str, depth: int) -> None:
            nonlocal truncated
            with os.scandir(dir_fd) as scan:
                children = sorted(scan, key=lambda e: e.name)
            for entry in children:
                if len(entries) >= limit:
                    truncated = True
                    return
                entry_path = _child(prefix, entry.name)
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if include_dirs:
                        row: JsonObject = {"name": entry.name, "path": entry_path, "type": "dir"}
                        entries.append((entry_path, row))
                    if not recursive:
                        continue
                    if depth >= MAX_LIST_DEPTH:
                        truncated = True
                        continue
                    with _os_errors(entry_path):
                        sub_fd = os.open(
                            entry.name, os.O_RDONLY | os.O_DIRECTORY | _FILE_FLAGS, dir_fd=dir_fd
                        )
                    try:
                        visit(sub_fd, entry_path, depth + 1)
                    finally:
                        os.close(sub_fd)
                elif include_files and entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    row = {"name": entry.name, "path": entry_path, "type": "file", "size": size}
                    entries.append((entry_path, row))

        with _os_errors(target.display):
            root_fd = ws.open_dir(target.base, target.parts)
            try:
                visit(root_fd, target.display, 1)
            finally:
                os.close(root_fd)
        entries.sort(key=lambda pair: pair[0])
        return {
            "path": target.display,
            "recursive": recursive,
            "count": len(entries),
            "truncated": truncated,
            "entries": [row for _, row in entries],
        }

    def mkdir(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``mkdir``: create a directory (and its parents by default)."""
        path = require_string(input, "path")
        recursive = optional_bool(input, "recursive", True)
        target = ws.resolve(path)
        created = False
        with _os_errors(target.display):
            if not target.parts:
                if not recursive:
                    raise OSError(errno.EEXIST, "exists")
            else:
                check_write(ws.root, _DIRECTORY_BYTES, self.config.disk_mib)
                parent_fd = ws.open_dir(target.base, target.parent_parts, create=recursive)
                try:
                    os.mkdir(target.name, dir_fd=parent_fd)
                    created = True
                except FileExistsError:
                    info = os.stat(target.name, dir_fd=parent_fd, follow_symlinks=False)
                    if not recursive or not stat_mod.S_ISDIR(info.st_mode):
                        raise
                finally:
                    os.close(parent_fd)
        return {"path": target.display, "created": created, "recursive": recursive}

    def delete(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``delete``: remove a file, a symlink, or a directory."""
        path = require_string(input, "path")
        recursive = optional_bool(input, "recursive", False)
        target = ws.resolve(path, follow_final=False)
        if not target.parts or target.real == ws.root:
            raise ToolError(
                f"refusing to delete {path!r}: it is the workdir itself",
                code=ToolCode.E_FS_REFUSED,
                suggestion="Delete the entries inside it instead.",
            )
        with self._in_parent(ws, target) as parent_fd:
            info = os.stat(target.name, dir_fd=parent_fd, follow_symlinks=False)
            kind = _kind(info.st_mode)
            if kind != "dir":
                os.unlink(target.name, dir_fd=parent_fd)
            elif recursive:
                shutil.rmtree(target.name, dir_fd=parent_fd)
            else:
                os.rmdir(target.name, dir_fd=parent_fd)
        return {"path": target.display, "deleted": True, "type": kind}

    def stat(self, ws: Workspace, input: JsonObject) -> JsonValue:
        """``stat``: whether a path exists, and what it is."""
        path = require_string(input, "path")
        target = ws.resolve(path, follow_final=False)
        link_target: str | None = None
        try:
            with _os_errors(target.display):
                if not target.parts:
                    info = ws.stat_root() if target.base == ws.root else os.stat(target.base)
                else:
                    parent_fd = ws.open_dir(target.base, target.parent_parts)
                    try:
                        info = os.stat(target.name, dir_fd=parent_fd, follow_symlinks=False)
                        if stat_mod.S_ISLNK(info.st_mode):
                            link_target = os.readlink(target.name, dir_fd=parent_fd)
                    finally:
                        os.close(parent_fd)
        except ToolError as exc:
            if exc.code == ToolCode.E_FS_NOT_FOUND:
                return {"path": target.display, "exists": False}
            raise
        out: JsonObject = {
            "path": target.display,
            "exists": True,
            "type": _kind(info.st_mode),
            "size": info.st_size,
            "modifiedAt": datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
            "mode": f"{stat_mod.S_IMODE(info.st_mode):04o}",
        }
        if link_target is not None:
            out["linkTarget"] = link_target
        return out

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        return {
            "read": self._bind(self.read),
            "write": self._bind(self.write),
            "list": self._bind(self.list),
            "mkdir": self._bind(self.mkdir),
            "delete": self._bind(self.delete),
            "stat": self._bind(self.stat),
        }


def configure(config: JsonObject) -> dict[str, ToolHandler]:
    """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
    reader = ConfigReader("file-system", config)
    parsed = FileSystemConfig(
        allow_outside_workdir=reader.flag("allowOutsideWorkdir", False),
        max_read_bytes=reader.integer("maxReadBytes", 10 * _MIB),
        max_write_bytes=reader.integer("maxWriteBytes", 10 * _MIB),
        max_list_entries=reader.integer("maxListEntries", 10_000),
        disk_mib=parse_disk_mib("file-system", reader.raw("diskMiB"), present="diskMiB" in config),
    )
    reader.finish()
    return FileSystemTool(parsed).handlers()


handlers = configure({})
