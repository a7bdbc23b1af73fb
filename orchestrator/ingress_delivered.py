"""The events of one Connection the daemon delivered, so one sent again is not run twice.

A connector journals every event it accepts (:mod:`connector_process.journal`) and sends the
ones its journal still owes after a restart, its own or the daemon's. An event whose Turn had
started before the crash must not get a second Turn, so the daemon keeps the ids of the events
it delivered in ``<state dir>/connections/<name>/ingress-delivered.jsonl``, one line each::

    {"id": "<event id>", "at": "<UTC time>"}

An event counts as delivered when its target agent reports the Turn started (``send_started``):
the agent then appends the event's text to the conversation's ``events.jsonl`` in the same step,
and from then on the runtime never delivers the event again. The line is appended and fsynced
then. An event arriving whose id is here is settled at once, with no Turn.

Bounded: the newest :data:`KEEP` ids are kept (a connector sends an owed event again right
after it restarts, long before that many more arrive); past twice that, the file is rewritten
(:func:`goondan.files.write_atomic`) with the newest :data:`KEEP`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import OrderedDict
from pathlib import Path

import structlog

from goondan.files import write_atomic
from goondan.time import utc_timestamp

FILE_NAME = "ingress-delivered.jsonl"
KEEP = 10_000
"""Delivered ids remembered per Connection."""


class DeliveredLog:
    """The delivered event ids of one Connection, on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._log = structlog.get_logger("goondan.connections")
        self._ids: OrderedDict[str, str] = _read(path)
        self._lines = len(self._ids)
        self._lock = asyncio.Lock()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    async def mark(self, event_id: str) -> None:
        """Remember ``event_id`` as delivered, fsynced before this returns (logged, not
        raised, when the disk refuses: the event may then run twice after a crash)."""
        if event_id in self._ids:
            return
        at = utc_timestamp()
        self._ids[event_id] = at
        line = json.dumps({"id": event_id, "at": at}, separators=(",", ":")) + "\n"
        async with self._lock:
            try:
                if self._lines >= 2 * KEEP:
                    while len(self._ids) > KEEP:
                        self._ids.popitem(last=False)
                    whole = "".join(
                        json.dumps({"id": i, "at": a}, separators=(",", ":")) + "\n"
                        for i, a in self._ids.items()
                    )
                    await asyncio.to_thread(self._rewrite, whole.encode())
                    self._lines = len(self._ids)
                else:
                    await asyncio.to_thread(self._append, line.encode())
                    self._lines += 1
            except OSError as exc:
                self._log.error(
                    "delivered event not recorded",
                    file=str(self.path),
                    error=exc.strerror or str(exc),
                )

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self, data: bytes) -> None:
        write_atomic(self.path, data)


def _read(path: Path) -> OrderedDict[str, str]:
    """The ids ``path`` holds, oldest first (none when it is missing or unreadable; a torn or
    foreign line is skipped)."""
    ids: OrderedDict[str, str] = OrderedDict()
    try:
        raw = path.read_bytes()
    except OSError:
        return ids
    for line in raw.splitlines():
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            at = data.get("at")
            ids[data["id"]] = at if isinstance(at, str) else ""
    while len(ids) > KEEP:
        ids.popitem(last=False)
    return ids
