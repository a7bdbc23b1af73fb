"""The runtime event log: one JSON event per line in ``<state>/runtime-events.jsonl``.

The Orchestrator is its only writer: agents send their Turn/Step/tool events over IPC, and the
supervisor adds process lifecycle events (``process.spawned|ready|exited|restarting|backoff``),
so one file, in arrival order, holds the whole causal chain of a trace across agents.

The files (the ``eventlog.opened`` heading with its ``formatVersion``, rotation by size, the
list of rotated files, complete lines read from an offset, and why lines are not fsynced) are
:mod:`goondan.state_files.eventlog`'s; this module is what an event is to them: typed events
encoded one a line, and read back typed.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from goondan.defaults import EVENT_LOG_FORMAT
from goondan.state_files.eventlog import (
    EVENTS_KEPT,
    EVENTS_MAX_BYTES,
    FILE_NAME,
    EventLogFile,
    EventLogTooNew,
    check_header,
    log_files,
    read_lines,
)
from goondan.time import parse_timestamp, utc_timestamp
from ipc.runtime_events import (
    AnyEvent,
    EventLogOpenedEvent,
    EventType,
    ProcessEvent,
    RawEvent,
    RuntimeEvent,
    decode_line,
    encode_event,
)

__all__ = [
    "EVENTS_KEPT",
    "EVENTS_MAX_BYTES",
    "FILE_NAME",
    "EventLog",
    "EventLogTooNew",
    "format_event",
    "log_files",
    "matches",
    "parse_since",
    "read_all",
    "read_events",
    "read_typed",
]


class EventLog:
    """Appends events, one line each, flushed as written."""

    def __init__(
        self, state_dir: Path, max_bytes: int = EVENTS_MAX_BYTES, kept: int = EVENTS_KEPT
    ) -> None:
        self._file = EventLogFile(state_dir, _heading, max_bytes, kept)
        self.path = self._file.path
        self.listeners: list[Callable[[AnyEvent], None]] = []
        """Told of every event as it is appended (the metrics count them)."""

    def _write(self, event: AnyEvent) -> None:
        self._file.append(encode_event(event) + b"\n")

    def append(self, event: AnyEvent) -> None:
        """Write one event, typed or kept raw (a failure to write is never fatal to routing);
        the listeners are told of it first."""
        for listener in self.listeners:
            with contextlib.suppress(Exception):  # a listener never costs the log its line
                listener(event)
        with contextlib.suppress(OSError, TypeError, ValueError, msgspec.EncodeError):
            self._write(event)

    def emit(self, event: RuntimeEvent) -> None:
        """An event of the Orchestrator's own, stamped now."""
        event.timestamp = utc_timestamp()
        self.append(event)

    def record(self, event: RuntimeEvent, agent: str) -> None:
        """An event of the Orchestrator's own about ``agent``, stamped now."""
        if not isinstance(event, RuntimeEvent):  # a bare kind or an object: a typo fails here
            raise TypeError(f"not a runtime event struct: {event!r}")
        event.agent_name = agent
        self.emit(event)

    def lifecycle(self, event: ProcessEvent, agent: str) -> None:
        """A process lifecycle event about ``agent`` (or a connection's process, or the
        configuration), stamped now."""
        self.record(event, agent)

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def _heading() -> bytes:
    """The ``eventlog.opened`` line that heads each file."""
    opened = EventLogOpenedEvent(timestamp=utc_timestamp(), format_version=EVENT_LOG_FORMAT)
    return encode_event(opened) + b"\n"


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
    return parse_timestamp(text.strip(), naive_is_utc=True)


def matches(
    event: AnyEvent,
    *,
    agent: str | None,
    trace: str | None,
    since: datetime | None,
) -> bool:
    """Whether ``event`` passes the filters."""
    if agent is not None and event.agent_name != agent:
        return False
    if trace is not None and event.trace != trace:
        return False
    if since is not None:
        try:
            if parse_timestamp(event.timestamp, naive_is_utc=True) < since:
                return False
        except ValueError:
            return False
    return True


def read_typed(path: Path, offset: int = 0) -> Iterator[tuple[int, AnyEvent]]:
    """``(offset after the line, event)`` for each complete, parsable line from ``offset``.

    The ``eventlog.opened`` heading is not an event: it is checked (a newer format raises
    :class:`EventLogTooNew`) and skipped.
    """
    for end, raw in read_lines(path, offset):
        event = decode_line(raw)
        if event is None:
            continue
        if event.type == EventType.EVENTLOG_OPENED:
            version = (
                event.field("formatVersion")
                if isinstance(event, RawEvent)
                else event.to_builtins().get("formatVersion")
            )
            check_header(path, version, EVENT_LOG_FORMAT)
            continue
        yield end, event


def read_events(path: Path, offset: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_typed`, each event as its JSON object."""
    for end, event in read_typed(path, offset):
        yield end, event.to_builtins()


def read_all(state_dir: Path) -> Iterator[dict[str, Any]]:
    """Every event of the log, across its rotated files, oldest first, as its JSON object."""
    for path in log_files(state_dir):
        for _, event in read_events(path):
            yield event


def format_event(event: AnyEvent) -> str:
    """One readable line: time, agent/instance, type, trace, and the interesting fields."""
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
