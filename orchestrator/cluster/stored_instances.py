"""The conversation instances a cluster's agents keep in JetStream, as the leader counts them.

On one host an agent's instances are directories under the state directory, and ``status``
lists them from there. An agent running on a node keeps its conversations in the cluster's
JetStream instead (``agent_process.jetstream_store``): one ``<agent>.<instance>.base`` key per
conversation in the KV bucket ``goondan_<cluster>_state``, each part one token (see
:func:`name_token`). The leader watches those keys (their names only, never the values) and
so knows every agent's instances wherever the agent runs, kept current as conversations are
made and deleted.

The bucket is made by the first agent that stores a conversation there: until then there is
nothing to count, and the leader looks for it again every :data:`RETRY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import structlog

from orchestrator.cluster.settings import cluster_token
from orchestrator.tasks import cancel_and_wait

BASE_KEYS = "*.*.base"
"""The keys of the conversations' bases, one per instance of each agent."""
RETRY_SECONDS = 2.0
"""How often the leader looks for a bucket no agent has made yet."""
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
_GONE = frozenset({"DEL", "PURGE"})
"""Operations of a key whose conversation was deleted."""


def name_token(name: str) -> str:
    """``name`` (an agent's, an instance directory's) as one token of a key, as the agents
    spell it: itself when made of ``[A-Za-z0-9_-]``, else ``=`` and a digest."""
    if _TOKEN.match(name):
        return name
    return "=" + hashlib.sha256(name.encode()).hexdigest()[:40]


def state_bucket(cluster: str) -> str:
    """The KV bucket the agents of ``cluster`` (its name) keep their conversations' bases in."""
    return f"goondan_{cluster_token(cluster)}_state"


class StoredInstances:
    """Every agent's conversation instances in the cluster's JetStream, watched."""

    def __init__(self, cluster: str, retry_seconds: float = RETRY_SECONDS) -> None:
        self.bucket = state_bucket(cluster)
        self.retry_seconds = retry_seconds
        self.caught_up = asyncio.Event()
        """Set once every key stored when the watch began has been read."""
        self._by_agent: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._log = structlog.get_logger("goondan.cluster").bind(bucket=self.bucket)

    def of(self, agent: str) -> list[str]:
        """The instances of ``agent`` stored in JetStream (their keys' tokens: the instance
        directories' names, or a digest of an unusual one), sorted."""
        return sorted(self._by_agent.get(name_token(agent), ()))

    def note(self, key: str, operation: str | None) -> None:
        """One change of a base key: a conversation made (or folded), or deleted."""
        agent, _, rest = key.partition(".")
        instance, _, kind = rest.partition(".")
        if kind != "base" or not agent or not instance:
            return
        if operation in _GONE:
            self._by_agent.get(agent, set()).discard(instance)
        else:
            self._by_agent.setdefault(agent, set()).add(instance)

    def start(self, jetstream: Any) -> None:
        """Watch the bucket through ``jetstream`` (the leader's context) until :meth:`stop`."""
        self._task = asyncio.ensure_future(self._watch(jetstream))

    async def _watch(self, jetstream: Any) -> None:
        from nats.js.errors import BucketNotFoundError

        while True:
            try:
                kv = await jetstream.key_value(self.bucket)
            except BucketNotFoundError:
                self.caught_up.set()  # nothing stored yet: nothing to count
                await asyncio.sleep(self.retry_seconds)
                continue
            except Exception as exc:  # NATS away for now: the status keeps what it knew
                self._log.debug("stored instances not read", error=str(exc))
                await asyncio.sleep(self.retry_seconds)
                continue
            watcher = await kv.watch(BASE_KEYS, meta_only=True)
            async for entry in watcher:
                if entry is None:  # every key stored so far was read
                    self.caught_up.set()
                    continue
                self.note(entry.key, entry.operation)
            return

    async def stop(self) -> None:
        """End the watch."""
        if self._task is not None:
            await cancel_and_wait(self._task)
