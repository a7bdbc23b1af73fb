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
            <a>.<i>.base              {"v", "epoch", "foldedSeq", "streamSeq",
                                       "messages": [...] | "object": NAME}
            <a>.<i>.r.<path>          a record file: "<path under instances/>\\n<its bytes>"
    objects goondan_<c>_bases         bases too large for one KV value (over 256 KiB)

Why this shape, and how it keeps the guarantees of the local files:

* **Events are a stream**, because a stream is what an append-only log is: ordered, each
  message numbered by the server, acknowledged only once stored (replicated, with
  ``replicas`` > 1). One subject per instance lets a load read just that instance's events
  (``next_by_subj`` from the base's ``streamSeq``) and a fold purge just those; one stream per
  agent keeps each agent's data apart (deleting or re-sizing one touches no other).
* **An event is appended once.** Each publish carries ``Nats-Expected-Last-Subject-Sequence``
  (the subject's last sequence this writer knows), so two writers cannot both append after
  the same event, and ``Nats-Msg-Id`` (``<epoch>:<writer>:<seq>``), so a publish retried after
  a lost acknowledgement is stored once (the server's duplicate window); a retry refused
  because the first attempt did land is recognised by its id.
* **The base is a KV value**, because a fold must replace it whole and atomically, and only if
  nobody else did meanwhile: ``update(last=revision)`` is a compare-and-set, so of two writers
  folding from the same base exactly one wins; the other gets ``E_STORAGE`` and its events
  stay where they are. A base larger than a KV value (bounded by the server's
  ``max_payload``) goes to the object store first under a fresh name; the KV value then
  points at it, so the switch is still one compare-and-set.
* **Reading is base + events after it.** ``foldedSeq`` and ``streamSeq`` say which events the
  base holds; later ones are applied in order, and an event whose ``head`` is not the base's
  revision came from a writer that had lost the instance: it is skipped with a warning.
* **Records are KV values** (the latest copy is all that matters, and they are small); they
  are written through (the local file first, then the copy) and brought back at boot
  (:meth:`JetStreamStorage.restore`), when the copies replace whatever local files an earlier
  stay on this host left.

Calls are made on a thread of this module's own with its own event loop; the agent's loop
waits for each (at most :data:`STORE_TIMEOUT_SECONDS`), as it waits for a file write.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import structlog

from agent_process.conversation import (
    FORMAT_VERSION,
    ConversationStorageError,
    ConversationStore,
    ConversationUnreadable,
    apply_events,
)
from bundle.plan import ClusterStoragePlan
from tools_base import JsonObject, Message, MessageEvent

STORE_TIMEOUT_SECONDS = 10.0
"""The longest the agent waits for one storage call (a publish, a fold, a load)."""
FIRST_CONNECT_SECONDS = 5.0
"""How long an agent waits for its first connection before it fails to boot (and backs off)."""
INLINE_BASE_BYTES = 256 * 1024
"""A base up to this size is the KV value itself; a larger one goes to the object store."""
PURGE_AFTER_EVENTS = 64
"""Folded events kept on an instance's subject before a fold purges them (loads skip them
anyway; purging every fold would cost a request per Turn)."""
BASE_KEY = "base"
RECORDS = "r"
USER_ENV = "GOONDAN_NATS_USER"
PASSWORD_ENV = "GOONDAN_NATS_PASSWORD"
TOKEN_ENV = "GOONDAN_NATS_TOKEN"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,96}$")
_RECORD_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=-]*(/[A-Za-z0-9_][A-Za-z0-9_.=-]*)*$")

_log = structlog.get_logger("goondan.conversation")
T = TypeVar("T")


class ClusterStorageError(ConversationStorageError):
    """JetStream refused or did not answer a write; ``code`` is ``E_STORAGE``."""

    def __init__(self, where: str, reason: str) -> None:
        Exception.__init__(self, f"cannot write {where}: {reason}")
        self.path = Path(where)
        self.errno = None


def name_token(name: str) -> str:
    """``name`` (an agent's, an instance directory's) as one token of a subject, a KV key and
    a stream name: itself when made of ``[A-Za-z0-9_-]``, else ``=`` and a digest. Injective:
    no name that stands for itself has a ``=``."""
    if _TOKEN.match(name):
        return name
    return "=" + hashlib.sha256(name.encode()).hexdigest()[:40]


def redact(url: str) -> str:
    """``url`` with any password or token in it shown as ``***``."""
    shown = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if "@" in parts.netloc:
            host = parts.netloc.rsplit("@", 1)[1]
            user = f"{parts.username}:***" if parts.password is not None else "***"
            parts = parts._replace(netloc=f"{user}@{host}")
        shown.append(urlunsplit(parts))
    return ",".join(shown)


class _Names:
    """Stream, bucket, subject and key names of one agent in one cluster."""

    def __init__(self, cluster: str, agent: str) -> None:
        self.agent = name_token(agent)
        self.stream = f"goondan_{cluster}_conv_{self.agent}"
        self.subjects = f"goondan.{cluster}.conv.{self.agent}.*"
        self.bucket = f"goondan_{cluster}_state"
        self.objects = f"goondan_{cluster}_bases"
        self._prefix = f"goondan.{cluster}.conv.{self.agent}"

    def subject(self, instance: str) -> str:
        return f"{self._prefix}.{instance}"

    def key(self, instance: str, *rest: str) -> str:
        return ".".join((self.agent, instance, *rest))


class _Loop:
    """An event loop on a thread of its own, for a synchronous caller to wait on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="jetstream-store", daemon=True
        )
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], where: str) -> T:
        """``work``'s result; raises :class:`ClusterStorageError` for a timeout, and what
        ``work`` raised otherwise."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(STORE_TIMEOUT_SECONDS)
        except TimeoutError:
            future.cancel()
            raise ClusterStorageError(
                where, f"JetStream did not answer within {STORE_TIMEOUT_SECONDS:g} s"
            ) from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STORE_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


def _connect_options(plan: ClusterStoragePlan) -> dict[str, Any]:
    """``nats.connect`` arguments; takes the password or token out of the environment, so
    no program a tool starts inherits it."""
    options: dict[str, Any] = {
        "servers": [one.strip() for one in plan.url.split(",") if one.strip()],
        "connect_timeout": 2.0,
        "reconnect_time_wait": 0.5,
        "max_reconnect_attempts": -1,
    }
    if plan.tls_ca_file or plan.tls_cert_file or plan.url.startswith("tls://"):
        context = ssl.create_default_context(cafile=plan.tls_ca_file)
        if plan.tls_cert_file:
            context.load_cert_chain(plan.tls_cert_file, plan.tls_key_file)
        options["tls"] = context
    if plan.creds_file:
        options["user_credentials"] = plan.creds_file
    if plan.nkey_seed_file:
        options["nkeys_seed"] = plan.nkey_seed_file
    user, password, token = (
        os.environ.pop(name, None) for name in (USER_ENV, PASSWORD_ENV, TOKEN_ENV)
    )
    if password:
        options["user"], options["password"] = user or "", password
    elif token:
        options["token"] = token
    return options


class JetStreamStorage:
    """One agent's conversations and records in the cluster's JetStream (see the module
    docstring); also its :class:`~agent_process.storage.RecordMirror`."""

    def __init__(
        self,
        loop: _Loop,
        nc: Any,
        names: _Names,
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
        self._root = instances_root

    @classmethod
    def open(cls, plan: ClusterStoragePlan, agent: str, instances_root: Path) -> JetStreamStorage:
        """Connect and make sure the agent's stream and the cluster's buckets exist; record
        files are those under ``instances_root``. Raises :class:`ClusterStorageError` (the URL
        shown redacted)."""
        names = _Names(plan.cluster, agent)
        where = f"{redact(plan.url)} stream {names.stream}"
        loop = _Loop()
        try:
            nc, kv, objects = loop.run(_setup(plan, names, agent), where)
        except ClusterStorageError:
            loop.stop()
            raise
        except Exception as exc:
            loop.stop()
            reason = redact(str(exc) or type(exc).__name__)
            raise ClusterStorageError(where, reason) from None
        return cls(loop, nc, names, (kv, objects), where, instances_root)

    @property
    def records(self) -> JetStreamStorage:
        """Record files are mirrored by this storage itself."""
        return self

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
            raise ClusterStorageError(where, redact(str(exc) or type(exc).__name__)) from None

    def conversation(self, directory: Path) -> ConversationStore:
        """The conversation of the instance in ``directory`` (its name identifies it)."""
        return JetStreamConversation(self, directory)

    # -- records ---------------------------------------------------------------------------

    def _record_key(self, path: Path) -> tuple[str, str] | None:
        """``(KV key, path under instances/)`` of a record file, ``None`` for another file."""
        with contextlib.suppress(ValueError):
            relative = path.relative_to(self._root).as_posix()
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
            value = relative.encode() + b"\n" + data
            self.run(lambda: self.kv.put(key, value), f"{self.where} key {key}")

    def removed(self, path: Path) -> None:
        """Delete the bucket's copy of the record file ``path``."""
        found = self._record_key(path)
        if found is not None:
            key = found[0]
            self.run(lambda: self.kv.delete(key), f"{self.where} key {key}")

    def instance_removed(self, directory: Path) -> None:
        """Delete everything of the instance in ``directory``: events, base, records."""
        instance = name_token(directory.name)
        where = f"{self.where} instance {instance}"

        async def remove() -> None:
            await self.js.purge_stream(self.names.stream, subject=self.names.subject(instance))
            head = await _get(self.kv, self.names.key(instance, BASE_KEY))
            if head is not None:
                await self.kv.delete(self.names.key(instance, BASE_KEY))
                await _drop_object(self.objects, _decode(head.value).get("object"))
            for key in await _keys(self.kv, self.names.key(instance, RECORDS, ">")):
                await self.kv.delete(key)

        self.run(remove, where)

    def restore(self, instances_root: Path) -> None:
        """Make the record files under ``instances_root`` exactly the bucket's copies: write
        each, and delete those the bucket lacks (left by an earlier stay on this host).
        Conversations need nothing: they are read from JetStream when loaded."""

        async def fetch() -> list[bytes]:
            values = []
            for key in await _keys(self.kv, self.names.key("*", RECORDS, ">")):
                entry = await _get(self.kv, key)
                if entry is not None and entry.value:
                    values.append(bytes(entry.value))
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
                tmp = path.with_name(f".{path.name}.restore")
                tmp.write_bytes(data)
                os.replace(tmp, path)
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


async def _setup(plan: ClusterStoragePlan, names: _Names, agent: str) -> tuple[Any, Any, Any]:
    import nats
    from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig

    async def quiet(exc: Exception) -> None:
        _log.debug("cluster storage connection error", error=redact(str(exc)))

    connecting = nats.connect(
        name=f"goondan-agent-store:{agent}", error_cb=quiet, **_connect_options(plan)
    )
    try:
        nc = await asyncio.wait_for(connecting, FIRST_CONNECT_SECONDS)
    except TimeoutError:
        raise TimeoutError(f"no connection within {FIRST_CONNECT_SECONDS:g} s") from None
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name=names.stream,
                subjects=[names.subjects],
                storage=StorageType.FILE,
                num_replicas=plan.replicas,
                allow_direct=True,
            )
        )
        kv = await js.create_key_value(
            KeyValueConfig(
                bucket=names.bucket, history=1, storage=StorageType.FILE, replicas=plan.replicas
            )
        )
        objects = await js.create_object_store(
            names.objects,
            ObjectStoreConfig(storage=StorageType.FILE, replicas=plan.replicas),
        )
    except BaseException:
        await nc.close()
        raise
    return nc, kv, objects


async def _get(kv: Any, key: str) -> Any:
    """The entry of ``key``, ``None`` when there is none (or it was deleted)."""
    from nats.js.errors import KeyNotFoundError

    try:
        return await kv.get(key)
    except KeyNotFoundError:
        return None


async def _keys(kv: Any, pattern: str) -> list[str]:
    """Live keys matching ``pattern`` (a KV watch, which ends at the current state)."""
    watcher = await kv.watch(pattern, ignore_deletes=True, meta_only=True)
    keys: list[str] = []
    try:
        while True:
            entry = await watcher.updates(STORE_TIMEOUT_SECONDS)
            if entry is None:
                break
            if entry.operation is None:
                keys.append(entry.key)
            if entry.delta == 0:
                break
    finally:
        await watcher.stop()
    return keys


async def _drop_object(objects: Any, name: object) -> None:
    if isinstance(name, str):
        with contextlib.suppress(Exception):  # an orphan only costs space
            await objects.delete(name)


def _decode(data: bytes | None) -> JsonObject:
    try:
        value = json.loads(data or b"{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


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
        self._object: str | None = None
        self._last_stream_seq = 0
        """The subject's last stream sequence this writer knows (its next append expects it)."""
        self._folded_stream_seq = 0
        self._unpurged = 0
        self._writer = secrets.token_hex(4)

    def load(self) -> list[Message]:
        """Read the base and the events after it. Raises :class:`ConversationUnreadable` for
        a base of a newer format, :class:`ClusterStorageError` when JetStream cannot answer."""
        self._writer = secrets.token_hex(4)  # a fresh writer: its ids never meet old ones
        head, revision, messages, events = self._storage.run(self._read, self._where)
        version = head.get("v", 1)
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise ConversationUnreadable(
                f"{self._where}: conversation format {version} is newer than this runtime's "
                f"({FORMAT_VERSION}); upgrade goondan"
            )
        self._revision = revision
        self._epoch = str(head.get("epoch", ""))
        name = head.get("object")
        self._object = name if isinstance(name, str) else None
        self._folded_seq = _int(head.get("foldedSeq"))
        self._folded_stream_seq = _int(head.get("streamSeq"))
        self._base = messages
        self._events = []
        last_seq = self._folded_seq
        for stream_seq, data in events:
            self._last_stream_seq = max(self._last_stream_seq, stream_seq)
            seq = data.get("seq")
            if not isinstance(seq, int) or seq <= self._folded_seq:
                continue
            if data.get("head") != revision:
                _log.warning(
                    "skipping an event of a writer that lost the conversation",
                    where=self._where,
                    seq=seq,
                )
                continue
            try:
                self._events.append(MessageEvent.from_json(data))
            except (ValueError, KeyError) as exc:
                _log.warning("skipping malformed message event", where=self._where, error=str(exc))
                continue
            last_seq = max(last_seq, seq)
        self._next_seq = last_seq + 1
        self._messages = apply_events(self._base, self._events)
        self._recount_calls()
        return self.messages

    async def _read(self) -> tuple[JsonObject, int, list[Message], list[tuple[int, JsonObject]]]:
        """The base (created empty if there is none), its revision and messages, and the
        events on the subject after it, with their stream sequences."""
        from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

        storage = self._storage
        entry = await _get(storage.kv, self._key)
        if entry is None:
            empty = {"v": FORMAT_VERSION, "epoch": secrets.token_hex(8), "foldedSeq": 0}
            with contextlib.suppress(KeyWrongLastSequenceError):  # another writer made it
                await storage.kv.create(self._key, json.dumps(empty).encode())
            entry = await storage.kv.get(self._key)
        head = _decode(entry.value)
        if isinstance(head.get("object"), str):
            body = (await storage.objects.get(head["object"])).data
            lines = json.loads(body)
        else:
            lines = head.get("messages", [])
        messages = [Message.from_json(m) for m in lines if isinstance(m, dict)]
        events: list[tuple[int, JsonObject]] = []
        self._last_stream_seq = 0
        try:
            last = await storage.js.get_last_msg(storage.names.stream, self._subject)
            self._last_stream_seq = last.seq or 0
        except NotFoundError:
            return head, entry.revision, messages, events
        start = _int(head.get("streamSeq")) + 1
        while start <= self._last_stream_seq:
            try:
                msg = await storage.js.get_msg(
                    storage.names.stream, seq=start, subject=self._subject, next=True
                )
            except NotFoundError:
                break
            data = _decode(msg.data)
            if data:
                events.append((msg.seq, data))
            start = msg.seq + 1
        return head, entry.revision, messages, events

    def close(self) -> None:
        """Nothing is held open per conversation."""

    def emit(self, event: MessageEvent) -> None:
        """Apply ``event`` once JetStream has stored it; raises :class:`ClusterStorageError`
        (the event not applied) when it refuses or does not answer."""
        seq = self._next_seq
        record = {"v": FORMAT_VERSION, **event.to_json(seq), "head": self._revision}
        payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
        msg_id = f"{self._epoch}:{self._writer}:{seq}"
        self._last_stream_seq = self._storage.run(
            lambda: self._publish(payload, msg_id), self._where
        )
        self._next_seq += 1
        self._events.append(event)
        self._apply(event)

    async def _publish(self, payload: bytes, msg_id: str) -> int:
        """Append once: expected last sequence and message id; one retry after a lost
        acknowledgement, which the id makes harmless."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import APIError, NotFoundError

        storage = self._storage
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
        """Replace the base with the conversation, if nobody else replaced it meanwhile (a
        compare-and-set on its revision). Raises :class:`ClusterStorageError` otherwise, or
        when JetStream does not answer: the events stay, and the next fold tries again."""
        if not self._events and self._revision:
            return
        folded_seq = self._next_seq - 1
        head: JsonObject = {
            "v": FORMAT_VERSION,
            "epoch": self._epoch,
            "foldedSeq": folded_seq,
            "streamSeq": self._last_stream_seq,
        }
        body = [m.to_json() for m in self._messages]
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        if len(encoded) > INLINE_BASE_BYTES:
            head["object"] = f"{self._storage.names.agent}/{self._instance}/{secrets.token_hex(8)}"
        else:
            head["messages"] = body  # type: ignore[assignment]
        count = len(self._events)
        self._revision = self._storage.run(lambda: self._replace(head, encoded), self._where)
        self._base = list(self._messages)
        self._events = []
        self._folded_seq = folded_seq
        self._folded_stream_seq = self._last_stream_seq
        self._unpurged += count
        if self._unpurged >= PURGE_AFTER_EVENTS:
            try:
                self._storage.run(self._purge, self._where)
                self._unpurged = 0
            except ConversationStorageError as exc:  # loads skip them anyway
                _log.warning("folded events not purged", where=self._where, error=str(exc))

    async def _replace(self, head: JsonObject, encoded: bytes) -> int:
        from nats.js.errors import KeyWrongLastSequenceError

        storage = self._storage
        name = head.get("object")
        if isinstance(name, str):
            await storage.objects.put(name, encoded)
        try:
            revision = int(
                await storage.kv.update(self._key, json.dumps(head).encode(), last=self._revision)
            )
        except KeyWrongLastSequenceError:
            await _drop_object(storage.objects, name)
            raise ClusterStorageError(
                self._where,
                "the conversation's base was replaced by another writer (it runs elsewhere now)",
            ) from None
        await _drop_object(storage.objects, self._object)
        self._object = name if isinstance(name, str) else None
        return revision

    async def _purge(self) -> None:
        # Keeping the newest message keeps the subject's last sequence, which the next append
        # expects; it is folded, so loads skip it.
        storage = self._storage
        await storage.js.purge_stream(storage.names.stream, subject=self._subject, keep=1)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
