"""The durable record of every accepted external request, in an append-only journal.

A record holds what a request asked (its front door, agent, instance, input, timeout, trace),
the digest of its idempotency key and of its body, whether it is still ``running`` or
``done``, and, once done, the Turn's answer. It is appended, one JSON line, to the journal in
``<state>/requests/journal-<n>.jsonl``, and synced to disk (``fdatasync``) *before* the request
is accepted; its answer is appended when it arrives. So after a crash of the daemon every
request it accepted is either answered on disk or still ``running``, and is routed again on
start. A line cut short by a crash is the journal's last and is skipped when read; the last
whole line of a request is its record.

Why a journal and not a file per request: creating, syncing and renaming two files per request
(and syncing their directory) cost the daemon about 1.9 ms of CPU per request, more than the
rest of its work on it; an append is microseconds and one ``fdatasync`` a fraction of a file's
creation. The journal is cut into segments of :attr:`RequestStore.segment_bytes`; a daemon
starts a new one on each start (it never appends to a line a crash may have torn). A segment
with no request's last line left is deleted; one whose live lines fill less than a quarter of it
is copied forward into the newest segment and deleted, so a request that runs for hours keeps
no old segment on disk, and the journal takes at most about four times what its live records
take.

Done records are kept :data:`DEFAULT_RETENTION_SECONDS` (``GOONDAN_REQUEST_RETENTION_SECONDS``
overrides it), then pruned. The store holds at most :attr:`RequestStore.capacity` records:
past it the oldest done ones go first, and when every one still runs a new request is refused
(:class:`StoreFull`). Only a small index lives in memory; answers are read from disk when asked.
A state directory written as one file per request (``<id>.json``, before the journal) is read
on start and moved into the journal.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from goondan.errors import DaemonError
from goondan.files import sync_directory
from goondan.reserve import retrying

DEFAULT_RETENTION_SECONDS = 24 * 3600.0
"""How long a done request's answer is kept (and its idempotency key honoured)."""
RETENTION_ENV = "GOONDAN_REQUEST_RETENTION_SECONDS"
"""The environment variable that sets the retention in seconds."""
DEFAULT_CAPACITY = 100_000
"""Records kept at most (running and done)."""
PRUNE_EVERY_SECONDS = 60.0
"""How often admitting a request also drops the records past their retention."""
SEGMENT_BYTES = 8 * 1024 * 1024
"""A journal segment's size, past which the next line starts a new one."""

_SEGMENT = re.compile(r"journal-(\d{8})\.jsonl")

_ID = re.compile(r"req_[0-9a-f]{32}")
"""A request id: 128 random bits, so one caller cannot guess another's."""

Kind = Literal["request", "send", "chat", "responses", "mcp", "a2a", "agui"]
"""The front door a request came through: ``POST .../requests``, ``.../sends``,
``/v1/chat/completions``, ``/v1/responses``, ``/mcp``, ``/a2a/{agent}`` or ``/ag-ui/{agent}``."""
State = Literal["running", "done"]


class StoreFull(DaemonError, RuntimeError):
    """Every record the store may hold is a request still running."""


class KeyReused(DaemonError, ValueError):
    """An idempotency key already names a request with another body."""


class RequestRecord(msgspec.Struct, rename="camel", kw_only=True):
    """One accepted external request, as its file holds it."""

    v: int = 1
    request_id: str
    kind: Kind
    agent: str
    instance_key: str
    input: str
    timeout_ms: int | None = None
    relay: bool = False
    stream: bool = False
    """Its caller asked for the Turn's text as it is produced (routed again the same way)."""
    trace_id: str = ""
    key_digest: str = ""
    """SHA-256 of the idempotency key (empty: none was given); the key itself is not kept."""
    body_digest: str = ""
    """SHA-256 of what was asked (front door, agent, body): a key reused with another fails."""
    echo: dict[str, object] | None = None
    """What its front door's answer repeats of the request (the Responses door: its
    ``previous_response_id``, ``instructions``, ``metadata``), so a later look-up answers alike."""
    state: State = "running"
    answer: dict[str, object] | None = None
    """The Turn's answer in its wire form (:class:`ipc.delegation.DelegateAnswer`)."""
    accepted_at: float = 0.0
    finished_at: float | None = None


@dataclass(slots=True)
class _Entry:
    """What the store keeps in memory of a record."""

    key_digest: str
    body_digest: str
    state: State
    accepted_at: float
    finished_at: float | None


def new_request_id() -> str:
    """A fresh, unguessable request id."""
    return "req_" + secrets.token_hex(16)


def is_request_id(value: str) -> bool:
    """Whether ``value`` has the shape of a request id (checked before any file is touched)."""
    return _ID.fullmatch(value) is not None


def digest(*parts: str | bytes) -> str:
    """SHA-256 of ``parts`` (each length-prefixed, so no two lists share a digest)."""
    hashed = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hashed.update(len(data).to_bytes(8, "big"))
        hashed.update(data)
    return hashed.hexdigest()


def retention_from_env(environ: dict[str, str] | None = None) -> float:
    """The retention ``GOONDAN_REQUEST_RETENTION_SECONDS`` asks for, else the default."""
    value = (os.environ if environ is None else environ).get(RETENTION_ENV, "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_RETENTION_SECONDS
    return seconds if seconds > 0 and seconds == seconds else DEFAULT_RETENTION_SECONDS


class RequestStore:
    """The records of one state directory (``directory``), or in memory only (``None``).

    The index (states, keys, where each record's last line lies) is the loop's; :meth:`persist`
    may run in worker threads, and what it shares with the loop (the journal's file and the
    lines' places) is kept under one lock.
    """

    def __init__(
        self,
        directory: Path | None,
        *,
        retention: float = DEFAULT_RETENTION_SECONDS,
        capacity: int = DEFAULT_CAPACITY,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.directory = directory
        self.retention = retention
        self.capacity = capacity
        self.segment_bytes = segment_bytes
        self._entries: dict[str, _Entry] = {}
        self._keys: dict[str, str] = {}
        """Key digest → request id."""
        self._memory: dict[str, bytes] = {}
        """Without a directory: each record's bytes."""
        self._pruned = 0.0
        self.log = structlog.get_logger("goondan.requests")
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(RequestRecord)
        self._lock = threading.Lock()
        self._lines: dict[str, _Line] = {}
        """Request id → its record's last line in the journal."""
        self._segments: dict[int, _SegmentUse] = {}
        """Each segment on disk → what of it is still some record's last line."""
        self._active: int | None = None
        """The segment lines are appended to (``None``: the next append starts one)."""
        self._active_fd = -1
        self._compacting = False

    # -- loading and reading -------------------------------------------------------------------

    def load(self) -> list[RequestRecord]:
        """Read the records on disk (dropping those past retention and unreadable ones);
        returns the ones still ``running``, oldest first."""
        running: list[RequestRecord] = []
        if self.directory is None or not self.directory.is_dir():
            return running
        now = time.time()
        latest: dict[str, tuple[RequestRecord, _Line]] = {}
        for number, path in self._segment_paths():
            self._segments[number] = _SegmentUse(path.stat().st_size)
            for record, line in self._read_segment(number, path):
                latest[record.request_id] = (record, line)
        legacy = [r for r in self._read_legacy() if r.request_id not in latest]
        for record, line in latest.values():
            if self._expired(record.state, record.finished_at, now):
                continue
            self._index(record)
            self._place(record.request_id, line)
        for record in legacy:  # moved into the journal, then their files go
            if not self._expired(record.state, record.finished_at, now):
                self._index(record)
                self.persist(record)
        if legacy:
            self._sync_active()
        self._remove_legacy()
        self._delete_dead_segments()
        if len(self._entries) > self.capacity:  # a record dropped for room may be on disk still
            self._evict(len(self._entries) - self.capacity)
        # The records just decoded, not read again: a running one is never evicted.
        read = [record for record, _ in latest.values()] + legacy
        running = [r for r in read if r.state == "running" and r.request_id in self._entries]
        running.sort(key=lambda r: r.accepted_at)
        return running

    def get(self, request_id: str) -> RequestRecord | None:
        """The record of ``request_id``; ``None`` when unknown or past its retention."""
        if not is_request_id(request_id):
            return None
        entry = self._entries.get(request_id)
        if entry is None or self._expired(entry.state, entry.finished_at, time.time()):
            return None
        return self._read(request_id)

    def by_key(self, key_digest: str) -> str | None:
        """The request id an idempotency key (its digest) names, while it is kept."""
        request_id = self._keys.get(key_digest)
        if request_id is None:
            return None
        entry = self._entries[request_id]
        if self._expired(entry.state, entry.finished_at, time.time()):
            return None
        return request_id

    def __len__(self) -> int:
        return len(self._entries)

    # -- writing -------------------------------------------------------------------------------

    def reserve(self, record: RequestRecord) -> None:
        """Index ``record`` (a new one, or a new state of one kept), making room for a new one
        first; raises :class:`StoreFull` when no room can be made. Runs on the loop."""
        if record.request_id not in self._entries:
            self.prune()
            if len(self._entries) >= self.capacity:
                self._evict(len(self._entries) - self.capacity + 1)
            if len(self._entries) >= self.capacity:
                raise StoreFull(
                    f"{len(self._entries)} requests are running, as many as are kept; retry later"
                )
        self._index(record)

    def persist(self, record: RequestRecord) -> None:
        """Append ``record`` to the journal; raises ``OSError`` (nothing appended).

        A new (running) record is synced to disk before this returns, so it blocks on the disk:
        run it in a worker thread. An answer is not synced (a sync per answer would double what
        a request costs), and this returns within microseconds, on the loop as well: a daemon
        killed after it leaves the line in the kernel's cache, and after a power loss the
        request is found running and routed again, where the agent answers its recorded Turn
        again. The sync runs outside the lock, on a duplicate of the segment's descriptor, so
        an answer appended meanwhile does not wait for it, and a segment started meanwhile
        cannot close it.
        """
        synced = self.append(record)
        if synced is not None:
            try:
                os.fdatasync(synced[0])
            finally:
                os.close(synced[0])

    def append(self, record: RequestRecord) -> tuple[int, int] | None:
        """Append ``record`` to the journal without syncing it (microseconds: on the loop);
        raises ``OSError`` (nothing appended). For a running record, returns what to sync
        before it counts as accepted (as :meth:`persist` does): a duplicate of its segment's
        descriptor, the caller's to close, and the segment's number."""
        data = self._encoder.encode(record)
        if self.directory is None:
            self._memory[record.request_id] = data
            return None
        with self._lock:
            line = self._append(data + b"\n")
            self._place(record.request_id, line)
            if record.state != "running":
                return None
            return os.dup(self._active_fd), line.segment

    def forget(self, request_id: str) -> None:
        """Drop a record whose writing failed (nothing was accepted)."""
        if request_id in self._entries:
            self._drop(request_id)

    @staticmethod
    def finished(record: RequestRecord, answer: dict[str, object]) -> RequestRecord:
        """``record`` answered with ``answer`` (the Turn's answer in its wire form)."""
        return msgspec.structs.replace(record, state="done", answer=answer, finished_at=time.time())

    def prune(self, *, force: bool = False) -> int:
        """Drop the done records past their retention (at most once a minute unless
        ``force``); returns how many."""
        now = time.time()
        if not force and now - self._pruned < PRUNE_EVERY_SECONDS:
            return 0
        self._pruned = now
        old = [
            rid for rid, e in self._entries.items() if self._expired(e.state, e.finished_at, now)
        ]
        for request_id in old:
            self._drop(request_id)
        return len(old)

    def close(self) -> None:
        """Close the journal's open segment (a later append opens a new one)."""
        with self._lock:
            self._close_active()

    # -- inside --------------------------------------------------------------------------------

    def _expired(self, state: State, finished_at: float | None, now: float) -> bool:
        return state == "done" and (finished_at or 0.0) + self.retention < now

    def _evict(self, count: int) -> None:
        """Drop the ``count`` oldest done records to make room (their keys are forgotten
        before their retention ends: said in the log)."""
        done = sorted(
            (e.finished_at or 0.0, rid) for rid, e in self._entries.items() if e.state == "done"
        )
        for _, request_id in done[:count]:
            self._drop(request_id)
        if done:
            self.log.warning(
                "request store full: oldest answers dropped early",
                dropped=min(count, len(done)),
                capacity=self.capacity,
            )

    def _drop(self, request_id: str) -> None:
        entry = self._entries.pop(request_id)
        if entry.key_digest and self._keys.get(entry.key_digest) == request_id:
            del self._keys[entry.key_digest]
        if self.directory is None:
            self._memory.pop(request_id, None)
            return
        with self._lock:
            line = self._lines.pop(request_id, None)
            if line is not None:
                self._release(line)

    def _index(self, record: RequestRecord) -> None:
        self._entries[record.request_id] = _Entry(
            record.key_digest,
            record.body_digest,
            record.state,
            record.accepted_at,
            record.finished_at,
        )
        if record.key_digest:
            self._keys[record.key_digest] = record.request_id

    def _read(self, request_id: str) -> RequestRecord | None:
        if self.directory is None:
            data = self._memory.get(request_id)
            return None if data is None else self._decoder.decode(data)
        with self._lock:
            line = self._lines.get(request_id)
            if line is None:
                return None
            try:
                return self._decoder.decode(self._line_bytes(line))
            except (OSError, msgspec.DecodeError):
                return None

    # -- the journal (under the lock) ----------------------------------------------------------

    def _segment_path(self, number: int) -> Path:
        assert self.directory is not None
        return self.directory / f"journal-{number:08d}.jsonl"

    def _line_bytes(self, line: _Line) -> bytes:
        fd = os.open(self._segment_path(line.segment), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, line.length, line.offset)
        finally:
            os.close(fd)

    def _segment_paths(self) -> list[tuple[int, Path]]:
        assert self.directory is not None
        found = []
        for path in self.directory.glob("journal-*.jsonl"):
            match = _SEGMENT.fullmatch(path.name)
            if match is not None:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _read_segment(self, number: int, path: Path) -> list[tuple[RequestRecord, _Line]]:
        """The whole lines of a segment that are records; the rest (a tail a crash cut short,
        a line that is not a record) is skipped, and said in the log."""
        data = path.read_bytes()
        found: list[tuple[RequestRecord, _Line]] = []
        offset, skipped = 0, 0
        while offset < len(data):
            end = data.find(b"\n", offset)
            if end < 0:  # no newline: a tail a crash cut short
                skipped += 1
                break
            try:
                record = self._decoder.decode(data[offset:end])
            except msgspec.DecodeError:
                record = None
            if record is None or not is_request_id(record.request_id):
                skipped += 1
            else:
                found.append((record, _Line(number, offset, end + 1 - offset)))
            offset = end + 1
        if skipped:
            self.log.warning(
                "unreadable request journal lines skipped", path=str(path), lines=skipped
            )
        return found

    def _read_legacy(self) -> list[RequestRecord]:
        """The records of a state directory written as one file per request."""
        assert self.directory is not None
        found: list[RequestRecord] = []
        for path in self.directory.glob("req_*.json"):
            try:
                record: RequestRecord | None = self._decoder.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError):
                record = None
            if record is None or record.request_id != path.stem:
                self.log.warning("unreadable request record set aside", path=str(path))
                with contextlib.suppress(OSError):
                    path.rename(path.with_suffix(".bad"))
                continue
            found.append(record)
        return found

    def _remove_legacy(self) -> None:
        assert self.directory is not None
        for path in (*self.directory.glob(".req_*.tmp"), *self.directory.glob("req_*.json")):
            path.unlink(missing_ok=True)

    def _append(self, data: bytes) -> _Line:
        assert self.directory is not None
        directory = self.directory
        if self._active is None or self._segments[self._active].size + len(data) > max(
            self.segment_bytes, len(data)
        ):
            self._open_segment()
        assert self._active is not None
        use = self._segments[self._active]
        offset = use.size

        def write() -> None:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._active_fd, view) :]
            except BaseException:
                # A part written would join the next line: the segment ends where it did.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._active_fd, offset)
                raise

        retrying(directory, write)
        use.size += len(data)
        return _Line(self._active, offset, len(data))

    def _place(self, request_id: str, line: _Line) -> None:
        """``line`` is now ``request_id``'s last: the one it replaces no longer counts."""
        replaced = self._lines.get(request_id)
        self._lines[request_id] = line
        self._segments[line.segment].live += line.length
        if replaced is not None:
            self._release(replaced)

    def _release(self, line: _Line) -> None:
        use = self._segments.get(line.segment)
        if use is None:
            return
        use.live -= line.length
        if use.live <= 0 and line.segment != self._active:
            self._delete_segment(line.segment)

    def _open_segment(self) -> None:
        """Start the next segment (then copy forward what little is live in older ones)."""
        assert self.directory is not None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._close_active()
        number = max(self._segments, default=0) + 1
        path = self._segment_path(number)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        self._active_fd = os.open(path, flags, 0o600)
        self._active = number
        self._segments[number] = _SegmentUse(0)
        sync_directory(self.directory)  # the new segment's name survives a power loss
        if not self._compacting:
            self._compacting = True
            try:
                self._compact()
            finally:
                self._compacting = False

    def _compact(self) -> None:
        """Copy the live lines of every older segment less than half live into the active one,
        then delete those segments."""
        sparse = [
            n for n, use in self._segments.items() if n != self._active and use.live * 2 < use.size
        ]
        if not sparse:
            return
        moved = [(rid, line) for rid, line in self._lines.items() if line.segment in sparse]
        for request_id, line in moved:
            self._place(request_id, self._append(self._line_bytes(line)))
        self._sync_active_locked()
        for number in sparse:
            self._delete_segment(number)

    def _sync_active(self) -> None:
        with self._lock:
            self._sync_active_locked()

    def _sync_active_locked(self) -> None:
        if self._active is not None:
            os.fdatasync(self._active_fd)

    def _close_active(self) -> None:
        if self._active is None:
            return
        fd, number = self._active_fd, self._active
        self._active, self._active_fd = None, -1
        os.close(fd)
        if self._segments[number].live <= 0:
            self._delete_segment(number)

    def _delete_segment(self, number: int) -> None:
        self._segments.pop(number, None)
        self._segment_path(number).unlink(missing_ok=True)

    def _delete_dead_segments(self) -> None:
        with self._lock:
            for number in [n for n, use in self._segments.items() if use.live <= 0]:
                if number != self._active:
                    self._delete_segment(number)


@dataclass(slots=True)
class _Line:
    """Where a record's line lies in the journal."""

    segment: int
    offset: int
    length: int


@dataclass(slots=True)
class _SegmentUse:
    """A segment's size and how many of its bytes are some record's last line."""

    size: int
    live: int = 0
