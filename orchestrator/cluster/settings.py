"""How the leader and the nodes of a cluster reach NATS: address, credentials, TLS, names.

Everything of one cluster lives under one name (``--cluster-name``, by default the Swarm's
name): its subjects start with ``goondan.<name>.`` and its JetStream key-value bucket is
``goondan_<name>``, so several swarms can share one NATS server.

Secrets never come from the command line, where other users of the host could read them: a
password or token comes from ``GOONDAN_NATS_PASSWORD`` / ``GOONDAN_NATS_TOKEN`` (or the URL's
user information, which is redacted wherever the URL is shown), an nkey seed or a ``.creds``
file from a file path.

A member refuses a server that also admits clients without credentials
(:mod:`~orchestrator.cluster.anonymous`), unless told it runs on a trusted network
(``insecure``), and signs the leadership records it writes with the key the members share
(:mod:`~orchestrator.cluster.leadership`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from goondan.secret_env import NATS_PASSWORD_ENV, NATS_TOKEN_ENV, NATS_USER_ENV
from goondan.urls import redact_url
from orchestrator.cluster.errors import ClusterAuthRefused as ClusterAuthRefused
from orchestrator.cluster.errors import ClusterServerOpen as ClusterServerOpen
from orchestrator.cluster.errors import ClusterTaken as ClusterTaken
from orchestrator.cluster.errors import ClusterUnavailable as ClusterUnavailable

HEARTBEAT_SECONDS = 1.0
"""How often the leader and each node renew their keys in the cluster's bucket."""
HEARTBEAT_MISSES = 3
"""Heartbeats a member may miss before it counts as lost: the bucket's keys expire after
``HEARTBEAT_MISSES × HEARTBEAT_SECONDS``, and that is how soon a dead node's agents are
declared crashed."""
START_TIMEOUT_SECONDS = 15.0
"""How long the leader waits for a node to start an agent's process."""
CONNECT_TIMEOUT_SECONDS = 2.0
FIRST_CONNECT_SECONDS = 5.0
"""How long the leader or a node waits for its first connection before giving up."""
RECONNECT_WAIT_SECONDS = 0.5
PASSWORD_ENV = NATS_PASSWORD_ENV
USER_ENV = NATS_USER_ENV
TOKEN_ENV = NATS_TOKEN_ENV
CLUSTER_KEY_ENV = "GOONDAN_CLUSTER_KEY"
"""The key every member of a cluster shares, signing the leadership records."""
MIN_KEY_CHARACTERS = 16
_NAME_FORBIDDEN = re.compile(r"[^A-Za-z0-9_-]")


def cluster_token(name: str) -> str:
    """``name`` as one NATS subject token and bucket name part (no dots, no spaces)."""
    return _NAME_FORBIDDEN.sub("_", name) or "_"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Where the cluster's NATS server is and how to authenticate to it."""

    url: str
    """``nats://HOST:4222`` (``tls://`` for TLS; several servers separated by commas)."""
    name: str
    """The cluster's name: its subjects and bucket (see :func:`cluster_token`); empty for the
    Swarm's own name (:meth:`named_for`)."""
    creds_file: Path | None = None
    """A NATS ``.creds`` file (a user JWT and its nkey seed)."""
    nkey_seed_file: Path | None = None
    """A file holding an nkey seed (``SU…``)."""
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    insecure: bool = False
    """Use a server that admits clients without credentials (``--insecure-nats``); by
    default such a server is refused (:class:`ClusterServerOpen`)."""
    leader_key: bytes | None = field(default=None, repr=False)
    """The key the members share (``GOONDAN_CLUSTER_KEY``): leadership records are signed
    with it, and one without a valid signature is never obeyed. ``None``: records unsigned
    (only with ``insecure``)."""

    def named_for(self, swarm: str) -> ClusterSettings:
        """These settings, with the Swarm's name when no cluster name was given."""
        return self if self.name else dataclasses.replace(self, name=swarm)

    @property
    def prefix(self) -> str:
        """The first two tokens of every subject of this cluster."""
        return f"goondan.{cluster_token(self.name)}"

    @property
    def bucket(self) -> str:
        """The JetStream key-value bucket of this cluster."""
        return f"goondan_{cluster_token(self.name)}"

    @property
    def expiry_seconds(self) -> float:
        """How long a member's keys live without a heartbeat."""
        return self.heartbeat_seconds * HEARTBEAT_MISSES

    def node_subject(self, node: str, verb: str) -> str:
        """Where node ``node`` takes requests ``verb`` (``start``, ``signal``)."""
        return f"{self.prefix}.node.{node}.{verb}"

    def worker_subject(self, worker_id: str, direction: str) -> str:
        """The frames of one agent process: ``in`` (to it) or ``out`` (from it)."""
        return f"{self.prefix}.w.{worker_id}.{direction}"

    def describe(self) -> str:
        """The server address, safe to log."""
        return redact_url(self.url)

    def _tls(self) -> ssl.SSLContext | None:
        if not (self.tls_ca_file or self.tls_cert_file or self.url.startswith("tls://")):
            return None
        context = ssl.create_default_context(
            cafile=str(self.tls_ca_file) if self.tls_ca_file else None
        )
        if self.tls_cert_file is not None:
            context.load_cert_chain(
                str(self.tls_cert_file), str(self.tls_key_file) if self.tls_key_file else None
            )
        return context

    def check_leader_key(self) -> None:
        """Raise :class:`ClusterAuthRefused` naming the fix when the members' key is missing
        (allowed only with ``insecure``) or too short to be a secret."""
        if self.leader_key is None:
            if self.insecure:
                return
            raise ClusterAuthRefused(
                f"{CLUSTER_KEY_ENV} is not set: every member of the cluster (leaders and "
                "nodes) needs the same secret key, which signs the leadership records; make "
                f"one with `openssl rand -hex 32` and give it to each member as {CLUSTER_KEY_ENV}"
            )
        if len(self.leader_key) < MIN_KEY_CHARACTERS:
            raise ClusterAuthRefused(
                f"{CLUSTER_KEY_ENV} is too short: give at least {MIN_KEY_CHARACTERS} characters "
                "(e.g. `openssl rand -hex 32`)"
            )

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of ``nats.connect`` for these settings (secrets included: never
        log them)."""
        options: dict[str, Any] = {
            "servers": [one.strip() for one in self.url.split(",") if one.strip()],
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "reconnect_time_wait": RECONNECT_WAIT_SECONDS,
            "max_reconnect_attempts": -1,
        }
        tls = self._tls()
        if tls is not None:
            options["tls"] = tls
        if self.creds_file is not None:
            options["user_credentials"] = str(self.creds_file)
        if self.nkey_seed_file is not None:
            options["nkeys_seed"] = str(self.nkey_seed_file)
        user, password, token = (
            os.environ.get(USER_ENV),
            os.environ.get(PASSWORD_ENV),
            os.environ.get(TOKEN_ENV),
        )
        if password:
            options["user"] = user or ""
            options["password"] = password
        elif token:
            options["token"] = token
        return options

    async def connect(
        self, client_name: str, on_reconnected: Callable[[], None] | None = None
    ) -> Any:
        """A connected ``nats.aio.client.Client``; raises :class:`ClusterUnavailable`.

        The client reconnects by itself for as long as it runs; the heartbeats tell the
        others when it has been away too long.
        """
        import nats

        log = structlog.get_logger("goondan.cluster").bind(server=self.describe())
        self.check_leader_key()
        if self.insecure:
            log.warning(
                "insecure NATS: the server is not checked for clients without credentials"
                + ("; leadership records are not signed" if self.leader_key is None else "")
            )
        state = {"connected": True}

        client: list[Any] = []

        async def disconnected() -> None:
            if client and (client[0].is_draining or client[0].is_closed):
                return  # our own goodbye
            if state["connected"]:
                state["connected"] = False
                log.warning("cluster connection lost; reconnecting")

        async def reconnected() -> None:
            state["connected"] = True
            log.info("cluster connection back")
            if on_reconnected is not None:
                on_reconnected()

        failures: list[BaseException] = []
        fatal = asyncio.Event()

        async def error(exc: Exception) -> None:
            failures.append(exc)
            if not _worth_waiting(exc):
                fatal.set()
            log.debug("cluster connection error", error=_reason(exc))

        try:
            options = self.connect_options()
        except (OSError, ssl.SSLError) as exc:
            raise ClusterUnavailable(f"cluster TLS files: {exc}") from None
        connecting = asyncio.ensure_future(
            nats.connect(
                name=client_name,
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
                error_cb=error,
                **options,
            )
        )
        # Once connected the client reconnects forever; the first connection must succeed
        # soon, so a wrong address or a refused credential is an error, not a silent wait
        # (a refused connection is retried until the deadline: the server may be starting).
        refused = asyncio.ensure_future(fatal.wait())
        await asyncio.wait(
            {connecting, refused}, timeout=FIRST_CONNECT_SECONDS, return_when="FIRST_COMPLETED"
        )
        refused.cancel()
        if connecting.done() and connecting.exception() is None:
            client.append(connecting.result())
            if not self.insecure:
                from orchestrator.cluster.anonymous import refuse_open_server

                try:
                    await refuse_open_server(self)
                except BaseException:
                    await client[0].close()
                    raise
            return client[0]
        connecting.cancel()
        with contextlib.suppress(BaseException):
            await connecting
        # A refusal says more than the connection drop that follows it: name the refusal.
        refusals = [f for f in failures if not _worth_waiting(f)]
        decisive = refusals[0] if refusals else (failures[-1] if failures else None)
        reason = _reason(decisive) if decisive is not None else "no answer"
        rejected = bool(refusals)
        raise (ClusterAuthRefused if rejected else ClusterUnavailable)(
            f"cannot connect to the cluster at {self.describe()}: {reason}"
        )


def _worth_waiting(exc: BaseException) -> bool:
    """A refused connection may succeed in a moment (the server starting); bad credentials
    or TLS never will."""
    from nats import errors

    if isinstance(exc, errors.AuthorizationError | ssl.SSLError):
        return False
    text = str(exc).lower()  # the server's own words, as nats-py passes them on
    return "authorization violation" not in text and "authentication" not in text


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    # nats-py names what it could not reach; keep the message free of any credential.
    return redact_url(text)


def encode_json(value: dict[str, Any]) -> bytes:
    """A compact JSON payload."""
    return json.dumps(value, separators=(",", ":")).encode()


def decode_json(data: bytes) -> dict[str, Any]:
    """A JSON object payload; an empty dict for anything else (a peer's bug is not ours)."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
