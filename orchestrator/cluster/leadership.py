"""The ``leader`` key, which only the cluster's members can write in a way anyone obeys.

Whoever can write the cluster's bucket could, before, put any value under ``leader``: the
leader's next heartbeat found the key held by "another process" and stopped, and the nodes
took that process for their leader. Two defences, because either alone leaves a gap:

- **Signed records** (here). Every leadership record carries an HMAC-SHA256 over its content,
  the bucket and the key, made with the key every member shares (``GOONDAN_CLUSTER_KEY``).
  A record with a bad or missing signature, and a deletion of the key, are ignored and
  logged, never obeyed. This holds whatever the server's permissions are: against another
  user of the same NATS account, or a permission written too broadly.
- **Permissions** (``examples/cluster/nats.conf``): a user per member, and only the leader's
  users may publish to the ``leader`` key or delete or purge the bucket. This keeps
  strangers from writing at all, which a signature cannot: it only makes their writes
  meaningless. Records cannot be kept secret (members must read them), so a stranger who
  reads the bucket could write back an old record whose signature is good. Hence:

Every record carries an **epoch**, a **term** and a **beat**. The term is one past the
bucket's last sequence number when its leader claimed the key: the server assigns sequences
in order, and a leader claims only after the previous one's key lapsed, so each new
leadership has a greater term than every one before it, and nobody without the key can make
a record with a new one. The epoch is when the server made the bucket, so that terms stay
ordered when a server that lost the bucket gets a new one (its sequence starts again). The
beat counts the leader's writes within its term. A reader obeys a record only if its
(epoch, term, beat) is newer than the newest it has obeyed, so a replayed record is ignored; the leader gives up
the key only to a record of a greater term than its own. A claimer takes a key that holds
another leader's record only once that record stopped advancing for the expiry (measured on
the claimer's own clock: a dead leader's record replayed over and over does not keep it
alive), or at once when the leader left it with a signed ``leaving`` record.

Without a key (``--insecure-nats`` only) the records are not signed and are taken as they
come, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import structlog

from orchestrator.cluster.membership import LEADER_KEY, Lease, Member, Presence
from orchestrator.cluster.settings import decode_json, encode_json

LeaderRecord = dict[str, Any]
"""The leader key's value as stored in the KV bucket (JSON any member may have written)."""
Takeover = Callable[[LeaderRecord], bool]
"""Whether a standby may take over from the holder of this record."""
Verdict = tuple[LeaderRecord | None, int | None]
"""A judged record: the holder's record (``None``: nobody holds it) and its revision."""

SIGNATURE = "sig"

log = structlog.get_logger("goondan.cluster")


@dataclass(frozen=True, slots=True)
class LeaderSeal:
    """Signs and checks the records of one cluster's ``leader`` key."""

    key: bytes | None = field(repr=False)
    bucket: str

    def _mac(self, record: Mapping[str, Any]) -> str:
        assert self.key is not None
        body = {k: v for k, v in record.items() if k != SIGNATURE}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        message = f"{self.bucket}\n{LEADER_KEY}\n{text}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def sign(self, record: LeaderRecord) -> LeaderRecord:
        """``record`` with its signature (unchanged without a key)."""
        if self.key is None:
            return record
        return {**record, SIGNATURE: self._mac(record)}

    def check(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` was signed with the members' key (always, without one)."""
        if self.key is None:
            return True
        given = record.get(SIGNATURE)
        return isinstance(given, str) and hmac.compare_digest(given, self._mac(record))


def rank(record: Mapping[str, Any]) -> tuple[int, int, int]:
    """A record's (epoch, term, beat): the greater, the newer."""

    def number(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return number(record.get("epoch")), number(record.get("term")), number(record.get("beat"))


@dataclass(eq=False)
class LeaderLease(Lease):
    """The ``leader`` key held by this process: signed records, a term and a beat (see the
    module's docstring)."""

    seal: LeaderSeal | None = None
    patience: float = 3.0
    """How long another leader's record must stay unchanged before it counts as dead."""
    epoch: int = 0
    """When the bucket was made (µs): a bucket the server lost and the leader made anew
    starts its sequence again, and its terms must still be newer."""
    term: int = 0
    """The term of this process's leadership (0: it never led)."""
    beat: int = 0
    _newest: tuple[int, int, int] = (0, 0, 0)
    """The newest valid record of another leader seen, and when (our own clock)."""
    _changed_at: float | None = None
    _holder: LeaderRecord = field(default_factory=dict)
    """The record of the other leader last seen advancing."""
    _doubted_at: float | None = None
    """Since when the key has held no valid record (a forgery, a deletion) while no other
    leader's record was seen advancing."""

    def _encoded(self) -> bytes:
        self.beat += 1
        record = {**self.value, "epoch": self.epoch, "term": self.term, "beat": self.beat}
        return encode_json(self.seal.sign(record) if self.seal else record)

    async def _next_term(self) -> tuple[int, int]:
        info = (await self.kv.status()).stream_info
        created = info.created
        epoch = int(created.timestamp() * 1_000_000) if created is not None else 0
        return epoch, int(info.state.last_seq or 0) + 1  # never 0: "never led"

    async def acquire(self, takeover: Takeover | None = None) -> LeaderRecord | None:
        """Take the key: ``None`` once held, else the record of the leader that holds it."""
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        held = (self.epoch, self.term) if self.term else None
        for _ in range(3):
            deleted = False
            try:
                entry: Any = await self.kv.get(self.key)
            except KeyNotFoundError as exc:
                entry, deleted = None, exc.entry is not None
            holder, last = self._judge(entry, deleted, held, takeover)
            if holder is not None:
                return holder
            (self.epoch, self.term), self.beat = await self._next_term(), 0
            try:
                if last is None:
                    self.revision = await self.kv.create(self.key, self._encoded())
                else:
                    self.revision = await self.kv.update(self.key, self._encoded(), last=last)
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                self.epoch, self.term = held or (0, 0)
                continue
            self._newest, self._changed_at, self._doubted_at = (0, 0, 0), None, None
            return None
        return {}

    def _judge(
        self,
        entry: Any,
        deleted: bool,
        held: tuple[int, int] | None,
        takeover: Takeover | None,
    ) -> Verdict:
        """``(holder, None)``: refused, held by ``holder``; ``(None, last)``: take the key,
        over revision ``last`` (``None``: create it)."""
        now = time.monotonic()
        record = decode_json(entry.value or b"") if entry is not None else {}
        if entry is None and not (deleted and self._signed()):
            return None, None  # lapsed, never written (or, unsigned, deleted)
        if entry is None or not self._valid(record):
            return self._judge_invalid(entry, held, now)
        self._doubted_at = None
        if self._ours(record) or self._given(record, takeover):
            return None, entry.revision
        return self._judge_other(record, entry.revision, held, now)

    def _ours(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` is this process's (from before a reconnection, or replayed)."""
        return bool(record.get("incarnation") == self.value.get("incarnation"))

    @staticmethod
    def _given(record: LeaderRecord, takeover: Takeover | None) -> bool:
        """Whether the caller's ``takeover`` rule hands it the key held by ``record``."""
        return takeover is not None and takeover(record)

    def _signed(self) -> bool:
        return self.seal is not None and self.seal.key is not None

    def _valid(self, record: Mapping[str, Any]) -> bool:
        return self.seal is None or self.seal.check(record)

    def _judge_invalid(self, entry: Any, held: tuple[int, int] | None, now: float) -> Verdict:
        """A deletion or a record without a valid signature: taken over once doubted for
        the expiry (at once when we led), else the last holder seen advancing stands."""
        log.warning(
            "leadership record without a valid signature ignored",
            deleted=entry is None,
            revision=getattr(entry, "revision", None),
        )
        alive = self._changed_at is not None and now - self._changed_at < self.patience
        if held is not None or (
            self._doubted_at is not None and now - self._doubted_at >= self.patience
        ):
            return None, entry.revision if entry is not None else None
        if self._doubted_at is None:
            self._doubted_at = now
        return (self._last_holder() if alive else {}), None

    def _judge_other(
        self,
        record: LeaderRecord,
        revision: int,
        held: tuple[int, int] | None,
        now: float,
    ) -> Verdict:
        """Another leader's valid record: overwritten when older than our own term, taken
        when it left or stopped advancing for the expiry, else obeyed."""
        epoch, term, _ = rank(record)
        if held is not None and (epoch, term) < held:
            log.warning("replayed leadership record overwritten", term=term, ours=held[1])
            return None, revision
        if rank(record) > self._newest:
            self._newest, self._changed_at, self._holder = rank(record), now, record
            if record.get("leaving"):
                return None, revision  # it gave the key up
        elif self._changed_at is None:
            self._changed_at, self._holder = now, record
        if now - self._changed_at >= self.patience:
            log.warning("leadership record unchanged for the expiry; taking the key", term=term)
            return None, revision
        return record, None

    def _last_holder(self) -> LeaderRecord:
        return self._holder

    async def release(self) -> None:
        """Give the key up with a signed ``leaving`` record (a deletion is not obeyed when
        records are signed); it lapses with the expiry. Errors are ignored."""
        if self.revision is None:
            return
        revision, self.revision = self.revision, None
        self.value = {**self.value, "leaving": True}
        try:
            await self.kv.update(self.key, self._encoded(), last=revision)
        except Exception:
            return


class LeaderWatch(Presence):
    """A node's view of the ``leader`` key: only signed, newer records are obeyed; a signed
    ``leaving`` record is the leader's goodbye (a deletion, too, when records are unsigned)."""

    def __init__(
        self,
        kv: Any,
        expiry: float,
        seal: LeaderSeal,
        on_join: Callable[[Member], None],
        on_leave: Callable[[Member, str], None],
    ) -> None:
        super().__init__(kv, LEADER_KEY, expiry, on_join, on_leave)
        self.seal = seal
        self.newest = (0, 0, 0)
        """The (epoch, term, beat) of the newest record obeyed."""

    def admits(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` (read from the key) may be obeyed: signed, and not older than
        the newest obeyed."""
        return self.seal.check(record) and rank(record) >= self.newest

    def _entry(self, entry: Any) -> None:
        if entry.operation in ("DEL", "PURGE"):
            if self.seal.key is None:
                super()._entry(entry)
            else:
                self.log.warning("leader key deleted without a signed record; ignored")
            return
        record = decode_json(entry.value or b"")
        if not self.seal.check(record):
            self.log.warning("leadership record without a valid signature ignored")
            return
        if rank(record) <= self.newest:
            if rank(record) < self.newest:
                self.log.warning("replayed leadership record ignored", term=rank(record)[1])
            return
        self.newest = rank(record)
        if record.get("leaving"):
            super()._entry(SimpleNamespace(key=entry.key, operation="DEL", value=None))
            return
        super()._entry(entry)
