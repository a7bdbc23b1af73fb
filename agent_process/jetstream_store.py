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
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agent_process.conversation import (
    ConversationStorageError,
    ConversationStore,
)
from agent_process.jetstream_conversation import (
    BASE_KEY,
    SNAPSHOT_AFTER_EVENTS,
    JetStreamConversation,
)
from agent_process.jetstream_link import (
    ClusterStorageError,
    StoreLoop,
    StoreNames,
    connect_store,
    drop_object,
    name_token,
)
from bundle.plan import ClusterStoragePlan
from goondan.files import write_atomic
from goondan.jetstream_kv import get_entry, live_keys
from goondan.urls import redact_url

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
