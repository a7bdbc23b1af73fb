"""The runtime event log's files: ``<state>/runtime-events.jsonl`` and its rotated copies.

One JSON event per line. Each file starts with an ``eventlog.opened`` line naming its
``formatVersion``; a reader that meets a newer one refuses it (:class:`EventLogTooNew`) instead
of misreading it. The file rotates by size: past ``max_bytes`` it becomes
``runtime-events.jsonl.1`` (the older ones shift up to ``.{kept}``, the oldest is dropped), and
:func:`log_files` lists them oldest first, so a reader goes across them.

This module holds the bytes: where the files are, how a line is appended and a file rotated,
how complete lines are read back from an offset. What an event is (its types, its encoding) is
the daemon's, which is the log's only writer; the CLI and the studio read it.

Durability. The log is append-only and is not replaced, so it does not go through
:func:`goondan.files.write_atomic`: each line is one unbuffered ``write`` of the whole line, so
it is in the file (for ``logs -f``, and for a reader after the daemon is killed) as soon as it
is appended, and a reader never takes a torn last line for an event. Lines are not fsynced: an
fsync per event would put a disk flush on every Turn's, Step's and tool call's path for a
record that is for operators, and a power loss can at most cost the log's last lines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from goondan import reserve
from goondan.errors import newer_format
from goondan.files import shift_rotated

FILE_NAME = "runtime-events.jsonl"
EVENTS_MAX_BYTES = 64 * 1024 * 1024
"""Size past which the event log rotates."""
EVENTS_KEPT = 5
"""Rotated files kept besides the current one (``runtime-events.jsonl.1`` … ``.5``)."""
EVENTS_KEPT_READ = 99
"""How many rotated files a reader looks for (a daemon may have kept more than the default)."""
HEADER_TYPE = "eventlog.opened"
"""The ``type`` of the line that heads each file."""


class EventLogTooNew(ValueError):
    """An event log file written by a newer runtime, in a format this one does not read."""


def check_header(path: Path, version: object, supported: int) -> None:
    """Raise :class:`EventLogTooNew` when ``path``'s heading names a ``formatVersion`` newer
    than the ``supported`` one."""
    refusal = newer_format(path, "event log", version, supported)
    if refusal is not None:
        raise EventLogTooNew(refusal)


class EventLogFile:
    """Appends lines to the current file, rotating it by size; the daemon's, one per state
    directory. ``header()`` is the heading line (with its newline) of every new file."""

    def __init__(
        self,
        state_dir: Path,
        header: Callable[[], bytes],
        max_bytes: int = EVENTS_MAX_BYTES,
        kept: int = EVENTS_KEPT,
    ) -> None:
        self.path = state_dir / FILE_NAME
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.kept = kept
        self._header = header
        self._fd: int | None = None
        self._size = 0
        self._open()

    def _open(self) -> None:
        # Created owner-only whatever the umask: events carry tool arguments and answers.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # an older log may have been created world-readable
        self._fd = fd
        self._size = os.fstat(fd).st_size
        if self._size == 0:
            self.append(self._header())

    def append(self, line: bytes) -> None:
        """Append ``line`` (a whole line, with its newline), rotating first when it would take
        the file past ``max_bytes``; raises ``OSError``. Nothing once closed."""
        if self._fd is None:
            return
        if self._size + len(line) > self.max_bytes and self._size > 0:
            self._rotate()
        # One write per line, unbuffered: a line is in the file as soon as it is appended
        # (``logs -f`` reads it, a daemon killed next loses nothing).
        fd = self._fd
        reserve.retrying(self.path.parent, lambda: os.write(fd, line))
        self._size += len(line)

    def _rotate(self) -> None:
        """The current file becomes ``.1``, ``.1`` becomes ``.2``, …; a new one starts."""
        self.close()
        shift_rotated(self.path, self.kept)
        self._open()

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def log_files(state_dir: Path) -> list[Path]:
    """The event log's files that exist, oldest first (rotated ones, then the current)."""
    current = state_dir / FILE_NAME
    rotated = [
        state_dir / f"{FILE_NAME}.{index}"
        for index in range(EVENTS_KEPT_READ, 0, -1)
        if (state_dir / f"{FILE_NAME}.{index}").exists()
    ]
    return [*rotated, *([current] if current.exists() else [])]


def read_lines(path: Path, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(offset after the line, line)`` for each complete line of ``path`` from ``offset``
    (a last line without its newline is still being written, and is not read). Nothing for a
    missing file."""
    try:
        with open(path, "rb") as source:
            source.seek(offset)
            for raw in source:
                if not raw.endswith(b"\n"):
                    return
                offset += len(raw)
                yield offset, raw
    except FileNotFoundError:
        return
