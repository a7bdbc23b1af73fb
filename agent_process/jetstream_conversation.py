"""One instance's conversation in JetStream: a snapshot, the events after it on the
instance's subject, and the base (one KV value) a fold compare-and-sets. The layout and why it
keeps the guarantees of the local files: :mod:`agent_process.jetstream_store`."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import structlog

from agent_process.conversation import (
    FORMAT_VERSION,
    ConversationStorageError,
    ConversationStore,
    ConversationUnreadable,
    apply_events,
)
from agent_process.jetstream_link import (
    ClusterStorageError,
    StoreNames,
    as_int,
    decode_object,
    drop_object,
    name_token,
)
from goondan.jetstream_kv import STORE_TIMEOUT_SECONDS, get_entry
from tools_base import JsonObject, Message, MessageEvent

SNAPSHOT_AFTER_EVENTS = 256
"""Folded events kept after the snapshot as appended segments (a load reads each) before a
fold writes a new snapshot."""
BASE_KEY = "base"

_log = structlog.get_logger("goondan.conversation")
T = TypeVar("T")


class ConversationBackend(Protocol):
    """What a conversation uses of its agent's storage
    (:class:`agent_process.jetstream_store.JetStreamStorage`)."""

    names: StoreNames
    where: str
    js: Any
    kv: Any
    objects: Any

    @property
    def value_limit(self) -> int:
        """The largest value stored inline."""
        ...

    async def put_object(self, name: str, data: bytes) -> None:
        """Store ``data`` as object ``name``."""
        ...

    def object_name(self, instance: str, *rest: str) -> str:
        """A name in the object store for a large value of ``instance``."""
        ...

    def run(self, work: Callable[[], Awaitable[T]], where: str) -> T:
        """Run ``work()`` on the storage's loop and wait for it."""
        ...


class JetStreamConversation(ConversationStore):
    """One instance's conversation in JetStream, with the in-memory fold of
    :class:`ConversationStore` (only ``load``, ``emit``, ``sync``, ``fold`` and ``close``
    differ)."""

    def __init__(self, storage: ConversationBackend, directory: Path) -> None:
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

    def load(self, *, new: bool = False) -> list[Message]:
        """Read the snapshot and the events after it (``new`` says nothing here: a
        conversation in JetStream outlives the node's directory). Raises
        :class:`ConversationUnreadable` for a base of a newer format,
        :class:`ClusterStorageError` when JetStream cannot answer."""
        self._writer = secrets.token_hex(4)  # a fresh writer: its ids never meet old ones
        self._event_objects = []
        head, revision, snapshot, events = self._storage.run(self._read, self._where)
        self._adopt(head, revision)
        tail, last_seq = self._sort(events, as_int(head.get("streamSeq")))
        self._tail = len(tail)
        self._next_seq = last_seq + 1
        self._base = apply_events(snapshot, tail)
        self._messages = apply_events(self._base, self._events)
        self._recount_calls()
        return self.messages

    def _adopt(self, head: JsonObject, revision: int) -> None:
        """Take the base ``head`` (at KV ``revision``) as this writer's own."""
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
        self._snapshot_seq = as_int(head.get("snapshotSeq"))
        self._appendable = bool(revision)

    def _sort(
        self, events: list[tuple[int, JsonObject]], folded_stream_seq: int
    ) -> tuple[list[MessageEvent], int]:
        """The events up to ``folded_stream_seq`` (the base's appended segments), returned with
        the last sequence read; the later ones become the unfolded ``_events``."""
        tail: list[MessageEvent] = []
        self._events = []
        last_seq = self._folded_seq
        for stream_seq, data in events:
            folded = stream_seq <= folded_stream_seq
            event = self._event(data, folded=folded)
            if event is None:
                continue
            (tail if folded else self._events).append(event)
            seq = data.get("seq")
            if not folded and isinstance(seq, int):  # always an int once the event is read
                last_seq = max(last_seq, seq)
        return tail, last_seq

    def _event(self, data: JsonObject, *, folded: bool) -> MessageEvent | None:
        """The event ``data`` holds; ``None`` for one to skip: already folded, of a writer
        that lost the conversation, or malformed (the next fold then writes a snapshot past
        the last two)."""
        seq = data.get("seq")
        if not isinstance(seq, int) or (not folded and seq <= self._folded_seq):
            return None
        if not folded and data.get("head") != self._revision:
            _log.warning(
                "skipping an event of a writer that lost the conversation",
                where=self._where,
                seq=seq,
            )
            self._appendable = False
            return None
        try:
            return MessageEvent.from_json(data)
        except (ValueError, KeyError) as exc:
            _log.warning("skipping malformed message event", where=self._where, error=str(exc))
            self._appendable = False
            return None

    async def _read(self) -> tuple[JsonObject, int, list[Message], list[tuple[int, JsonObject]]]:
        """The base (created empty if there is none), its revision, the snapshot's messages,
        and the events on the subject after the snapshot, with their stream sequences."""
        from nats.js.errors import NotFoundError

        storage = self._storage
        entry = await self._base_entry()
        head = decode_object(entry.value)
        snapshot = await self._read_snapshot(head.get("snapshot"))
        self._last_stream_seq = 0
        try:
            last = await storage.js.get_last_msg(storage.names.stream, self._subject)
            self._last_stream_seq = last.seq or 0
        except NotFoundError:
            return head, entry.revision, snapshot, []
        events = await self._read_events(as_int(head.get("snapshotSeq")) + 1)
        return head, entry.revision, snapshot, events

    async def _base_entry(self) -> Any:
        """The base's KV entry, created empty if there is none."""
        from nats.js.errors import KeyWrongLastSequenceError

        kv = self._storage.kv
        entry = await get_entry(kv, self._key)
        if entry is not None:
            return entry
        empty = {"v": FORMAT_VERSION, "epoch": secrets.token_hex(8), "foldedSeq": 0}
        with contextlib.suppress(KeyWrongLastSequenceError):  # another writer made it
            await kv.create(self._key, json.dumps(empty).encode())
        return await kv.get(self._key)

    async def _read_snapshot(self, ref: Any) -> list[Message]:
        """The messages of the snapshot ``ref`` names (none when it names nothing)."""
        body = b"[]"
        if isinstance(ref, dict) and isinstance(ref.get("object"), str):
            body = bytes((await self._storage.objects.get(ref["object"])).data)
        elif isinstance(ref, dict) and isinstance(ref.get("key"), str):
            body = bytes((await self._storage.kv.get(ref["key"])).value or b"[]")
        return [Message.from_json(m) for m in json.loads(body) if isinstance(m, dict)]

    async def _read_events(self, start: int) -> list[tuple[int, JsonObject]]:
        """The events on the subject from stream sequence ``start`` to the last one known."""
        from nats.js.errors import NotFoundError

        storage = self._storage
        events: list[tuple[int, JsonObject]] = []
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
        return events

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
        appended = self._only_appended()
        head, body = self._next_head(folded_seq, appended=appended)
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

    def _only_appended(self) -> bool:
        """Whether this fold may just move the base's marks past the Turn's events."""
        return (
            self._appendable
            and all(e.type == "append" for e in self._events)
            and self._tail + len(self._events) <= SNAPSHOT_AFTER_EVENTS
        )

    def _next_head(self, folded_seq: int, *, appended: bool) -> tuple[JsonObject, bytes]:
        """The base after this fold, and the new snapshot's body (empty when ``appended``:
        the snapshot stays and the events become segments of the base)."""
        head: JsonObject = {
            "v": FORMAT_VERSION,
            "epoch": self._epoch,
            "foldedSeq": folded_seq,
            "streamSeq": self._last_stream_seq,
        }
        if appended:
            head["snapshot"], head["snapshotSeq"] = self._snapshot, self._snapshot_seq
            return head, b""
        messages = [m.to_json() for m in self._messages]
        body = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()
        token = secrets.token_hex(8)
        if len(body) > self._storage.value_limit:
            head["snapshot"] = {"object": self._storage.object_name(self._instance, "snap", token)}
        else:
            head["snapshot"] = {"key": self._storage.names.key(self._instance, "snap", token)}
        head["snapshotSeq"] = self._last_stream_seq
        return head, body

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


async def _put_snapshot(storage: ConversationBackend, where: JsonObject, body: bytes) -> None:
    if isinstance(where.get("object"), str):
        await storage.put_object(str(where["object"]), body)
    elif isinstance(where.get("key"), str):
        await storage.kv.put(str(where["key"]), body)


async def _drop_snapshot(storage: ConversationBackend, where: JsonObject) -> None:
    with contextlib.suppress(Exception):  # an orphan only costs space
        if isinstance(where.get("object"), str):
            await drop_object(storage.objects, where["object"])
        elif isinstance(where.get("key"), str):
            await storage.kv.delete(str(where["key"]))
