"""Refusing a NATS server that lets anyone in.

Credentials on our side protect nothing when the server also admits a client that has none:
whoever reaches its port could read and write the cluster's subjects and its bucket (the
frames of every agent, the leadership). So once a leader or a node is connected, it tries a
second, separate connection with no credentials at all (no user, password, token, nkey,
``.creds`` file or client certificate; the URL's own user information removed), bounded by a
short timeout. A server that accepts it is refused with :class:`ClusterServerOpen` (exit 6)
naming the fix, unless the member runs with ``--insecure-nats``. A server that answers the
probe with an authorization error is what we want; one that does not answer in time (it was
reachable a moment ago) is let through with a warning, since the real connection proved it
is there and the probe proves nothing either way.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import structlog

from goondan.secret_env import NATS_PASSWORD_ENV as PASSWORD_ENV
from goondan.secret_env import NATS_TOKEN_ENV as TOKEN_ENV
from goondan.secret_env import NATS_USER_ENV as USER_ENV
from orchestrator.cluster.errors import ClusterServerOpen


class ClusterSettings(Protocol):
    """What the probe reads of :class:`orchestrator.cluster.settings.ClusterSettings` (which
    runs the probe once connected, so it is named by this shape)."""

    @property
    def url(self) -> str:
        """The servers, comma-separated."""

    @property
    def tls_ca_file(self) -> Path | None:
        """The CA that signs the servers' certificates."""

    @property
    def tls_cert_file(self) -> Path | None:
        """The member's client certificate."""


PROBE_TIMEOUT_SECONDS = 2.0
"""How long the anonymous probe of one server may take."""

FIX = (
    "give every member credentials the server requires (--cluster-creds FILE, --cluster-nkey "
    f"FILE, or {USER_ENV}/{PASSWORD_ENV}, or {TOKEN_ENV}) and configure the server's accounts "
    "or authorization so that it refuses clients without them (see examples/cluster/nats.conf); "
    "or pass --insecure-nats on a network only the cluster's members can reach"
)


def _without_user(url: str) -> str:
    """``url`` without its user information (a password or token in it)."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _anonymous_tls(settings: ClusterSettings, url: str) -> ssl.SSLContext | None:
    """TLS as the member uses it, but never its client certificate: a server that maps a
    certificate to a user authenticates by it."""
    if not (settings.tls_ca_file or settings.tls_cert_file or url.startswith("tls://")):
        return None
    cafile = str(settings.tls_ca_file) if settings.tls_ca_file else None
    return ssl.create_default_context(cafile=cafile)


async def admits_anonymous(settings: ClusterSettings, url: str) -> bool | None:
    """Whether the server at ``url`` accepts a client without credentials: ``True``,
    ``False`` (it refused: authorization or TLS), or ``None`` (no answer in time)."""
    import nats
    from nats import errors

    async def ignore(exc: Exception) -> None:
        return None

    options: dict[str, object] = {}
    try:
        tls = _anonymous_tls(settings, url)
    except (OSError, ssl.SSLError):
        return None
    if tls is not None:
        options["tls"] = tls
    try:
        client = await asyncio.wait_for(
            nats.connect(
                servers=[_without_user(url)],
                name="goondan-anonymous-probe",
                connect_timeout=PROBE_TIMEOUT_SECONDS,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=ignore,
                **options,
            ),
            PROBE_TIMEOUT_SECONDS * 1.5,
        )
    except (errors.AuthorizationError, ssl.SSLError, ConnectionResetError):
        return False  # a TLS handshake the server ends is a refusal too (it wants a cert)
    except Exception as exc:
        text = str(exc).lower()
        if "authorization violation" in text or "authentication" in text:
            return False
        return None
    await client.close()
    return True


async def refuse_open_server(settings: ClusterSettings) -> None:
    """Raise :class:`ClusterServerOpen` when any server of ``settings`` admits a client
    without credentials."""
    log = structlog.get_logger("goondan.cluster")
    for url in [one.strip() for one in settings.url.split(",") if one.strip()]:
        admitted = await admits_anonymous(settings, url)
        shown = _without_user(url)
        if admitted:
            raise ClusterServerOpen(
                f"the NATS server at {shown} accepts clients without credentials: whoever "
                f"reaches it can read the cluster's traffic and write its bucket. Fix: {FIX}"
            )
        if admitted is None:
            log.warning(
                "could not check whether the NATS server refuses clients without credentials",
                server=shown,
            )
