"""The ingress journal of one Connection: every event its connector accepted, on disk before the
sender hears so, until the daemon says it is done with.

``<state dir>/connections/<name>/ingress.jsonl``, one JSON object per line::

    {"v": 1, "op": "accepted", "id": "<event id>", "at": "<UTC time>",
     "event": {"name": ..., "text": ..., "instanceKey": ..., "properties": {...}}}
    {"v": 1, "op": "settled", "id": "<event id>"}

An ``accepted`` line is appended and fsynced before ``emit``/``accept`` returns, so before an
HTTP connector answers 2xx (a write serves every event that waited for the one before it: a
group commit). An event's id is random, or derived from the delivery that brought it
(:func:`delivery_event_id`): a delivery accepted again while its event is here is not added
twice, and one accepted again after its event was settled is dropped by the daemon if its
Turn had started. ``settled`` lines follow when the daemon reports the event's Turn over or the
event lost (a ``delivery.lost`` event then keeps it); they are not fsynced, since one lost to a
crash only makes the event be sent again, and the daemon drops an event it delivered already
(``ingress-delivered.jsonl``, see :mod:`orchestrator.ingress_delivered`). At start the
connector sends every accepted event not settled, in order, before any new one.

The journal is bounded: after :data:`COMPACT_AFTER` settled lines it is rewritten whole
(:func:`goondan.files.write_atomic`) with only the events not settled. A torn last line (a kill
mid-write) is skipped; a line of a newer format stops the connector with a boot error naming
the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from goondan.errors import newer_format
from goondan.files import write_atomic
from goondan.time import utc_timestamp

FILE_NAME = "ingress.jsonl"
FORMAT_VERSION = 1
COMPACT_AFTER = 1000
"""Settled lines after which the journal is rewritten with only the unsettled events."""


class JournalUnreadable(Exception):
    """The journal cannot be read or is of a newer format; the message names the file."""


@dataclass(frozen=True, slots=True)
class JournaledEvent:
    """One accepted event, as the daemon gets it."""

    event_id: str
    name: str
    text: str
    instance_key: str
    properties: dict[str, str] = field(default_factory=dict)
    accepted_at: str = field(default_factory=utc_timestamp)

    def to_json(self) -> dict[str, Any]:
        """The ``event`` object of its ``accepted`` line."""
        return {
            "name": self.name,
            "text": self.text,
            "instanceKey": self.instance_key,
            "properties": self.properties,
        }


def new_event_id(connection: str) -> str:
    """A fresh event id, unique across the connector's restarts (a replayed event keeps its)."""
    return f"{connection}-{secrets.token_hex(12)}"


def delivery_event_id(connection: str, delivery_id: str) -> str:
    """The event id of the delivery ``delivery_id`` (``ConnectorEvent.delivery_id``): the same
    every time that delivery is accepted, so the journal and the daemon's delivered log know a
    second copy. Hashed: a delivery id is whatever the sender put in a header."""
    digest = hashlib.sha256(delivery_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{connection}-d{digest[:32]}"


class IngressJournal:
    """The accepted events of one Connection not settled yet, and the file that keeps them.

    ``path`` ``None`` keeps them in memory only (nothing survives a restart then).
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._log = structlog.get_logger("goondan.connector.journal")
        self._unsettled: dict[str, JournaledEvent] = {} if path is None else _read(path)
        self._settled_lines = 0
        self._buffer: list[bytes] = []
        self._queued = 0
        """Lines put in the buffer so far; ``_written`` of them are in the file."""
        self._written = 0
        self._must_sync = False
        self._fd: int | None = None
        self._lock = asyncio.Lock()
        if self._unsettled or (path is not None and path.exists()):
            self._compact_now = True  # start from a file holding only what is still owed
        else:
            self._compact_now = False

    def unsettled(self) -> list[JournaledEvent]:
        """The accepted events not settled, oldest first."""
        return list(self._unsettled.values())

    def __len__(self) -> int:
        return len(self._unsettled)

    async def open(self) -> None:
        """Rewrite the file with only the unsettled events (at start); raises ``OSError``."""
        if self._compact_now:
            await self._commit(None, sync=True)

    async def accept(self, event: JournaledEvent) -> bool:
        """Add ``event``; on disk (fsynced) when this returns ``True``. ``False`` when an event
        of that id is held already (a delivery accepted twice), once that one is on disk.
        Raises ``OSError``, the event not added."""
        if event.event_id in self._unsettled:
            await self._commit(None, sync=True)  # the first copy's write may be under way
            if event.event_id in self._unsettled:  # else that write failed: take this one
                return False
        self._unsettled[event.event_id] = event
        try:
            await self._commit(_accepted_line(event), sync=True)
        except BaseException:
            self._unsettled.pop(event.event_id, None)
            raise
        return True

    async def settle(self, event_id: str) -> None:
        """Forget ``event_id``: the daemon is done with it (logged, not raised, on failure)."""
        if self._unsettled.pop(event_id, None) is None:
            return
        self._settled_lines += 1
        if self._settled_lines >= COMPACT_AFTER:
            self._compact_now = True
        line = _encode({"v": FORMAT_VERSION, "op": "settled", "id": event_id})
        try:
            await self._commit(line, sync=False)
        except OSError as exc:  # it is sent again after a restart, and dropped as delivered
            self._log.warning("settlement not journaled", error=exc.strerror or str(exc))

    def close(self) -> None:
        """Close the file (the process exits)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def _commit(self, line: bytes | None, *, sync: bool) -> None:
        if self._path is None:
            return
        if line is not None:
            self._buffer.append(line)
            self._queued += 1
        self._must_sync |= sync
        # Shielded: a request cancelled mid-write must not hand the file to a second writer
        # while its thread still writes.
        writing = asyncio.ensure_future(self._write(self._queued))
        writing.add_done_callback(_retrieve)
        await asyncio.shield(writing)

    async def _write(self, wanted: int) -> None:
        async with self._lock:
            if self._written >= wanted and not self._compact_now:
                return
            data, upto = b"".join(self._buffer), self._queued
            sync, self._must_sync = self._must_sync, False
            self._buffer.clear()
            try:
                if self._compact_now:
                    self._compact_now = False
                    self._settled_lines = 0
                    whole = b"".join(_accepted_line(e) for e in self._unsettled.values())
                    await asyncio.to_thread(self._rewrite, whole)
                elif data:
                    await asyncio.to_thread(self._append, data, sync)
            except BaseException:
                self._buffer[:0] = [data] if data else []
                self._must_sync |= sync
                raise
            self._written = upto

    def _append(self, data: bytes, sync: bool) -> None:
        assert self._path is not None
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, data)
        if sync:
            os.fsync(self._fd)

    def _rewrite(self, data: bytes) -> None:
        assert self._path is not None
        write_atomic(self._path, data)
        self.close()


def _encode(line: dict[str, Any]) -> bytes:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _accepted_line(event: JournaledEvent) -> bytes:
    line = {"v": FORMAT_VERSION, "op": "accepted", "id": event.event_id}
    return _encode(line | {"at": event.accepted_at, "event": event.to_json()})


def _retrieve(task: asyncio.Future[None]) -> None:
    """Mark a write's outcome as seen: its caller may have been cancelled and not await it."""
    if not task.cancelled():
        task.exception()


def _read(path: Path) -> dict[str, JournaledEvent]:
    """The unsettled events ``path`` holds, oldest first; JournalUnreadable when it cannot be
    read or holds a line of a newer format."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise JournalUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    events: dict[str, JournaledEvent] = {}
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        data = _record(line)
        if data is None:
            if number < len(lines):  # not the torn last line of a kill mid-write
                structlog.get_logger("goondan.connector.journal").warning(
                    "unreadable journal line skipped", file=str(path), line=number
                )
            continue
        refusal = newer_format(path, "ingress journal", data.get("v"), FORMAT_VERSION)
        if refusal is not None:
            raise JournalUnreadable(refusal)
        _apply_record(events, data)
    return events


def _record(line: bytes) -> dict[str, Any] | None:
    """The JSON object ``line`` holds, or ``None``."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _apply_record(events: dict[str, JournaledEvent], data: dict[str, Any]) -> None:
    """``events`` after one record: an accepted event added, a settled one dropped."""
    event_id, op = data.get("id"), data.get("op")
    if not isinstance(event_id, str):
        return
    if op == "settled":
        events.pop(event_id, None)
    elif op == "accepted":
        event = _event(event_id, data.get("event"), data.get("at"))
        if event is not None:
            events[event_id] = event


def _event(event_id: str, data: object, at: object) -> JournaledEvent | None:
    if not isinstance(data, dict):
        return None
    name, text, key = data.get("name"), data.get("text"), data.get("instanceKey")
    properties = data.get("properties")
    if not (isinstance(name, str) and isinstance(text, str) and isinstance(key, str)):
        return None
    if not isinstance(properties, dict):
        properties = {}
    return JournaledEvent(
        event_id,
        name,
        text,
        key,
        {k: v for k, v in properties.items() if isinstance(v, str)},
        at if isinstance(at, str) else utc_timestamp(),
    )
