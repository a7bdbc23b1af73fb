"""The runtime event log: one JSON event per line in ``<state>/runtime-events.jsonl``.

The Orchestrator is its only writer: agents send their Turn/Step/tool events over IPC, and the
supervisor adds process lifecycle events (``process.spawned|ready|exited|restarting|backoff``),
so one file, in arrival order, holds the whole causal chain of a trace across agents.

Each file starts with an ``eventlog.opened`` line naming its ``formatVersion``; a reader that
meets a newer one refuses it (:class:`EventLogTooNew`) instead of misreading it. The file
rotates by size: past :data:`EVENTS_MAX_BYTES` it becomes ``runtime-events.jsonl.1`` (the
older ones shift up to ``.{EVENTS_KEPT}``, the oldest is dropped), and :func:`log_files` lists
them oldest first, so ``logs`` reads across them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from goondan.defaults import EVENT_LOG_FORMAT
from goondan.errors import newer_format
from goondan.time import utc_timestamp
from ipc.runtime_events import (
    AnyEvent,
    EventLogOpenedEvent,
    EventType,
    RawEvent,
    RuntimeEvent,
    as_event,
    decode_line,
    encode_event,
    process_event,
    read_event,
)

FILE_NAME = "runtime-events.jsonl"
EVENTS_MAX_BYTES = 64 * 1024 * 1024
"""Size past which the event log rotates."""
EVENTS_KEPT = 5
"""Rotated files kept besides the current one (``runtime-events.jsonl.1`` … ``.5``)."""
HEADER_TYPE = EventType.EVENTLOG_OPENED


class EventLogTooNew(ValueError):
    """An event log file written by a newer runtime, in a format this one does not read."""


class EventLog:
    """Appends events, one line each, flushed as written."""

    def __init__(
        self, state_dir: Path, max_bytes: int = EVENTS_MAX_BYTES, kept: int = EVENTS_KEPT
    ) -> None:
        self.path = state_dir / FILE_NAME
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.kept = kept
        self._fd: int | None = None
        self._size = 0
        self._open()
        self.listeners: list[Callable[[AnyEvent], None]] = []
        """Told of every event as it is appended (the metrics count them)."""

    def _open(self) -> None:
        # Created owner-only whatever the umask: events carry tool arguments and answers.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # an older log may have been created world-readable
        self._fd = fd
        self._size = os.fstat(fd).st_size
        if self._size == 0:
            self._write(
                EventLogOpenedEvent(timestamp=utc_timestamp(), format_version=EVENT_LOG_FORMAT)
            )

    def _write(self, event: AnyEvent) -> None:
        if self._fd is None:
            return
        line = encode_event(event) + b"\n"
        if self._size + len(line) > self.max_bytes and self._size > 0:
            self._rotate()
        # One write per line, unbuffered: a line is in the file as soon as it is appended
        # (``logs -f`` reads it, a daemon killed next loses nothing).
        os.write(self._fd, line)
        self._size += len(line)

    def _rotate(self) -> None:
        """The current file becomes ``.1``, ``.1`` becomes ``.2``, …; a new one starts."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for index in range(self.kept, 0, -1):
            older = self.path.with_name(f"{FILE_NAME}.{index}")
            newer = self.path if index == 1 else self.path.with_name(f"{FILE_NAME}.{index - 1}")
            with contextlib.suppress(FileNotFoundError):
                if index == self.kept:
                    older.unlink(missing_ok=True)
                newer.rename(older)
        self._open()

    def append(self, event: AnyEvent | Mapping[str, Any]) -> None:
        """Write one event, typed or as its JSON object (a failure to write is never fatal to
        routing); the listeners are told of it typed."""
        event = as_event(event)
        for listener in self.listeners:
            with contextlib.suppress(Exception):  # a listener never costs the log its line
                listener(event)
        with contextlib.suppress(OSError, TypeError, ValueError, msgspec.EncodeError):
            self._write(event)

    def emit(self, event: RuntimeEvent) -> None:
        """An event of the Orchestrator's own, stamped now."""
        event.timestamp = utc_timestamp()
        self.append(event)

    def record(self, event_type: str, agent: str, **fields: Any) -> None:
        """An event of the Orchestrator's own, stamped now, about ``agent``, from its type and
        its fields in their JSON spelling (how the model broker reports)."""
        stamped = {"type": event_type, "timestamp": utc_timestamp(), "agentName": agent}
        self.append(read_event({**stamped, **fields}))

    def lifecycle(self, kind: str, agent: str, **fields: Any) -> None:
        """A process lifecycle event (``process.<kind>``, its ``fields`` in their JSON
        spelling, as the supervisor reports them)."""
        self.append(process_event(kind, utc_timestamp(), agent, fields))

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``10m``, ``2h``, ``1d``, ``30s`` ago, or an ISO 8601 timestamp; ``ValueError`` for
    anything else, a duration reaching before the year 1 included."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text.strip())
    if match:
        amount = float(match.group(1))
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        try:
            return now - timedelta(**{unit: amount})
        except OverflowError:
            raise ValueError(f"{text!r} reaches before the year 1") from None
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def matches(
    event: AnyEvent | Mapping[str, Any],
    *,
    agent: str | None,
    trace: str | None,
    since: datetime | None,
) -> bool:
    """Whether ``event`` passes the filters."""
    event = as_event(event)
    if agent is not None and event.agent_name != agent:
        return False
    if trace is not None and event.trace != trace:
        return False
    if since is not None:
        try:
            if datetime.fromisoformat(event.timestamp.replace("Z", "+00:00")) < since:
                return False
        except ValueError:
            return False
    return True


def log_files(state_dir: Path) -> list[Path]:
    """The event log's files that exist, oldest first (rotated ones, then the current)."""
    current = state_dir / FILE_NAME
    rotated = [
        state_dir / f"{FILE_NAME}.{index}"
        for index in range(EVENTS_KEPT_READ, 0, -1)
        if (state_dir / f"{FILE_NAME}.{index}").exists()
    ]
    return [*rotated, *([current] if current.exists() else [])]


EVENTS_KEPT_READ = 99
"""How many rotated files a reader looks for (a daemon may have kept more than the default)."""


def read_typed(path: Path, offset: int = 0) -> Iterator[tuple[int, AnyEvent]]:
    """``(offset after the line, event)`` for each complete, parsable line from ``offset``.

    The ``eventlog.opened`` heading is not an event: it is checked (a newer format raises
    :class:`EventLogTooNew`) and skipped.
    """
    try:
        with open(path, "rb") as source:
            source.seek(offset)
            for raw in source:
                if not raw.endswith(b"\n"):
                    return  # a line still being written
                offset += len(raw)
                event = decode_line(raw)
                if event is None:
                    continue
                if event.type == HEADER_TYPE:
                    version = (
                        event.field("formatVersion")
                        if isinstance(event, RawEvent)
                        else event.to_builtins().get("formatVersion")
                    )
                    refusal = newer_format(path, "event log", version, EVENT_LOG_FORMAT)
                    if refusal is not None:
                        raise EventLogTooNew(refusal)
                    continue
                yield offset, event
    except FileNotFoundError:
        return


def read_events(path: Path, offset: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_typed`, each event as its JSON object."""
    for end, event in read_typed(path, offset):
        yield end, event.to_builtins()


def read_all(state_dir: Path) -> Iterator[dict[str, Any]]:
    """Every event of the log, across its rotated files, oldest first, as its JSON object."""
    for path in log_files(state_dir):
        for _, event in read_events(path):
            yield event


def format_event(event: AnyEvent | Mapping[str, Any]) -> str:
    """One readable line: time, agent/instance, type, trace, and the interesting fields."""
    event = as_event(event)
    skip = {"timestamp", "type", "agentName", "instanceKey", "traceId", "spanId", "parentSpanId"}
    extras = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False)[:120]}"
        for k, v in event.to_builtins().items()
        if k not in skip
    )
    who = event.agent_name or "?"
    if event.instance:
        who += f"@{event.instance}"
    trace = f" trace={event.trace[:12]}" if event.trace else ""
    return f"{event.timestamp} {who:<24} {event.type:<16}{trace} {extras}".rstrip()
