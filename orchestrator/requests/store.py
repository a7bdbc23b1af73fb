"""The durable record of every accepted external request, one file per request.

``<state>/requests/<id>.json`` holds what a request asked (its front door, agent, instance,
input, timeout, trace), the digest of its idempotency key and of its body, whether it is still
``running`` or ``done``, and, once done, the Turn's answer. A record is written whole (written,
fsynced, renamed, directory fsynced: :func:`goondan.files.write_atomic`) *before* the request is
accepted, and again when its answer arrives; so after a crash of the daemon every request it
accepted is either answered on disk or still ``running``, and is routed again on start.

Done records are kept :data:`DEFAULT_RETENTION_SECONDS` (``GOONDAN_REQUEST_RETENTION_SECONDS``
overrides it), then pruned. The store holds at most :attr:`RequestStore.capacity` records:
past it the oldest done ones go first, and when every one still runs a new request is refused
(:class:`StoreFull`). Only a small index lives in memory; answers are read from disk when asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from goondan.errors import DaemonError
from goondan.files import write_atomic

DEFAULT_RETENTION_SECONDS = 24 * 3600.0
"""How long a done request's answer is kept (and its idempotency key honoured)."""
RETENTION_ENV = "GOONDAN_REQUEST_RETENTION_SECONDS"
"""The environment variable that sets the retention in seconds."""
DEFAULT_CAPACITY = 100_000
"""Records kept at most (running and done)."""
PRUNE_EVERY_SECONDS = 60.0
"""How often admitting a request also drops the records past their retention."""

_ID = re.compile(r"req_[0-9a-f]{32}")
"""A request id: 128 random bits, so one caller cannot guess another's."""

Kind = Literal["request", "send", "chat", "a2a"]
"""The front door a request came through: ``POST .../requests``, ``.../sends`` or
``/v1/chat/completions``.
``a2a``: an A2A message (``POST /a2a/{agent}``, :mod:`orchestrator.http.a2a`)."""
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
    """The records of one state directory (``directory``), or in memory only (``None``)."""

    def __init__(
        self,
        directory: Path | None,
        *,
        retention: float = DEFAULT_RETENTION_SECONDS,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.directory = directory
        self.retention = retention
        self.capacity = capacity
        self._entries: dict[str, _Entry] = {}
        self._keys: dict[str, str] = {}
        """Key digest → request id."""
        self._memory: dict[str, bytes] = {}
        """Without a directory: each record's bytes."""
        self._pruned = 0.0
        self.log = structlog.get_logger("goondan.requests")
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(RequestRecord)

    # -- loading and reading -------------------------------------------------------------------

    def load(self) -> list[RequestRecord]:
        """Read the records on disk (dropping those past retention and unreadable ones);
        returns the ones still ``running``, oldest first."""
        running: list[RequestRecord] = []
        if self.directory is None or not self.directory.is_dir():
            return running
        now = time.time()
        for torn in self.directory.glob(".req_*.tmp"):  # a write a crash cut short
            torn.unlink(missing_ok=True)
        for path in self.directory.glob("req_*.json"):
            record = self._read_path(path)
            if record is None or record.request_id != path.stem:
                self.log.warning("unreadable request record set aside", path=str(path))
                with contextlib.suppress(OSError):
                    path.rename(path.with_suffix(".bad"))
                continue
            if self._expired(record.state, record.finished_at, now):
                path.unlink(missing_ok=True)
                continue
            self._index(record)
            if record.state == "running":
                running.append(record)
        running.sort(key=lambda r: r.accepted_at)
        return running

    def get(self, request_id: str) -> RequestRecord | None:
        """The record of ``request_id``; ``None`` when unknown or past its retention."""
        if not is_request_id(request_id):
            return None
        entry = self._entries.get(request_id)
        if entry is None or self._expired(entry.state, entry.finished_at, time.time()):
            return None
        if self.directory is None:
            data = self._memory.get(request_id)
            return None if data is None else self._decoder.decode(data)
        return self._read_path(self.directory / f"{request_id}.json")

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
        """Write ``record`` whole; raises ``OSError``. May run in a worker thread: it touches
        no index. A new (running) record is synced to disk before this returns; an answer is
        not (a sync per answer would double what a request costs): a daemon killed after it
        leaves it in the kernel's cache, and after a power loss the request is found running
        and routed again, where the agent answers its recorded Turn again."""
        data = self._encoder.encode(record)
        if self.directory is None:
            self._memory[record.request_id] = data
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / f"{record.request_id}.json"
        if record.state == "running":
            write_atomic(path, data)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

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
        else:
            (self.directory / f"{request_id}.json").unlink(missing_ok=True)

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

    def _read_path(self, path: Path) -> RequestRecord | None:
        try:
            return self._decoder.decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
