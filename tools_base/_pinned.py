"""Workdirs pinned by descriptor: opened once, used by descriptor, verified at every use.

A workdir named by a path is only as good as the path: a spawned instance's workdir lies in its
spawner's workspace, where the spawner's ``bash`` can replace it with a symlink to any folder
of the machine (the state directory included). So an instance's workdir is opened once, when
it loads (:meth:`PinnedDir.open`): from a *trusted root* (the state directory, or ``/`` for a
workdir outside it), every component below it is opened with ``O_NOFOLLOW``, so a symlink
anywhere on the way refuses it. From then on the tools work on the descriptor:

- ``file-system`` opens every path beneath it (:func:`open_beneath`: ``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it, else a walk that opens one
  component at a time with ``O_NOFOLLOW`` and never climbs above the descriptor);
- the sandbox binds the opened directory (bubblewrap's ``--bind-fd``; the ``namespaces``
  backend binds its working directory, set from the descriptor), never a path.

Each use first checks that the path still names the pinned directory (:meth:`PinnedDir.verify`:
the same walk again, then ``st_dev``/``st_ino`` compared with the descriptor's). A workdir
swapped for a symlink, replaced by another directory or moved away is refused with
``E_SPAWN_CWD_REFUSED`` (:class:`WorkdirRefused`) on every call, not only when it loads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from goondan.errors import DeliveryCode
from tools_base._result import ToolError

O_PATH: int = getattr(os, "O_PATH", os.O_RDONLY)
_STEP_FLAGS = O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
PIN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a workdir itself is held: readable (``list`` scans it), never through a symlink."""

RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "armv7l": 437, "armv6l": 437,
            "i686": 437, "i386": 437, "ppc64le": 437, "ppc64": 437, "s390x": 437}  # fmt: skip
"""``openat2``'s syscall number by machine (437 wherever the unified table applies): the C
library of older systems has no wrapper for it."""
_RETRIES = 8
"""``openat2`` says ``EAGAIN`` when a rename raced with a ``RESOLVE_BENEATH`` lookup."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]  # fmt: skip


class WorkdirRefused(ToolError):
    """The workdir is not (or no longer) the directory the instance was given: a symlink on
    its way, another directory in its place, or gone. Code ``E_SPAWN_CWD_REFUSED``."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            code=DeliveryCode.E_SPAWN_CWD_REFUSED,
            suggestion="A spawned instance's workdir must stay the directory it was spawned "
            "into: restore it (no symlink on its way) or delete the instance.",
        )


_syscall: Any = None
_number = 0
_available: bool | None = None
use_openat2 = True
"""``False`` forces the component-by-component walk (tests, or a kernel that misbehaves)."""


def _openat2_fn() -> Any:
    """``syscall`` set up for ``openat2``, or ``None`` where this machine has none."""
    global _syscall, _number, _available
    if _available is None:
        number = _OPENAT2.get(os.uname().machine)
        _available = False
        if number is not None:
            fn = ctypes.CDLL(None, use_errno=True).syscall
            fn.restype = ctypes.c_long
            fn.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(_OpenHow), ctypes.c_size_t]  # fmt: skip
            _syscall, _number = fn, number
            how = _OpenHow(O_PATH | os.O_CLOEXEC, 0, RESOLVE_BENEATH)
            fd = fn(number, -100, b".", ctypes.byref(how), ctypes.sizeof(how))  # AT_FDCWD
            if fd >= 0:
                os.close(fd)
                _available = True
            # ENOSYS (an old kernel) or EPERM (a seccomp filter that does not know it): walk.
    return _syscall if _available else None


def have_openat2() -> bool:
    """Whether paths are resolved by ``openat2`` here (else by the walk)."""
    return use_openat2 and _openat2_fn() is not None


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    fn = _openat2_fn()
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)  # fmt: skip
    for _ in range(_RETRIES):
        fd = int(fn(_number, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code not in (errno.EAGAIN, errno.EINTR):
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", path)


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _step(dir_fd: int, name: str, flags: int, mode: int) -> int:
    """Open ``name`` (one component) in ``dir_fd``, never through a symlink: a symlink is
    ``ELOOP`` whatever ``flags`` (Linux says ``ENOTDIR`` for ``O_DIRECTORY``)."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and _is_symlink(name, dir_fd):
            raise OSError(errno.ELOOP, "a symlink is on the way", name) from exc
        raise


def _walk(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """:func:`open_beneath` without ``openat2``: one component at a time from ``dir_fd``; a
    ``..`` returns to the directory walked before it and never above ``dir_fd``."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    stack = [os.dup(dir_fd)]
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "the path climbs above its directory", path)
                os.close(stack.pop())
                if last:
                    return _step(stack[-1], ".", flags, mode)
                continue
            stack.append(_step(stack[-1], part, flags if last else _STEP_FLAGS, mode))
            if last:
                return stack.pop()
        return _step(stack[-1], ".", flags, mode)
    finally:
        for fd in stack:
            os.close(fd)


def open_beneath(dir_fd: int, path: str, flags: int, mode: int = 0o666) -> int:
    """Open ``path`` relative to ``dir_fd`` with ``flags``, resolved beneath it: an absolute
    path or a ``..`` that climbs above ``dir_fd`` is ``EXDEV``, a symlink on the way (the last
    component included) ``ELOOP``. The descriptor returned is close-on-exec; the caller
    closes it."""
    if os.path.isabs(path):
        raise OSError(errno.EXDEV, "an absolute path is not beneath its directory", path)
    if "\x00" in path:
        raise ValueError("a path must not hold NUL")
    if have_openat2():
        return _openat2(dir_fd, path or ".", flags, mode)
    return _walk(dir_fd, path, flags, mode)


def open_dir_beneath(dir_fd: int, parts: Sequence[str], *, create: bool = False) -> int:
    """Descriptor of the directory ``parts`` beneath ``dir_fd`` (readable, close-on-exec);
    ``create`` makes missing directories like ``mkdir -p``, each one beneath the last."""
    if create:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise OSError(errno.EXDEV, "not a single component", part)
    try:
        return open_beneath(dir_fd, "/".join(parts), os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        if not create or not parts:
            raise
    # Something is missing: its parent (made the same way), then it, made beneath the parent.
    # Most of a path is there already, so this costs a walk only where one is needed.
    parent = open_dir_beneath(dir_fd, parts[:-1], create=True)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(parts[-1], dir_fd=parent)
        return open_beneath(parent, parts[-1], os.O_RDONLY | os.O_DIRECTORY)
    finally:
        os.close(parent)


def descend(fd: int, parts: Iterable[str], step: Callable[[int, str], int]) -> int:
    """The directory ``parts`` leads to from ``fd``, each one opened by ``step(parent, part)``:
    ``fd`` is this call's, and every descriptor but the last is closed (all of them when a
    step fails)."""
    try:
        for part in parts:
            next_fd = step(fd, part)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


class PinnedDir:
    """A directory opened once, by a path checked component by component from a trusted root;
    see the module's docstring. Thread-safe; :meth:`acquire` hands out a duplicate, so a use
    that outlives :meth:`close` never works on a recycled descriptor number."""

    def __init__(self, path: str, root: str, fd: int) -> None:
        self.path = path
        """The directory's path, ``root`` resolved (what the sandbox names it)."""
        self.root = root
        """The trusted root the path is checked from (followed as it is)."""
        self._fd: int | None = fd
        self._id = _identity(os.fstat(fd))
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, root: str, create: bool = False) -> PinnedDir:
        """Open ``path`` (absolute, at or below ``root``); ``create`` makes what is missing
        below ``root``. Raises :class:`WorkdirRefused` for a path not below ``root`` or with a
        symlink (or a file) on its way below it, ``OSError`` for what else the OS says."""
        fd, rel = _open_from_root(os.fspath(path), root, create=create)
        real_root = os.path.realpath(root)
        return cls(os.path.join(real_root, rel) if rel else real_root, root, fd)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._fd is None

    def verify(self) -> None:
        """Raise :class:`WorkdirRefused` unless the path still names the pinned directory,
        with no symlink on its way below the root."""
        with self._lock:
            if self._fd is None:
                raise WorkdirRefused(f"the workdir {self.path} was released")
            self._verify(self._fd)

    def _verify(self, fd: int) -> None:
        try:
            again, _ = _open_from_root(self.path, os.path.realpath(self.root), create=False)
        except FileNotFoundError:
            raise WorkdirRefused(
                f"the workdir {self.path} is gone (moved or deleted since the instance loaded)"
            ) from None
        try:
            now = os.fstat(again)
        finally:
            os.close(again)
        if _identity(now) != self._id or _identity(os.fstat(fd)) != self._id:
            raise WorkdirRefused(
                f"the workdir {self.path} is another directory than the one this instance was "
                "given (it was replaced or moved since it loaded)"
            )

    def acquire(self) -> int:
        """Verify, then a duplicate of the descriptor (close-on-exec) for one use; the caller
        closes it. Raises :class:`WorkdirRefused`."""
        with self._lock:
            if self._fd is None:
                raise WorkdirRefused(f"the workdir {self.path} was released")
            self._verify(self._fd)
            return os.dup(self._fd)

    def close(self) -> None:
        """Release the descriptor (its instance is unloaded); idempotent."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"PinnedDir({self.path!r}, root={self.root!r})"


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def path_below(path: str, root: str) -> str | None:
    """``path`` (absolute, normalised) relative to ``root``: ``""`` for ``root`` itself,
    ``None`` when it is not at or below it. By the names alone, as ``os.path.relpath`` decides,
    without its cost on every pin."""
    root = os.path.normpath(root if os.path.isabs(root) else os.path.abspath(root))
    if path == root:
        return ""
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path[len(prefix) :] if path.startswith(prefix) else None


def _open_from_root(path: str, root: str, *, create: bool) -> tuple[int, str]:
    """The readable descriptor of ``path`` opened from ``root`` with nothing followed below
    it (see :meth:`PinnedDir.open`), and ``path`` relative to ``root`` (``""``: the root)."""
    path = os.path.normpath(path)
    if not os.path.isabs(path):
        raise WorkdirRefused(f"the workdir {path!r} is not an absolute path")
    rel = path_below(path, root)
    if rel is None:
        raise WorkdirRefused(f"the workdir {path} is not below {root}")
    parts = tuple(rel.split(os.sep)) if rel else ()
    root_fd = os.open(root, _ROOT_FLAGS)
    try:
        if not parts:
            return os.open(root, PIN_FLAGS & ~os.O_NOFOLLOW), rel
        try:
            return open_dir_beneath(root_fd, parts, create=create), rel
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
                raise WorkdirRefused(
                    f"the workdir {path} has a symlink or a file on its way (below {root}); "
                    "it is not followed"
                ) from exc
            raise
    finally:
        os.close(root_fd)
