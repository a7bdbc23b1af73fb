"""Confine paths to the instance workdir.

A path is joined onto the workdir (an absolute path is taken as is), then every symlink in it
is resolved with :func:`os.path.realpath`; the result must be the workdir or lie under it.
So ``../x``, ``/etc/passwd``, a symlink inside the workdir that points outside, and a file
under a symlinked directory that points outside are all refused, while an absolute path or a
symlink that stays inside is fine.

Checking a name and then using it leaves a window in which a directory on the way could be
swapped for a symlink. File operations therefore never reopen the checked name: they walk the
*resolved* path one component at a time from a descriptor of the workdir, opening each
directory with ``O_NOFOLLOW`` and working relative to the last descriptor (``dir_fd``). A
symlink that appears after the check fails the walk (``ELOOP``) instead of being followed.

The file itself is opened the same way (``O_NOFOLLOW``, relative to the walked directory) and
judged by what the *opened descriptor* is (``os.fstat``), never by its name: only a regular
file with one link passes. A hard link shares its data with another name, which may lie
outside the workdir (another conversation's files, the state directory), so it counts as
outside; a FIFO, socket or device is no file to read or write. The open is non-blocking, so a
FIFO cannot hang it, and nothing is truncated before the check (a write opens without
``O_TRUNC`` and truncates the checked descriptor).

The walk starts from the workdir's *pinned descriptor* (:mod:`tools_base._pinned`), never from
its path: :func:`pinned_workspace` checks that the path still names the directory the instance
was given (``E_SPAWN_CWD_REFUSED`` otherwise) and opens every path beneath the descriptor
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or a component-by-component walk).
So a workdir swapped for a symlink after the instance loaded leads nowhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from goondan.errors import ToolCode
from tools_base import ToolContext, ToolError
from tools_base._pinned import PIN_FLAGS, descend, open_dir_beneath
from tools_base.tools._common import invalid_arg

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Target:
    """A checked path."""

    real: str
    """Absolute path with symlinks resolved (all but the last component when not following)."""
    base: str
    """Where :meth:`Workspace.open_dir` walks from: the workdir, or ``/`` for a path outside."""
    parts: tuple[str, ...]
    """Components of ``real`` below ``base``; empty for ``base`` itself."""
    display: str
    """What outputs show: workdir-relative POSIX path (``.`` for the workdir) or absolute."""

    @property
    def name(self) -> str:
        """Last component (``""`` for the base itself)."""
        return self.parts[-1] if self.parts else ""

    @property
    def parent_parts(self) -> tuple[str, ...]:
        """Components of the parent directory."""
        return self.parts[:-1]


class Workspace:
    """Path policy of one Tool instance: a workdir and whether paths may leave it."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        allow_outside: bool,
        code: str,
        setting: str = "allowOutsideWorkdir",
        root_fd: int | None = None,
    ) -> None:
        """``root_fd``: the workdir's descriptor (see :func:`pinned_workspace`); paths inside
        the workdir are then opened beneath it, never through ``workdir``'s path."""
        self.root = os.path.realpath(workdir)
        self.root_fd = root_fd
        self.allow_outside = allow_outside
        self._code = code
        self._setting = setting

    def contains(self, real: str) -> bool:
        """Whether the resolved path ``real`` is the workdir or below it."""
        if self.root == os.sep:
            return True
        return real == self.root or real.startswith(self.root + os.sep)

    def resolve(self, path: str, *, follow_final: bool = True) -> Target:
        """Check ``path`` against the policy; raise a ToolError with the Tool's code if refused.

        With ``follow_final=False`` a symlink in the last component is not resolved (``stat``
        and ``delete`` act on the link itself); its parent still is.
        """
        if "\x00" in path:
            raise invalid_arg("'path' must not contain NUL characters")
        candidate = path if os.path.isabs(path) else os.path.join(self.root, path)
        if follow_final:
            real = os.path.realpath(candidate)
        else:
            parent, name = os.path.split(os.path.normpath(candidate))
            real = os.path.join(os.path.realpath(parent), name) if name else parent
        inside = self.contains(real)
        if not inside and not self.allow_outside:
            raise self.outside_error(path, real)
        base = self.root if inside else os.sep
        rel = os.path.relpath(real, base)
        parts = () if rel == os.curdir else tuple(rel.split(os.sep))
        display = ("/".join(parts) or ".") if inside else real
        return Target(real=real, base=base, parts=parts, display=display)

    def outside_error(self, path: str, real: str) -> ToolError:
        """The refusal for a path that resolves outside the workdir."""
        shown = "" if real == path else f" (resolves to {real!r})"
        return ToolError(
            f"path {path!r}{shown} is outside the workdir {self.root!r}",
            code=self._code,
            suggestion=(
                "Use a path relative to the workdir, such as 'notes/todo.txt'; absolute paths, "
                "'..' and symlinks must stay inside it. An operator can allow other paths with "
                f"the Tool config {self._setting}: true."
            ),
        )

    def open_dir(self, base: str, parts: Sequence[str], *, create: bool = False) -> int:
        """Descriptor of the directory ``base/parts``, never following a symlink on the way.

        ``create`` makes missing directories (like ``mkdir -p``). The caller closes the fd.
        Raises ``OSError`` (``FileNotFoundError``, ``NotADirectoryError``, ...) as the OS
        reports it, except when a component turns out to be a symlink: that one appeared
        after the path was checked, and becomes the Tool's outside-the-workdir error.
        """
        if self.root_fd is not None and base == self.root:
            return self._open_beneath(parts, create=create)

        def step(fd: int, part: str) -> int:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                return os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                # Linux says ENOTDIR, others ELOOP, for O_DIRECTORY|O_NOFOLLOW on a symlink.
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(part, fd):
                    raise ToolError(
                        f"a symlink appeared in {os.path.join(base, *parts)!r} while it was in use",
                        code=self._code,
                        suggestion="Retry; do not replace directories with symlinks meanwhile.",
                    ) from exc
                raise

        return descend(os.open(base, _DIR_FLAGS), parts, step)

    def _open_beneath(self, parts: Sequence[str], *, create: bool) -> int:
        assert self.root_fd is not None
        try:
            return open_dir_beneath(self.root_fd, parts, create=create)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                raise ToolError(
                    f"a symlink appeared in {os.path.join(self.root, *parts)!r} while it was in "
                    "use",
                    code=self._code,
                    suggestion="Retry; do not replace directories with symlinks meanwhile.",
                ) from exc
            raise

    def stat_root(self) -> os.stat_result:
        """The workdir's own ``stat`` (of the pinned descriptor where there is one)."""
        return os.stat(self.root) if self.root_fd is None else os.fstat(self.root_fd)

    def open_file(
        self, dir_fd: int, target: Target, flags: int, mode: int = 0o666
    ) -> tuple[int, os.stat_result]:
        """Descriptor of the file ``target`` in the directory ``dir_fd`` (from
        :meth:`open_dir`), and its ``fstat``, once the descriptor is a regular file with one
        link; blocking again. ``flags`` must not hold ``O_TRUNC``: truncate the checked
        descriptor instead.

        Raises ``OSError`` as the OS reports it (``ELOOP`` for a symlink, ``EISDIR`` for a
        directory, ``ENXIO`` for a FIFO nobody reads), :class:`ToolError` ``E_FS_NOT_A_FILE``
        for a FIFO, socket or device, and the Tool's outside-the-workdir error for a file with
        more than one hard link (unless paths may leave the workdir anyway). The caller
        closes the fd.
        """
        if flags & os.O_TRUNC:
            raise ValueError("open without O_TRUNC, then truncate the checked descriptor")
        fd = os.open(target.name, flags | _FILE_FLAGS, mode, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(
                    f"not a regular file: {target.display!r}",
                    code=ToolCode.E_FS_NOT_A_FILE,
                    suggestion="Only regular files can be read or written (not FIFOs, sockets "
                    "or devices).",
                )
            if info.st_nlink > 1 and not self.allow_outside:
                raise ToolError(
                    f"{target.display!r} has {info.st_nlink} hard links: its data may belong "
                    "to a file outside the workdir, so it is treated as outside",
                    code=self._code,
                    suggestion="Delete this name (that removes only the link) and write the "
                    "file anew. An operator can allow hard links with the Tool config "
                    f"{self._setting}: true.",
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, info


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def acquire_workdir(ctx: ToolContext) -> Iterator[tuple[str, int]]:
    """The workdir's path and a descriptor of it for one call (closed after).

    The instance's pinned workdir (``ctx.workdir_pin``) is verified first: a workdir that is no
    longer the directory the instance was given raises ``WorkdirRefused``
    (``E_SPAWN_CWD_REFUSED``). Where no runtime pinned one (a script, a test), ``ctx.workdir``
    is opened now, as it resolves, and that descriptor serves the whole call.
    """
    pin = ctx.workdir_pin
    if pin is None:
        path = os.path.realpath(ctx.workdir)
        fd = os.open(path, PIN_FLAGS)
    else:
        path, fd = pin.path, pin.acquire()
    try:
        yield path, fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def pinned_workspace(
    ctx: ToolContext, *, allow_outside: bool, code: str, setting: str = "allowOutsideWorkdir"
) -> Iterator[Workspace]:
    """A :class:`Workspace` for one call that opens paths beneath the workdir's descriptor
    (see :func:`acquire_workdir`)."""
    with acquire_workdir(ctx) as (path, fd):
        yield Workspace(path, allow_outside=allow_outside, code=code, setting=setting, root_fd=fd)
