"""The connection under :mod:`agent_process.jetstream_store`: names, a loop of its own, and
small JetStream helpers.

The agent's event loop calls the store synchronously (as it writes files); the store's calls
run on :class:`StoreLoop`, a loop on a thread of its own, and the agent waits for each (at
most :data:`STORE_TIMEOUT_SECONDS`). Credentials come from the environment the node handed
over (and are taken out of it) or from files the plan names; the URL is only ever shown
through :func:`goondan.urls.redact_url`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import ssl
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agent_process.conversation import ConversationStorageError
from bundle.plan import ClusterStoragePlan
from goondan.jetstream_kv import STORE_TIMEOUT_SECONDS
from goondan.secret_env import (
    NATS_CREDENTIAL_ENVS,
    NATS_PASSWORD_ENV,
    NATS_TOKEN_ENV,
    NATS_USER_ENV,
)
from goondan.urls import redact_url
from tools_base import JsonObject

FIRST_CONNECT_SECONDS = 5.0
"""How long an agent waits for its first connection before it fails to boot (and backs off)."""
USER_ENV = NATS_USER_ENV
PASSWORD_ENV = NATS_PASSWORD_ENV
TOKEN_ENV = NATS_TOKEN_ENV
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,96}$")

_log = structlog.get_logger("goondan.conversation")
T = TypeVar("T")


class ClusterStorageError(ConversationStorageError):
    """JetStream refused a write (another writer won), could not be reached, or did not answer
    in time; ``code`` is ``E_STORAGE``. The message names the server (redacted) and stream."""

    def __init__(self, where: str, reason: str) -> None:
        Exception.__init__(self, f"JetStream ({where}): {reason}")
        self.path = Path(where)
        self.errno = None


def name_token(name: str) -> str:
    """``name`` (an agent's, an instance directory's) as one token of a subject, a KV key and
    a stream name: itself when made of ``[A-Za-z0-9_-]``, else ``=`` and a digest. Injective:
    no name that stands for itself has a ``=``."""
    if _TOKEN.match(name):
        return name
    return "=" + hashlib.sha256(name.encode()).hexdigest()[:40]


class StoreNames:
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


class StoreLoop:
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
            if future.done():  # the work's own TimeoutError: let it say what timed out
                raise
            future.cancel()
            raise ClusterStorageError(
                where, f"JetStream did not answer within {STORE_TIMEOUT_SECONDS:g} s"
            ) from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STORE_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


def connect_options(plan: ClusterStoragePlan) -> dict[str, Any]:
    """``nats.connect`` arguments; takes the password or token out of the environment, so
    no program a tool starts inherits it."""
    options: dict[str, Any] = {
        "servers": [one.strip() for one in plan.url.split(",") if one.strip()],
        "connect_timeout": 2.0,
        "reconnect_time_wait": 0.5,
        "max_reconnect_attempts": -1,
    }
    if plan.tls_ca_file or plan.tls_cert_file or plan.url.startswith("tls://"):
        options["tls"] = _tls_context(plan)
    options.update(_credentials(plan))
    return options


def _tls_context(plan: ClusterStoragePlan) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=plan.tls_ca_file)
    if plan.tls_cert_file:
        context.load_cert_chain(plan.tls_cert_file, plan.tls_key_file)
    return context


def _credentials(plan: ClusterStoragePlan) -> dict[str, Any]:
    """The ``nats.connect`` arguments that authenticate: files the plan names, then a user
    and password or a token taken out of the environment."""
    options: dict[str, Any] = {}
    if plan.creds_file:
        options["user_credentials"] = plan.creds_file
    if plan.nkey_seed_file:
        options["nkeys_seed"] = plan.nkey_seed_file
    user, password, token = (os.environ.pop(name, None) for name in NATS_CREDENTIAL_ENVS)
    if password:
        options["user"], options["password"] = user or "", password
    elif token:
        options["token"] = token
    return options


async def connect_store(
    plan: ClusterStoragePlan, names: StoreNames, agent: str
) -> tuple[Any, Any, Any]:
    import nats
    from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig

    async def quiet(exc: Exception) -> None:
        _log.debug("cluster storage connection error", error=redact_url(str(exc)))

    connecting = asyncio.ensure_future(
        nats.connect(name=f"goondan-agent-store:{agent}", error_cb=quiet, **connect_options(plan))
    )
    # Not wait_for: the client may take its time to give up once cancelled, and the agent
    # must hear now that it cannot boot.
    await asyncio.wait({connecting}, timeout=FIRST_CONNECT_SECONDS)
    if not connecting.done():
        connecting.cancel()
        raise ConnectionError(f"no connection within {FIRST_CONNECT_SECONDS:g} s")
    nc = connecting.result()
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


async def drop_object(objects: Any, name: object) -> None:
    if isinstance(name, str):
        with contextlib.suppress(Exception):  # an orphan only costs space
            await objects.delete(name)


def decode_object(data: bytes | None) -> JsonObject:
    try:
        value = json.loads(data or b"{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
