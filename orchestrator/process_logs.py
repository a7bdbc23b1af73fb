"""Each process's output in its own files: ``<state>/logs/<process>.<stream>.log``.

``<process>`` is the name the structured log gives it (``orchestrator``, ``agent:worker``,
``connector:telegram``) and ``<stream>`` is ``stdout`` or ``stderr``. Each line is stored as it
arrived, after the UTC time it arrived (``2025-01-31T12:00:00.123456Z text``), so the two
streams of a process can be read back interleaved. A file rotates as the runtime event log
does (:data:`~orchestrator.eventlog.EVENTS_MAX_BYTES`, :data:`~orchestrator.eventlog.EVENTS_KEPT`
rotated files kept as ``.1`` … ``.5``); files are ``0600`` in the ``0700`` state directory.

**How a child's output gets here.** The Orchestrator makes two pipes per agent or connector
process and hands their write ends over as the child's descriptors 1 and 2 (see
``orchestrator.transport``); it reads the other ends on its event loop (``add_reader`` on
non-blocking descriptors, so a read never waits), writes each line to the file and queues it,
unchanged, for the daemon's own stdout or stderr (through :class:`ipc.logs.LineWriter`, whose
thread does the writing: a full stderr pipe costs dropped lines, never a stuck loop). journald
and container runtimes still see every process's structured lines on the daemon's stderr.
The daemon reads instead of each child writing its own files because a killed child loses
nothing that way: what it wrote sits in the pipe until the daemon reads it, down to its last
line before a SIGKILL; one writer per file also keeps rotation simple (no two processes rename
a file under each other, an agent restarted included). The Orchestrator's own structured log
lines are copied into ``orchestrator.stderr.log`` by its log writer's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from goondan.files import shift_rotated
from goondan.time import utc_timestamp_us
from orchestrator.eventlog import EVENTS_KEPT, EVENTS_MAX_BYTES

LOGS_DIR = "logs"
"""Under the state directory, the directory of the process log files."""
STREAMS = ("stdout", "stderr")
ORCHESTRATOR = "orchestrator"
"""The process name of the daemon itself."""
LINE_MAX_BYTES = 64 * 1024
"""A longer line (or output with no newline at all) is stored in pieces of this size."""
READ_BYTES = 64 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@-]")


def file_name(process: str, stream: str) -> str:
    """The current file of ``process``'s ``stream`` (a name that can never leave the
    directory: anything but letters, digits and ``_.:@-`` becomes ``_``)."""
    return f"{_UNSAFE.sub('_', process).lstrip('.')}.{stream}.log"


class RotatingFile:
    """One stream's file: stamped lines appended, rotated by size as the event log is."""

    def __init__(
        self, path: Path, max_bytes: int = EVENTS_MAX_BYTES, kept: int = EVENTS_KEPT
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.kept = kept
        self._lock = threading.Lock()  # the Orchestrator's own file is written from a thread
        self._fd: int | None = None
        self._size = 0
        self._open()

    def _open(self) -> None:
        # Owner-only whatever the umask: a process's output may carry what its logs carry.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        self._fd = fd
        self._size = os.fstat(fd).st_size

    def write_line(self, line: bytes) -> None:
        """Append ``line`` (its newline included, or one is added) after the time now."""
        data = utc_timestamp_us().encode() + b" " + (line if line.endswith(b"\n") else line + b"\n")
        with self._lock:
            if self._fd is None:
                return
            if self._size + len(data) > self.max_bytes and self._size > 0:
                self._rotate()
            with contextlib.suppress(OSError):  # a full disk costs lines, never the daemon
                os.write(self._fd, data)
                self._size += len(data)

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        shift_rotated(self.path, self.kept)
        self._open()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


@dataclass(eq=False)
class _Reader:
    """The daemon's end of one child stream's pipe."""

    fd: int
    key: tuple[str, str]
    pending: bytearray = field(default_factory=bytearray)


class ProcessOutput:
    """The process log files of one state directory, and the pipes feeding them."""

    def __init__(
        self, state_dir: Path, max_bytes: int = EVENTS_MAX_BYTES, kept: int = EVENTS_KEPT
    ) -> None:
        from ipc.logs import LineWriter

        self.directory = state_dir / LOGS_DIR
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self.directory.chmod(0o700)
        self.max_bytes = max_bytes
        self.kept = kept
        # Children's lines reach the daemon's own descriptors through writers of their own:
        # queued here, written by a thread, so a stderr nobody reads never stops the loop.
        self._tees = {"stdout": LineWriter(1), "stderr": LineWriter(2)}
        self._files: dict[tuple[str, str], RotatingFile] = {}
        self._users: dict[tuple[str, str], int] = {}
        self._readers: dict[int, _Reader] = {}
        self._own: RotatingFile | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _file(self, key: tuple[str, str]) -> RotatingFile:
        if key not in self._files:
            process, stream = key
            self._files[key] = RotatingFile(
                self.directory / file_name(process, stream), self.max_bytes, self.kept
            )
        self._users[key] = self._users.get(key, 0) + 1
        return self._files[key]

    def _release(self, key: tuple[str, str]) -> None:
        self._users[key] -= 1
        if self._users[key] == 0:
            del self._users[key]
            self._files.pop(key).close()

    def pipes(self, process: str) -> tuple[int, int]:
        """Write ends for ``process``'s stdout and stderr: the caller hands them to the child
        and closes them; what the child writes is read into its files from then on."""
        loop = self._loop = asyncio.get_running_loop()
        ends: list[int] = []
        for stream in STREAMS:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(read_end, False)
            reader = _Reader(read_end, (process, stream))
            self._file(reader.key)
            self._readers[read_end] = reader
            loop.add_reader(read_end, self._readable, reader)
            ends.append(write_end)
        return ends[0], ends[1]

    def _readable(self, reader: _Reader) -> None:
        try:
            data = os.read(reader.fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            reader.pending += data
            self._emit(reader, final=False)
        else:  # every writer is gone (the child exited, or was killed)
            self._emit(reader, final=True)
            self._forget(reader)

    def _emit(self, reader: _Reader, *, final: bool) -> None:
        pending = reader.pending
        while pending:
            cut = pending.find(b"\n")
            if cut < 0 or cut >= LINE_MAX_BYTES:
                if len(pending) < LINE_MAX_BYTES and not final:
                    return  # the rest of the line is still to come
                cut = min(len(pending), LINE_MAX_BYTES) - 1
            line = bytes(pending[: cut + 1])
            del pending[: cut + 1]
            self._files[reader.key].write_line(line)
            text = line.decode("utf-8", errors="replace")
            self._tees[reader.key[1]].write(text if text.endswith("\n") else text + "\n")

    def _forget(self, reader: _Reader) -> None:
        if self._loop is not None:
            self._loop.remove_reader(reader.fd)
        os.close(reader.fd)
        del self._readers[reader.fd]
        self._release(reader.key)

    def own_lines(self) -> Callable[[bytes], None]:
        """A sink for the daemon's own log lines (its log writer's thread calls it)."""
        if self._own is None:
            self._own = RotatingFile(
                self.directory / file_name(ORCHESTRATOR, "stderr"), self.max_bytes, self.kept
            )
        return self._own.write_line

    def close(self) -> None:
        """Read what the children left in their pipes, close every file, and let the
        daemon's stdout and stderr have the last lines (bounded in time)."""
        for reader in list(self._readers.values()):
            while True:
                try:
                    data = os.read(reader.fd, READ_BYTES)
                except OSError:  # nothing more now (a descendant may still hold the pipe)
                    break
                if not data:
                    break
                reader.pending += data
            self._emit(reader, final=True)
            self._forget(reader)
        if self._own is not None:
            self._own.close()
        for tee in self._tees.values():
            tee.drain()
