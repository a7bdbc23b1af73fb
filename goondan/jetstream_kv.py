"""Reading a JetStream key-value bucket: one entry, or the live keys under a pattern.

An agent's conversation store and the cluster leader's request journal read their buckets the
same way; ``nats`` is imported only when a bucket is read (it is an optional extra).
"""

from __future__ import annotations

from typing import Any

STORE_TIMEOUT_SECONDS = 10.0
"""The longest one storage call (a publish, a read, a watch's next entry) may take."""


async def get_entry(kv: Any, key: str) -> Any:
    """The entry of ``key``, ``None`` when there is none (or it was deleted)."""
    from nats.js.errors import KeyNotFoundError

    try:
        return await kv.get(key)
    except KeyNotFoundError:
        return None


async def live_keys(kv: Any, pattern: str) -> list[str]:
    """Live keys matching ``pattern`` (a KV watch, which ends at the current state)."""
    watcher = await kv.watch(pattern, ignore_deletes=True, meta_only=True)
    keys: list[str] = []
    try:  # a watch first delivers what is there, then says it caught up
        while (entry := await watcher.updates(STORE_TIMEOUT_SECONDS)) is not None:
            if entry.operation is None:
                keys.append(entry.key)
            if entry.delta == 0:
                break
    finally:
        await watcher.stop()
    return keys
