"""Structured logging set up once per process (both ends of the wire use it).

One event per line: JSON when stderr is not a terminal (daemons, CI, log shippers), a
readable console format on a terminal. The level comes from the argument, else
``GOONDAN_LOG_LEVEL``, else ``info``. Context (agent, instance key, trace id) is bound with
``structlog.contextvars`` and appears on every line logged inside it. Exceptions logged with
``log.exception`` carry their type, message and traceback (``exception`` in JSON).

Logging never blocks or kills the process: lines go through a bounded queue to a writer
thread, so a stderr nobody reads (a full pipe) or nobody holds (a closed pipe) costs dropped,
counted lines, never a stuck event loop or an exception in the code that logs.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

LOG_QUEUE_LINES = 10_000
"""Lines waiting for stderr before new ones are dropped (and counted)."""
DRAIN_SECONDS = 1.0
"""How long a process that is exiting waits for its queued lines to be written."""
LOG_FORMAT_ENV = "GOONDAN_LOG_FORMAT"
"""``json`` or ``console``, where stderr is not what decides: an agent's stderr is a pipe to
the daemon, whose own stderr (a terminal, or not) chose the format."""


class LineWriter:
    """A file-like sink for structlog: ``write`` queues, a daemon thread writes to ``fd``.

    The thread starts with the first line: an agent that has logged nothing yet (most of an
    idle swarm) has no thread, nor its stack and memory arena.
    """

    def __init__(self, fd: int, capacity: int = LOG_QUEUE_LINES) -> None:
        self._fd = fd
        self._identity = _identity(fd)
        self._lines: queue.Queue[str] = queue.Queue(capacity)
        self._dropped = 0
        self._unreported = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.mirror: Callable[[bytes], None] | None = None
        """Also given each line, by the writer's thread (the daemon's own log file)."""

    @property
    def dropped(self) -> int:
        """Lines lost so far in all (queue full, or stderr refused them)."""
        return self._dropped

    def write(self, text: str) -> int:
        """Queue ``text`` (one rendered line); never blocks, never raises."""
        if self._thread is None:
            self._start()
        try:
            self._lines.put_nowait(text)
        except queue.Full:
            self._count_drop()
        return len(text)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name="goondan-log", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had now: lines wait, or drop when full
                return
            self._thread = thread

    def flush(self) -> None:
        """Lines are written by the thread; nothing to do here."""

    def drain(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Wait up to ``timeout`` for the queued lines to be written; ``True`` when done."""
        # A line counts as done once written, not once taken off the queue: the queue's own
        # count of unfinished lines is what the writer's thread settles after each write.
        deadline = time.monotonic() + timeout
        done = self._lines.all_tasks_done
        with done:
            while self._lines.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                done.wait(remaining)
        return True

    def _run(self) -> None:
        while True:
            text = self._lines.get()
            with self._lock:
                dropped, self._unreported = self._unreported, 0
            if dropped:
                notice = (
                    f'{{"event": "log lines dropped", "count": {dropped}, "level": "warning"}}\n'
                )
                self._write(notice.encode())
            data = text.encode("utf-8", errors="replace")
            self._write(data)
            mirror = self.mirror
            if mirror is not None:
                try:
                    mirror(data)
                except Exception:  # a copy that fails never costs stderr its lines
                    self._count_drop()
            self._lines.task_done()

    def _write(self, data: bytes) -> None:
        if _identity(self._fd) != self._identity:
            # Closed, or the number now names another file (a tool closed stderr and
            # something reused 2): writing would corrupt that file. Drop and count.
            self._count_drop()
            return
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:  # stderr closed or gone: count it, keep going
            self._count_drop()

    def _count_drop(self) -> None:
        with self._lock:
            self._dropped += 1
            self._unreported += 1


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


_writer: LineWriter | None = None
_writer_pid: int | None = None


def log_writer() -> LineWriter:
    """This process's writer to stderr (a forked child makes its own)."""
    global _writer, _writer_pid
    if _writer is None or _writer_pid != os.getpid():
        _writer = LineWriter(sys.stderr.fileno() if sys.stderr is not None else 2)
        _writer_pid = os.getpid()
        atexit.register(_writer.drain)
    return _writer


class _ProcessStderr:
    """A file-like sink for structlog: this process's :class:`LineWriter`, made at the first
    line (a forked child gets its own, and one that logs nothing makes none)."""

    def write(self, text: str) -> int:
        return log_writer().write(text)

    def flush(self) -> None:
        """Lines are written by the writer's thread; nothing to do here."""


# Built once per interpreter (in the fork server, for every agent it forks) rather than at
# every process's start.
_HEAD = (structlog.contextvars.merge_contextvars, structlog.processors.add_log_level)
_TIMESTAMPER = structlog.processors.TimeStamper(fmt="iso", utc=True)
# ``exc_info`` becomes ``exception``: type, message and traceback, not ``true``.
_JSON_TAIL = (structlog.processors.format_exc_info, structlog.processors.JSONRenderer())
_SINK = structlog.WriteLoggerFactory(file=_ProcessStderr())  # type: ignore[arg-type]


def configure_logging(
    level: str | None = None, *, process: str | None = None, json: bool | None = None
) -> None:
    """Configure structlog for this process; ``process`` is added to every event."""
    name = (level or os.environ.get("GOONDAN_LOG_LEVEL") or "info").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        numeric = logging.INFO
    try:
        chosen = os.environ.get(LOG_FORMAT_ENV)
        if json is None and chosen in ("json", "console"):
            json = chosen == "json"
        as_json = (not sys.stderr.isatty()) if json is None else json
    except (AttributeError, ValueError, OSError):  # no usable stderr at all
        as_json = True
    processors: list[Any] = [*_HEAD, _TIMESTAMPER]
    if process is not None:
        processors.insert(0, _add_process(process))
    if as_json:
        processors += _JSON_TAIL
    else:
        # Colours on a terminal, unless the NO_COLOR convention (or --no-color) says none.
        # Plain tracebacks: the same whether or not `rich` happens to be installed.
        processors.append(
            structlog.dev.ConsoleRenderer(
                colors=not os.environ.get("NO_COLOR"),
                exception_formatter=structlog.dev.plain_traceback,
            )
        )
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_SINK,
        cache_logger_on_first_use=False,
    )


def _add_process(name: str) -> Any:
    def add(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("process", name)
        return event

    return add
