"""Accepted external requests journaled in the cluster's JetStream, so the next leader finishes
what a dead one accepted.

A leader writes each request it accepts here before the request is accepted (before its
``202``, its first streamed byte, or its Turn), and the answer once it has one. A standby
that takes over reads every request still unanswered, routes it again with its request id
(the agent resumes that Turn rather than starting another) and records the answer, so a
caller asking for it by id (``GET /v1/requests/{id}``), or again with the same idempotency
key, gets it from whichever leader answers.

Layout (``<c>`` the cluster's token)::

    KV       goondan_<c>_requests   history 1, file storage, values kept for the retention
             r.<request id>         the request (:class:`JournaledRequest`, JSON), or, when
                                    larger than a message, {"object": "<request id>"}
             k.<key digest>         the request id its idempotency key names (SHA-256 of
                                    the key: the key itself is not kept)
             u.<request id>         present while the request is unanswered
    objects  goondan_<c>_requests_big   requests larger than a message

The key's entry is made with ``create`` (a compare-and-set), so of two leaders accepting the
same key (the old one cut off, the new one already leading) exactly one gets it; the other
finds the request it names. A value that does not decode (written by something else than a
leader of this cluster) is skipped with a warning, never trusted; the NATS permissions of
``examples/cluster/nats.conf`` keep nodes from writing here at all.

The shape of :class:`JournaledRequest` is that of the daemon's own request record (the same
fields, camelCase), so a durable request store can mirror its records here as they are.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import msgspec
import structlog

from goondan.jetstream_kv import get_entry, live_keys
from orchestrator.cluster.settings import ClusterSettings
from orchestrator.requests.store import KeyReused, State

DEFAULT_RETENTION_SECONDS = 24 * 3600.0
"""How long a journaled request (and its answer) is kept."""
INLINE_BYTES = 256 * 1024
"""A request encoded larger than this, or than the server's ``max_payload`` leaves room for,
goes to the object store, in chunks of that size (``max_payload`` is 1 MiB by default; an
input may be that large by itself)."""

log = structlog.get_logger("goondan.cluster")


class JournaledRequest(msgspec.Struct, rename="camel", kw_only=True):
    """One accepted external request, as the journal keeps it."""

    v: int = 1
    request_id: str
    kind: str = "request"
    """The front door it came through (:data:`orchestrator.requests.store.Kind`); any string,
    so the entry of a door this leader does not know still reads (and is kept from its desk)."""
    agent: str
    instance_key: str
    input: str
    timeout_ms: int | None = None
    relay: bool = False
    trace_id: str = ""
    key_digest: str = ""
    """SHA-256 of the idempotency key (empty: none was given)."""
    body_digest: str = ""
    """SHA-256 of what was asked: a key reused with another body is refused."""
    state: State = "running"
    answer: dict[str, Any] | None = None
    """The Turn's answer in its wire form (``DelegateAnswer.to_wire()``)."""
    accepted_at: float = 0.0
    finished_at: float | None = None
    leader: str = ""
    """The incarnation of the leader that accepted it."""


class _Pointer(msgspec.Struct):
    object: str


_decoder = msgspec.json.Decoder(JournaledRequest)
_pointer = msgspec.json.Decoder(_Pointer)


def requests_bucket(settings: ClusterSettings) -> str:
    """The KV bucket of the cluster's journaled requests."""
    return f"{settings.bucket}_requests"


class RequestJournal:
    """The journaled requests of one cluster (see the module docstring)."""

    def __init__(self, kv: Any, objects: Any, max_payload: int = 1024 * 1024) -> None:
        self.kv = kv
        self.objects = objects
        self.inline = max(4096, min(INLINE_BYTES, max_payload - 8192))
        """The largest value written as one message (room left for headers)."""

    @classmethod
    async def open(
        cls, nc: Any, settings: ClusterSettings, retention: float = DEFAULT_RETENTION_SECONDS
    ) -> RequestJournal:
        """The journal of the cluster ``settings`` names, made when missing."""
        from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType

        js = nc.jetstream()
        bucket = requests_bucket(settings)
        kv = await js.create_key_value(
            KeyValueConfig(
                bucket=bucket,
                history=1,
                ttl=retention,
                storage=StorageType.FILE,
                description="goondan: accepted requests, finished by the next leader",
            )
        )
        objects = await js.create_object_store(
            f"{bucket}_big", ObjectStoreConfig(ttl=retention, storage=StorageType.FILE)
        )
        return cls(kv, objects, int(nc.max_payload))

    # -- writing -----------------------------------------------------------------------------

    async def accept(self, request: JournaledRequest) -> tuple[JournaledRequest, bool]:
        """Journal ``request`` before it is accepted: ``(request, True)``; or, when its id
        or its idempotency key names a journaled request already, ``(that one, False)``. Raises
        :class:`KeyReused` when that one was asked with another body, and the server's
        error when it cannot be written (then nothing may be accepted)."""
        from nats.js.errors import KeyWrongLastSequenceError

        journaled = await self.get(request.request_id)
        if journaled is not None:  # routed again (a takeover), or journaled by its front door
            return journaled, False
        if request.key_digest:
            key = f"k.{request.key_digest}"
            try:
                await self.kv.create(key, request.request_id.encode())
            except KeyWrongLastSequenceError:
                entry = await self.kv.get(key)
                found = await self.get(bytes(entry.value or b"").decode("ascii", "replace"))
                if found is not None:
                    if found.body_digest != request.body_digest:
                        raise KeyReused(
                            "this Idempotency-Key was used with another request body; "
                            "use a fresh key for a new request"
                        ) from None
                    return found, False
                # The key outlived its request (a leader died between the two writes): ours.
                await self.kv.update(key, request.request_id.encode(), last=entry.revision)
        await self._write(request)
        await self.kv.put(f"u.{request.request_id}", b"")
        return request, True

    async def finish(self, request_id: str, answer: dict[str, Any]) -> JournaledRequest | None:
        """Record the answer of ``request_id``; the request as now journaled (``None`` when
        it is not, past its retention)."""
        request = await self.get(request_id)
        if request is None:
            return None
        if request.state != "done":
            request = msgspec.structs.replace(
                request, state="done", answer=answer, finished_at=time.time()
            )
            await self._write(request)
        with contextlib.suppress(Exception):  # a marker left only costs a redundant check
            await self.kv.delete(f"u.{request_id}")
        return request

    async def _write(self, request: JournaledRequest) -> None:
        data = msgspec.json.encode(request)
        if len(data) > self.inline:
            from nats.js.api import ObjectMeta, ObjectMetaOptions

            options = ObjectMetaOptions(max_chunk_size=self.inline)
            meta = ObjectMeta(name=request.request_id, options=options)
            await self.objects.put(request.request_id, data, meta=meta)
            data = msgspec.json.encode(_Pointer(request.request_id))
        await self.kv.put(f"r.{request.request_id}", data)

    # -- reading -----------------------------------------------------------------------------

    async def get(self, request_id: str) -> JournaledRequest | None:
        """The journaled request ``request_id``; ``None`` when there is none (or it is not
        one: a value something else wrote)."""
        if not _valid_token(request_id):
            return None
        entry = await get_entry(self.kv, f"r.{request_id}")
        if entry is None:
            return None
        data = bytes(entry.value or b"")
        with contextlib.suppress(msgspec.DecodeError):
            pointer = _pointer.decode(data)
            data = await self._object(pointer.object)
        try:
            request = _decoder.decode(data)
        except msgspec.DecodeError:
            log.warning("journaled request unreadable; ignored", request_id=request_id)
            return None
        if request.request_id != request_id:
            log.warning("journaled request under another id; ignored", request_id=request_id)
            return None
        return request

    async def by_key(self, key_digest: str) -> JournaledRequest | None:
        """The journaled request the idempotency key (its digest) names, if any."""
        if not _valid_token(key_digest):
            return None
        entry = await get_entry(self.kv, f"k.{key_digest}")
        if entry is None:
            return None
        return await self.get(bytes(entry.value or b"").decode("ascii", "replace"))

    async def unanswered(self) -> list[JournaledRequest]:
        """Every journaled request without an answer, oldest first."""
        keys = await live_keys(self.kv, "u.>")
        found = [await self.get(key.removeprefix("u.")) for key in keys]
        running = [r for r in found if r is not None and r.state == "running"]
        return sorted(running, key=lambda r: r.accepted_at)

    async def _object(self, name: str) -> bytes:
        if not _valid_token(name):
            return b""
        try:
            result = await self.objects.get(name)
        except Exception as exc:  # gone past its retention, or never written whole
            log.warning("journaled request's object unreadable", error=str(exc))
            return b""
        return bytes(result.data or b"")


def _valid_token(value: str) -> bool:
    """Whether ``value`` may be one token of a key (what ids and digests are)."""
    return 0 < len(value) <= 128 and all(
        ch.isascii() and (ch.isalnum() or ch in "_-") for ch in value
    )
