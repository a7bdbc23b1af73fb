"""``kind: RemoteAgent``: another team's agent, reached over A2A, that a Swarm lists among
its agents so its own agents delegate to it with ``agents__request`` / ``agents__send`` as
to one of their own.

A Swarm names it beside its Agents (``agents: [Agent/a, RemoteAgent/partner]``); it may not
be the swarm's ``entryAgent`` (it runs no Turn here), and its name may not be an Agent's of
the same swarm (a delegate names its target by name alone). The Orchestrator reaches it
through the official ``a2a-sdk`` client, the ``a2a`` extra (``pip install
'goondan-py[a2a]'``); a bundle declaring one without that extra does not validate.
"""

from __future__ import annotations

import importlib.util
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from bundle.spec_agent import MAX_DESCRIPTION_LENGTH
from bundle.spec_base import MAX_SECONDS, Spec, ValueFrom

A2A_EXTRA = "pip install 'goondan-py[a2a]'"
"""What installs the client a RemoteAgent is called through."""
MAX_CARD_URL_LENGTH = 2048


class BearerToken(Spec):
    """A bearer token read from the environment or a secret, never written in goondan.yaml."""

    value_from: ValueFrom = Field(
        description="Where the token comes from, e.g. {env: PARTNER_A2A_TOKEN} or "
        '{secretRef: {ref: "Secret/partner", key: token}}.'
    )


class RemoteAgentAuth(Spec):
    """How the Orchestrator authenticates to the remote agent."""

    bearer: BearerToken = Field(
        description="Sent as `Authorization: Bearer <token>`, only to the card's own origin "
        "(scheme, host and port of cardUrl)."
    )


class RemoteAgentSpec(Spec):
    """``kind: RemoteAgent``: an A2A agent elsewhere, a delegation target of the swarm."""

    card_url: str = Field(
        max_length=MAX_CARD_URL_LENGTH,
        description="http(s) URL of the agent card, e.g. "
        "https://partner.example.com/.well-known/agent-card.json. It is fetched as is: a "
        "redirect is refused.",
    )
    auth: RemoteAgentAuth | None = Field(
        default=None, description="Credentials for the remote agent (none: calls are anonymous)."
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="Longest wait for one answer (card, message and task together); the "
        "request's own timeout still applies when shorter. Default: the request's timeout.",
    )
    description: str | None = Field(
        default=None,
        max_length=MAX_DESCRIPTION_LENGTH,
        description="What the remote agent does, in a sentence the swarm's operators read.",
    )

    @field_validator("card_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"cardUrl {value!r} must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("cardUrl must not carry credentials: use auth.bearer instead")
        if parts.fragment:
            raise ValueError("cardUrl must not have a #fragment")
        try:
            parts.port  # noqa: B018  # raises for a port out of range
        except ValueError as exc:
            raise ValueError(f"cardUrl {value!r}: {exc}") from None
        return value


def a2a_client_installed() -> bool:
    """Whether the ``a2a-sdk`` (the ``a2a`` extra) can be imported here."""
    try:
        return importlib.util.find_spec("a2a") is not None
    except (ImportError, ValueError):
        return False
