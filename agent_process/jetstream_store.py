"""Conversations and instance records in NATS JetStream, so an agent can move between hosts.

A cluster node starts its agents with ``AgentPlan.cluster_storage`` set; they then keep every
conversation here instead of in ``base.jsonl`` + ``events.jsonl``, and mirror their record
files (``metadata.json``, ``pending.json``, ``approvals/*.json``) here too. An agent started on
another node after its host was lost finds all of it. Workspaces stay on the node's disk: they
are the agent's scratch and may be lost with it.

Layout (``<c>`` the cluster, ``<a>`` the agent, ``<i>`` the instance directory, each as one
token, see :func:`name_token`)::

    stream  goondan_<c>_conv_<a>      subjects goondan.<c>.conv.<a>.*, file storage
            goondan.<c>.conv.<a>.<i>  one message per message event: the events.jsonl line
                                      plus "head", the base revision its writer had loaded
    KV      goondan_<c>_state         history 1, file storage
            <a>.<i>.base              the base: {"v", "epoch", "foldedSeq", "streamSeq",
                                       "snapshotSeq", "snapshot": {"key": K} | {"object": N}}
            <a>.<i>.snap.<token>      a snapshot: the messages, as one JSON list
            <a>.<i>.r.<path>          a record file: "<path under instances/>\n<its bytes>"
    objects goondan_<c>_bases         snapshots, events and records larger than a message

The conversation is ``snapshot + the events after snapshotSeq``: those up to ``streamSeq``
are folded (the base's appended segments), later ones are the events of a Turn not folded yet.

Why this shape, and how it keeps the guarantees of the local files:

* **Events are a stream**, because a stream is what an append-only log is: ordered, each
  message numbered by the server, acknowledged only once stored (replicated, with
  ``replicas`` > 1). One subject per instance lets a load read just that instance's events
  (``next_by_subj`` from the snapshot) and a new snapshot purge just those; one stream per
  agent keeps each agent's data apart (deleting or re-sizing one touches no other).
* **An event is appended once.** Each publish carries ``Nats-Expected-Last-Subject-Sequence``
  (the subject's last sequence this writer knows), so two writers cannot both append after
  the same event, and ``Nats-Msg-Id`` (``<epoch>:<writer>:<seq>``), so a publish retried after
  a lost acknowledgement is stored once (the server's duplicate window); a retry refused
  because the first attempt did land is recognised by its id.
* **The base is one small KV value**, because a fold must change it atomically, and only if
  nobody else did meanwhile: ``update(last=revision)`` is a compare-and-set, so of two writers
  folding from the same base exactly one wins; the other gets ``E_STORAGE`` and its events
  stay where they are. A Turn that only appended folds by moving ``foldedSeq``/``streamSeq``
  past its events (as the local base appends a segment: a fold costs what the Turn added);
  any other Turn, or more than :data:`SNAPSHOT_AFTER_EVENTS` folded events, writes a new
  snapshot under a fresh name first (in the object store when larger than a message), so
  switching to it is still that one compare-and-set.
* **Reading is snapshot + events after it.** An unfolded event whose ``head`` is not the
  base's revision came from a writer that had lost the instance: it is skipped with a
  warning, and the next fold writes a snapshot past it.
* **Records are KV values** (the latest copy is all that matters); they are written through
  (the local file first, then the copy) and brought back at boot
  (:meth:`JetStreamStorage.restore`), when the copies replace whatever local files an earlier
  stay on this host left.

Calls are made on a thread of this module's own with its own event loop; the agent's loop
waits for each (at most :data:`STORE_TIMEOUT_SECONDS`), as it waits for a file write.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agent_process.conversation import (
    FORMAT_VERSION,
    ConversationStorageError,
    ConversationStore,
    ConversationUnreadable,
    apply_events,
)
from agent_process.jetstream_link import (
    STORE_TIMEOUT_SECONDS,
    ClusterStorageError,
    StoreLoop,
    StoreNames,
    as_int,
    connect_store,
    decode_object,
    drop_object,
    get_entry,
    live_keys,
    name_token,
)
from bundle.plan import ClusterStoragePlan
from goondan.files import write_atomic
from goondan.urls import redact_url
from tools_base import JsonObject, Message, MessageEvent

__all__ = [
    "INLINE_VALUE_BYTES",
    "SNAPSHOT_AFTER_EVENTS",
    "ClusterStorageError",
    "JetStreamConversation",
    "JetStreamStorage",
    "name_token",
]

INLINE_VALUE_BYTES = 256 * 1024
"""A snapshot, event or record up to this size (and the server's ``max_payload``) is stored
as it is; a larger one goes to the object store."""
SNAPSHOT_AFTER_EVENTS = 256
"""Folded events kept after the snapshot as appended segments (a load reads each) before a
fold writes a new snapshot."""
BASE_KEY = "base"
OBJECT_MARK = b"\x00object:"
"""Starts a record's KV value body that is in the object store (no JSON file starts so)."""
RECORDS = "r"
_RECORD_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=-]*(/[A-Za-z0-9_][A-Za-z0-9_.=-]*)*$")

_log = structlog.get_logger("goondan.conversation")
T = TypeVar("T")


class JetStreamStorage:
    """One agent's conversations and records in the cluster's JetStream (see the module
    docstring); also its :class:`~agent_process.storage.RecordMirror`."""

    def __init__(
        self,
        loop: StoreLoop,
        nc: Any,
        names: StoreNames,
        stores: tuple[Any, Any],
        where: str,
        instances_root: Path,
    ) -> None:
        self._loop = loop
        self._nc = nc
        self.js: Any = nc.jetstream()
        self.names = names
        self.kv, self.objects = stores
        self.where = where
        """The server and stream, safe to show."""
        self.instances_root = instances_root
        """The agent's ``instances/`` directory: record files are the files under it."""

    @classmethod
    def open(cls, plan: ClusterStoragePlan, agent: str, instances_root: Path) -> JetStreamStorage:
        """Connect and make sure the agent's stream and the cluster's buckets exist; record
        files are those under ``instances_root``. Raises :class:`ClusterStorageError` (the URL
        shown redacted)."""
        names = StoreNames(plan.cluster, agent)
        where = f"{redact_url(plan.url)} stream {names.stream}"
        loop = StoreLoop()
        try:
            nc, kv, objects = loop.run(connect_store(plan, names, agent), where)
        except ClusterStorageError:
            loop.stop()
            raise
        except Exception as exc:
            loop.stop()
            reason = redact_url(str(exc) or type(exc).__name__)
            raise ClusterStorageError(where, reason) from None
        return cls(loop, nc, names, (kv, objects), where, instances_root)

    @property
    def records(self) -> JetStreamStorage:
        """Record files are mirrored by this storage itself."""
        return self

    @property
    def value_limit(self) -> int:
        """The largest event, base or record stored inline: under the server's
        ``max_payload`` (with room for headers) and :data:`INLINE_VALUE_BYTES`; a larger one
        goes to the object store and what is stored inline names it."""
        return max(4096, min(INLINE_VALUE_BYTES, int(self._nc.max_payload) - 8192))

    async def put_object(self, name: str, data: bytes) -> None:
        """Store ``data`` as object ``name`` in chunks that each fit in a message."""
        from nats.js.api import ObjectMeta, ObjectMetaOptions

        options = ObjectMetaOptions(max_chunk_size=self.value_limit)
        await self.objects.put(name, data, meta=ObjectMeta(name=name, options=options))

    def object_name(self, instance: str, *rest: str) -> str:
        """A name in the object store for a large value of ``instance``."""
        return "/".join((self.names.agent, instance, *rest))

    def run(self, work: Callable[[], Awaitable[T]], where: str) -> T:
        """Run ``work()`` on the storage's loop and wait for it; any failure becomes a
        :class:`ClusterStorageError` naming ``where``."""

        async def call() -> T:
            return await work()

        try:
            return self._loop.run(call(), where)
        except ConversationStorageError:
            raise
        except Exception as exc:
            raise ClusterStorageError(where, redact_url(str(exc) or type(exc).__name__)) from None

    def conversation(self, directory: Path) -> ConversationStore:
        """The conversation of the instance in ``directory`` (its name identifies it)."""
        return JetStreamConversation(self, directory)

    # -- records ---------------------------------------------------------------------------

    def _record_key(self, path: Path) -> tuple[str, str] | None:
        """``(KV key, path under instances/)`` of a record file, ``None`` for another file."""
        with contextlib.suppress(ValueError):
            relative = path.relative_to(self.instances_root).as_posix()
            instance, _, rest = relative.partition("/")
            if rest and _RECORD_PATH.match(rest):
                return self.names.key(name_token(instance), RECORDS, rest), relative
        _log.warning("record not mirrored: unexpected path", file=str(path))
        return None

    def written(self, path: Path, data: bytes) -> None:
        """Copy the record file ``path`` (which now holds ``data``) to the bucket."""
        found = self._record_key(path)
        if found is not None:
            key, relative = found
            instance, _, rest = relative.partition("/")
            stash = self.object_name(name_token(instance), RECORDS, rest)

            async def put() -> None:
                value = relative.encode() + b"\n" + data
                if len(value) > self.value_limit:  # a record bigger than a message may be
                    await self.put_object(stash, data)
                    value = relative.encode() + b"\n" + OBJECT_MARK + stash.encode()
                await self.kv.put(key, value)

            self.run(put, f"{self.where} key {key}")

    def removed(self, path: Path) -> None:
        """Delete the bucket's copy of the record file ``path``."""
        found = self._record_key(path)
        if found is not None:
            key = found[0]

            async def delete() -> None:
                entry = await get_entry(self.kv, key)
                await self.kv.delete(key)
                if entry is not None:
                    await drop_object(self.objects, _stashed(bytes(entry.value or b"")))

            self.run(delete, f"{self.where} key {key}")

    def instance_removed(self, directory: Path) -> None:
        """Delete everything of the instance in ``directory``: events, base, records."""
        instance = name_token(directory.name)
        where = f"{self.where} instance {instance}"

        async def remove() -> None:
            await self.js.purge_stream(self.names.stream, subject=self.names.subject(instance))
            # The base first: a load from now on starts afresh, whatever is left below.
            for key in [
                self.names.key(instance, BASE_KEY),
                *await live_keys(self.kv, self.names.key(instance, ">")),
            ]:
                with contextlib.suppress(Exception):  # gone already
                    await self.kv.delete(key)
            prefix = self.object_name(instance, "")
            with contextlib.suppress(Exception):  # none yet (the store is empty), say
                for info in await self.objects.list(ignore_deletes=True):
                    if info.name.startswith(prefix):
                        await drop_object(self.objects, info.name)

        self.run(remove, where)

    def restore(self, instances_root: Path) -> None:
        """Make the record files under ``instances_root`` exactly the bucket's copies: write
        each, and delete those the bucket lacks (left by an earlier stay on this host).
        Conversations need nothing: they are read from JetStream when loaded."""

        async def fetch() -> list[bytes]:
            values = []
            for key in await live_keys(self.kv, self.names.key("*", RECORDS, ">")):
                entry = await get_entry(self.kv, key)
                if entry is None or not entry.value:
                    continue
                value = bytes(entry.value)
                stash = _stashed(value)
                if stash is not None:
                    body = (await self.objects.get(stash)).data
                    value = value.partition(b"\n")[0] + b"\n" + bytes(body)
                values.append(value)
            return values

        kept: set[Path] = set()
        for value in self.run(fetch, self.where):
            relative, _, data = value.partition(b"\n")
            name = relative.decode(errors="replace")
            instance, _, rest = name.partition("/")
            if instance in ("", ".", "..") or not rest or not _RECORD_PATH.match(rest):
                _log.warning("record copy skipped: unexpected path", path=name)
                continue
            path = instances_root / instance / rest
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_atomic(path, data)
            except OSError as exc:
                raise ConversationStorageError(path, exc) from exc
            kept.add(path)
        for stale in _local_records(instances_root) - kept:
            with contextlib.suppress(OSError):
                stale.unlink()

    def close(self) -> None:
        """Close the connection and stop the thread."""
        with contextlib.suppress(Exception):
            self._loop.run(self._nc.close(), self.where)
        self._loop.stop()


def _stashed(value: bytes) -> str | None:
    """The object a record's KV value names, if its body is in the object store."""
    body = value.partition(b"\n")[2]
    if body.startswith(OBJECT_MARK):
        return body[len(OBJECT_MARK) :].decode(errors="replace")
    return None


def _local_records(root: Path) -> set[Path]:
    """Record files under ``root`` (an agent's ``instances/``)."""
    found: set[Path] = set()
    with contextlib.suppress(OSError):
        for instance in root.iterdir():
            if not instance.is_dir():
                continue
            for name in ("metadata.json", "pending.json"):
                if (instance / name).is_file():
                    found.add(instance / name)
            with contextlib.suppress(OSError):
                found.update(p for p in (instance / "approvals").glob("*.json") if p.is_file())
    return found


class JetStreamConversation(ConversationStore):
    """One instance's conversation in JetStream, with the in-memory fold of
    :class:`ConversationStore` (only ``load``, ``emit``, ``sync``, ``fold`` and ``close``
    differ)."""

    def __init__(self, storage: JetStreamStorage, directory: Path) -> None:
        super().__init__(directory / "conversation", fsync=False)
        self._storage = storage
        self._instance = name_token(directory.name)
        self._subject = storage.names.subject(self._instance)
        self._key = storage.names.key(self._instance, BASE_KEY)
        self._where = f"{storage.where} instance {self._instance}"
        self._revision = 0
        """The KV revision of the base this writer loaded (or folded last)."""
        self._epoch = ""
        self._snapshot: JsonObject = {}
        """Where the snapshot is: ``{"key": K}`` or ``{"object": NAME}`` (``{}``: empty)."""
        self._snapshot_seq = 0
        """The stream sequence the snapshot covers events up to."""
        self._tail = 0
        """Folded events after the snapshot (appended segments, read on load)."""
        self._appendable = False
        """Whether the next all-append fold may just move the base's marks (no stale event
        was skipped since the snapshot)."""
        self._last_stream_seq = 0
        """The subject's last stream sequence this writer knows (its next append expects it)."""
        self._writer = secrets.token_hex(4)
        self._event_objects: list[str] = []
        """Object names of the events since the snapshot too large for a message."""

    def load(self) -> list[Message]:
        """Read the snapshot and the events after it. Raises :class:`ConversationUnreadable`
        for a base of a newer format, :class:`ClusterStorageError` when JetStream cannot
        answer."""
        self._writer = secrets.token_hex(4)  # a fresh writer: its ids never meet old ones
        self._event_objects = []
        head, revision, snapshot, events = self._storage.run(self._read, self._where)
        version = head.get("v", 1)
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise ConversationUnreadable(
                f"{self._where}: conversation format {version} is newer than this runtime's "
                f"({FORMAT_VERSION}); upgrade goondan"
            )
        self._revision = revision
        self._epoch = str(head.get("epoch", ""))
        ref = head.get("snapshot")
        self._snapshot = ref if isinstance(ref, dict) else {}
        self._folded_seq = as_int(head.get("foldedSeq"))
        folded_stream_seq = as_int(head.get("streamSeq"))
        self._snapshot_seq = as_int(head.get("snapshotSeq"))
        self._appendable = bool(revision)
        tail: list[MessageEvent] = []
        self._events = []
        last_seq = self._folded_seq
        for stream_seq, data in events:
            seq = data.get("seq")
            folded = stream_seq <= folded_stream_seq
            if not isinstance(seq, int) or (not folded and seq <= self._folded_seq):
                continue
            if not folded and data.get("head") != revision:
                _log.warning(
                    "skipping an event of a writer that lost the conversation",
                    where=self._where,
                    seq=seq,
                )
                self._appendable = False  # the next fold writes a snapshot past it
                continue
            try:
                event = MessageEvent.from_json(data)
            except (ValueError, KeyError) as exc:
                _log.warning("skipping malformed message event", where=self._where, error=str(exc))
                self._appendable = False
                continue
            (tail if folded else self._events).append(event)
            if not folded:
                last_seq = max(last_seq, seq)
        self._tail = len(tail)
        self._next_seq = last_seq + 1
        self._base = apply_events(snapshot, tail)
        self._messages = apply_events(self._base, self._events)
        self._recount_calls()
        return self.messages

    async def _read(self) -> tuple[JsonObject, int, list[Message], list[tuple[int, JsonObject]]]:
        """The base (created empty if there is none), its revision, the snapshot's messages,
        and the events on the subject after the snapshot, with their stream sequences."""
        from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

        storage = self._storage
        entry = await get_entry(storage.kv, self._key)
        if entry is None:
            empty = {"v": FORMAT_VERSION, "epoch": secrets.token_hex(8), "foldedSeq": 0}
            with contextlib.suppress(KeyWrongLastSequenceError):  # another writer made it
                await storage.kv.create(self._key, json.dumps(empty).encode())
            entry = await storage.kv.get(self._key)
        head = decode_object(entry.value)
        ref = head.get("snapshot")
        body = b"[]"
        if isinstance(ref, dict) and isinstance(ref.get("object"), str):
            body = bytes((await storage.objects.get(ref["object"])).data)
        elif isinstance(ref, dict) and isinstance(ref.get("key"), str):
            body = bytes((await storage.kv.get(ref["key"])).value or b"[]")
        lines = json.loads(body)
        snapshot = [Message.from_json(m) for m in lines if isinstance(m, dict)]
        events: list[tuple[int, JsonObject]] = []
        self._last_stream_seq = 0
        try:
            last = await storage.js.get_last_msg(storage.names.stream, self._subject)
            self._last_stream_seq = last.seq or 0
        except NotFoundError:
            return head, entry.revision, snapshot, events
        start = as_int(head.get("snapshotSeq")) + 1
        while start <= self._last_stream_seq:
            try:
                msg = await storage.js.get_msg(
                    storage.names.stream, seq=start, subject=self._subject, next=True
                )
            except NotFoundError:
                break
            data = decode_object(msg.data)
            stash = data.get("object")
            if isinstance(stash, str):  # an event larger than a message: its body is there
                self._event_objects.append(stash)
                data = decode_object(bytes((await storage.objects.get(stash)).data))
            if data:
                events.append((msg.seq, data))
            start = msg.seq + 1
        return head, entry.revision, snapshot, events

    def close(self) -> None:
        """Nothing is held open per conversation."""

    def emit(self, event: MessageEvent) -> None:
        """Apply ``event`` once JetStream has stored it; raises :class:`ClusterStorageError`
        (the event not applied) when it refuses or does not answer."""
        seq = self._next_seq
        record = {"v": FORMAT_VERSION, **event.to_json(seq), "head": self._revision}
        payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
        msg_id = f"{self._epoch}:{self._writer}:{seq}"
        stash: str | None = None
        if len(payload) > self._storage.value_limit:
            stash = self._storage.object_name(
                self._instance, "e", f"{self._epoch}-{self._writer}-{seq}"
            )
        self._last_stream_seq = self._storage.run(
            lambda: self._publish(payload, msg_id, stash), self._where
        )
        if stash is not None:
            self._event_objects.append(stash)
        self._next_seq += 1
        self._events.append(event)
        self._apply(event)

    async def _publish(self, payload: bytes, msg_id: str, stash: str | None = None) -> int:
        """Append once: expected last sequence and message id; one retry after a lost
        acknowledgement, which the id makes harmless. With ``stash``, the event goes to the
        object store under that name first and the message only names it."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import APIError, NotFoundError

        storage = self._storage
        if stash is not None:
            await storage.put_object(stash, payload)
            pointer = {"v": FORMAT_VERSION, "object": stash}
            payload = json.dumps(pointer, separators=(",", ":")).encode()
        headers = {
            "Nats-Msg-Id": msg_id,
            "Nats-Expected-Last-Subject-Sequence": str(self._last_stream_seq),
        }
        for attempt in (1, 2):
            try:
                ack = await storage.js.publish(
                    self._subject, payload, headers=headers, timeout=STORE_TIMEOUT_SECONDS / 3
                )
                return int(ack.seq)
            except NatsTimeout:
                if attempt == 2:
                    raise
            except APIError as exc:
                if exc.err_code not in (10071, 10164):  # wrong last sequence
                    raise
                # A first attempt that landed makes the retry look like a second writer.
                with contextlib.suppress(NotFoundError):
                    last = await storage.js.get_last_msg(storage.names.stream, self._subject)
                    if (last.headers or {}).get("Nats-Msg-Id") == msg_id:
                        return int(last.seq)
                raise ClusterStorageError(
                    self._where,
                    "another writer appended to this conversation (it runs elsewhere now)",
                ) from None
        raise AssertionError("unreachable")

    def sync(self) -> None:
        """Nothing to force: an event is emitted only once JetStream has stored it."""

    def fold(self) -> None:
        """Fold the Turn's events into the base, if nobody else changed the base meanwhile (a
        compare-and-set on its revision). A Turn that only appended moves the base's marks
        past its events, which stay in the stream as a segment of the base (its cost is what
        the Turn added); any other Turn, or a tail past :data:`SNAPSHOT_AFTER_EVENTS`, writes
        a new snapshot. Raises :class:`ClusterStorageError` when refused, or when JetStream
        does not answer: the events stay, and the next fold tries again."""
        if not self._events and self._revision:
            return
        folded_seq = self._next_seq - 1
        head: JsonObject = {
            "v": FORMAT_VERSION,
            "epoch": self._epoch,
            "foldedSeq": folded_seq,
            "streamSeq": self._last_stream_seq,
        }
        appended = (
            self._appendable
            and all(e.type == "append" for e in self._events)
            and self._tail + len(self._events) <= SNAPSHOT_AFTER_EVENTS
        )
        body = b""
        if appended:
            head["snapshot"], head["snapshotSeq"] = self._snapshot, self._snapshot_seq
        else:
            messages = [m.to_json() for m in self._messages]
            body = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()
            where = "object" if len(body) > self._storage.value_limit else "key"
            token = secrets.token_hex(8)
            head["snapshot"] = {
                where: self._storage.object_name(self._instance, "snap", token)
                if where == "object"
                else self._storage.names.key(self._instance, "snap", token)
            }
            head["snapshotSeq"] = self._last_stream_seq
        self._revision = self._storage.run(lambda: self._replace(head, body), self._where)
        self._tail = self._tail + len(self._events) if appended else 0
        self._appendable = True
        self._base = list(self._messages)
        self._events = []
        self._folded_seq = folded_seq
        if not appended:
            try:  # events before the snapshot are never read again
                self._storage.run(self._purge, self._where)
            except ConversationStorageError as exc:  # loads skip them anyway
                _log.warning("folded events not purged", where=self._where, error=str(exc))

    async def _replace(self, head: JsonObject, body: bytes) -> int:
        """Write the new snapshot (if any) under a fresh name, then compare-and-set the base;
        the loser's snapshot is removed, and so is the winner's old one."""
        from nats.js.errors import KeyWrongLastSequenceError

        storage = self._storage
        snapshot = head["snapshot"]
        assert isinstance(snapshot, dict)
        fresh = snapshot is not self._snapshot
        if fresh:
            await _put_snapshot(storage, snapshot, body)
        try:
            revision = int(
                await storage.kv.update(self._key, json.dumps(head).encode(), last=self._revision)
            )
        except KeyWrongLastSequenceError:
            if fresh:
                await _drop_snapshot(storage, snapshot)
            raise ClusterStorageError(
                self._where,
                "the conversation's base was replaced by another writer (it runs elsewhere now)",
            ) from None
        if fresh:
            await _drop_snapshot(storage, self._snapshot)
            self._snapshot, self._snapshot_seq = snapshot, as_int(head["snapshotSeq"])
            for folded in self._event_objects:  # the snapshot holds those events now
                await drop_object(storage.objects, folded)
            self._event_objects = []
        return revision

    async def _purge(self) -> None:
        # Keeping the newest message keeps the subject's last sequence, which the next append
        # expects; the snapshot covers it, so loads skip it.
        storage = self._storage
        await storage.js.purge_stream(storage.names.stream, subject=self._subject, keep=1)


async def _put_snapshot(storage: JetStreamStorage, where: JsonObject, body: bytes) -> None:
    if isinstance(where.get("object"), str):
        await storage.put_object(str(where["object"]), body)
    elif isinstance(where.get("key"), str):
        await storage.kv.put(str(where["key"]), body)


async def _drop_snapshot(storage: JetStreamStorage, where: JsonObject) -> None:
    with contextlib.suppress(Exception):  # an orphan only costs space
        if isinstance(where.get("object"), str):
            await drop_object(storage.objects, where["object"])
        elif isinstance(where.get("key"), str):
            await storage.kv.delete(str(where["key"]))
