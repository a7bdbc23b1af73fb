"""Who is in the cluster: leases on keys of a JetStream key-value bucket, renewed by heartbeat.

The bucket (one per cluster, on the server's disk, so a restarted NATS server still has it)
keeps every key for ``expiry`` seconds after its last write. Each member holds its keys as :class:`Lease` s: created only if absent, renewed with
compare-and-set at every heartbeat, so a key has exactly one holder:

- ``leader``: the Orchestrator that routes for the cluster;
- ``nodes.<name>``: a node, with the bundle fingerprint it runs and its agent processes;
- ``owners.<agent>``: the node that runs that agent's process now.

A member that stops renewing (killed, frozen, cut off) loses its keys at expiry; the others
notice the silence on their own clocks (:class:`Presence`) rather than waiting for the server
to drop the key. A member whose connection came back, or whose writes fail (the server lost
the bucket), joins again: it reopens the bucket, takes its keys again if they are still free,
and watches afresh (:meth:`Presence.restart`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.cluster.settings import (
    ClusterSettings,
    ClusterUnavailable,
    decode_json,
    encode_json,
)
from orchestrator.tasks import cancel_and_wait

LEADER_KEY = "leader"
NODE_KEYS = "nodes.*"


def node_key(node: str) -> str:
    """The key node ``node`` holds."""
    return f"nodes.{node}"


def owner_key(agent: str) -> str:
    """The key held by the node that runs ``agent``."""
    return f"owners.{agent}"


async def open_bucket(js: Any, settings: ClusterSettings, *, create: bool) -> Any:
    """The cluster's key-value bucket.

    The leader (``create``) makes it, or sets its expiry to the leader's own; a node waits
    for it and takes its heartbeat from the expiry it finds.
    """
    from nats.js import api
    from nats.js.errors import BucketNotFoundError

    try:
        kv = await js.key_value(settings.bucket)
    except BucketNotFoundError:
        if not create:
            raise
        return await js.create_key_value(
            api.KeyValueConfig(
                bucket=settings.bucket,
                history=1,
                ttl=settings.expiry_seconds,
                storage=api.StorageType.FILE,
                description="goondan cluster membership (leader, nodes, agent owners)",
            )
        )
    except Exception as exc:
        raise ClusterUnavailable(
            f"the NATS server at {settings.describe()} has no JetStream (start it with -js): {exc}"
        ) from None
    if create:
        status = await kv.status()
        config = status.stream_info.config
        wanted = settings.expiry_seconds
        if config.max_age is None or abs(config.max_age - wanted) > 1e-3:
            config.max_age = wanted
            await js.update_stream(config)
    return kv


async def bucket_expiry(kv: Any) -> float:
    """How long the bucket keeps a key without a write (its ``max_age``), in seconds."""
    status = await kv.status()
    max_age = status.stream_info.config.max_age
    return float(max_age) if max_age else 0.0


@dataclass(eq=False)
class Lease:
    """One key held by this process; only its holder can renew it (compare-and-set)."""

    kv: Any
    key: str
    value: dict[str, Any]
    revision: int | None = None

    def _encoded(self) -> bytes:
        """The value to write."""
        return encode_json(self.value)

    async def acquire(
        self, takeover: Callable[[dict[str, Any]], bool] | None = None
    ) -> dict[str, Any] | None:
        """Take the key: ``None`` once held, else the current holder's value (refused).

        ``takeover(holder)`` may allow replacing a holder (a node's own earlier run).
        """
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        data = self._encoded()
        for _ in range(3):  # a key expiring between our create and get: try again
            try:
                self.revision = await self.kv.create(self.key, data)
                return None
            except KeyWrongLastSequenceError:
                pass
            except KeyNotFoundError:
                # The client's create, refused, looks the key up to see whether it is deleted;
                # a key that lapsed in between is not found there: it is free, try again.
                continue
            try:
                entry = await self.kv.get(self.key)
            except KeyNotFoundError:
                continue
            holder = decode_json(entry.value or b"")
            if takeover is None or not takeover(holder):
                return holder
            try:
                self.revision = await self.kv.update(self.key, data, last=entry.revision)
                return None
            except KeyWrongLastSequenceError:
                continue
        return {}

    async def claim(
        self,
        patience: float,
        poll: float,
        takeover: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any] | None:
        """:meth:`acquire`, retried every ``poll`` seconds for ``patience`` seconds: a holder
        that just died (its key lapses within the expiry) is waited out. ``None`` once held,
        else the holder still there."""
        deadline = time.monotonic() + patience
        while True:
            holder = await self.acquire(takeover)
            if holder is None or time.monotonic() >= deadline:
                return holder
            await asyncio.sleep(poll)

    async def renew(self, value: dict[str, Any] | None = None) -> bool:
        """Write the key again (with ``value``, if given); ``False`` when somebody else holds
        it now. A key that expired while we were away is taken again if still free."""
        from nats.js.errors import KeyWrongLastSequenceError

        if value is not None:
            self.value = value
        try:
            self.revision = await self.kv.update(self.key, self._encoded(), last=self.revision)
            return True
        except KeyWrongLastSequenceError:
            return await self.acquire() is None

    async def release(self) -> None:
        """Delete the key if we still hold it; errors are ignored (it expires anyway)."""
        if self.revision is None:
            return
        revision, self.revision = self.revision, None
        with contextlib.suppress(Exception):
            await self.kv.delete(self.key, last=revision)


@dataclass(eq=False)
class Member:
    """What one member's key last said, and when we saw it (on our clock)."""

    name: str
    value: dict[str, Any]
    seen_at: float = field(default_factory=time.monotonic)

    @property
    def incarnation(self) -> str:
        """Which run of the member this is: a restart under the same name is a new one."""
        return str(self.value.get("incarnation", ""))


class Presence:
    """Watches keys of the bucket and tells when a member appears, changes or goes silent.

    ``on_join(member)`` is called for a new member or a new incarnation of one,
    ``on_leave(member, reason)`` when its key is deleted or not renewed within ``expiry``.
    """

    def __init__(
        self,
        kv: Any,
        pattern: str,
        expiry: float,
        on_join: Callable[[Member], None],
        on_leave: Callable[[Member, str], None],
        on_update: Callable[[Member], None] | None = None,
    ) -> None:
        self.kv = kv
        self.pattern = pattern
        self.expiry = expiry
        self.members: dict[str, Member] = {}
        self._on_join, self._on_leave, self._on_update = on_join, on_leave, on_update
        self.caught_up = asyncio.Event()
        """Set once the values present when watching began have all arrived."""
        self._watcher: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self.log = structlog.get_logger("goondan.cluster")

    async def start(self) -> None:
        """Begin watching (current values arrive first)."""
        self.caught_up = asyncio.Event()
        self._watcher = await self.kv.watch(self.pattern)
        self._tasks = [
            asyncio.ensure_future(self._watch()),
            asyncio.ensure_future(self._check_silence()),
        ]

    async def _watch(self) -> None:
        async for entry in self._watcher:
            if entry is None:  # the end of the current values
                self.caught_up.set()
                continue
            try:
                self._entry(entry)
            except Exception:
                self.log.exception("membership update failed", key=entry.key)
            if not entry.delta:  # nothing more pending: the current values are in
                self.caught_up.set()

    def _entry(self, entry: Any) -> None:
        name = entry.key.split(".", 1)[1] if "." in entry.key else entry.key
        known = self.members.get(name)
        if entry.operation in ("DEL", "PURGE"):
            if known is not None:
                del self.members[name]
                self._on_leave(known, "left")
            return
        member = Member(name, decode_json(entry.value or b""))
        if known is not None and known.incarnation != member.incarnation:
            del self.members[name]
            self._on_leave(known, "restarted")
            known = None
        self.members[name] = member
        if known is None:
            self._on_join(member)
        elif self._on_update is not None:
            self._on_update(member)

    async def _check_silence(self) -> None:
        step = max(0.05, self.expiry / 10)
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            for name, member in list(self.members.items()):
                if now - member.seen_at > self.expiry:
                    del self.members[name]
                    self._on_leave(member, "silent")

    async def restart(self, kv: Any) -> None:
        """Watch ``kv`` afresh (after a reconnection, or a new bucket), keeping what is known:
        members still there are seen again, the others go silent."""
        await self.stop()
        self.kv = kv
        for member in self.members.values():
            member.seen_at = time.monotonic()  # the outage was ours, not theirs
        await self.start()

    async def stop(self) -> None:
        """Stop watching."""
        await asyncio.gather(*(cancel_and_wait(task) for task in self._tasks))
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
