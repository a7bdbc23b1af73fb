"""The swarm's RemoteAgents as targets: their addresses and tokens, read when the swarm starts.

What :mod:`orchestrator.remote_agents` (the calls' registry, loaded at every start) and
:mod:`orchestrator.remote_agent_calls` (one call, loaded at the first one, with the ``a2a``
extra's HTTP client and SDK) share: the bounds of a call and its errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from bundle.secrets import Secret, resolve_value
from bundle.spec_base import ValueSource
from bundle.spec_remote import A2A_EXTRA, RemoteAgentSpec, a2a_client_installed
from goondan.errors import ConfigCode, ConfigError, DeliveryCode
from ipc import IpcError

if TYPE_CHECKING:
    from bundle import Bundle
    from bundle.loader import Resource

MAX_CARD_BYTES = 1024 * 1024
"""The largest agent card read; a bigger body is refused."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest response body (or event stream) read from a remote agent."""
MAX_ANSWER_CHARS = 1024 * 1024
"""The longest answer handed to the caller (it travels to the caller's process)."""
CONNECT_SECONDS = 10.0
"""How long one connection to the remote may take to open."""
CANCEL_SECONDS = 10.0
"""How long cancelling a remote task may take, in the background."""

log = structlog.get_logger("goondan.remote_agents")


class RemoteAgentFailed(IpcError):
    """The remote agent could not be reached, or its task did not complete."""

    code = DeliveryCode.REMOTE_AGENT_FAILED


class RemoteAgentsUnavailable(ConfigError):
    """The swarm lists RemoteAgents and the ``a2a`` extra is not installed."""

    code = ConfigCode.E_CONFIG_PACKAGE_NOT_INSTALLED


@dataclass(frozen=True)
class RemoteTarget:
    """One RemoteAgent, ready to be called."""

    name: str
    card_url: str
    timeout_seconds: float | None = None
    token: Secret | None = field(default=None, repr=False)
    """The bearer token (masked in every ``str``/``repr``)."""


def remote_targets(bundle: Bundle, swarm: Resource) -> dict[str, RemoteTarget]:
    """The RemoteAgents ``swarm`` lists, their tokens resolved now: a token that is not set
    stops the start (``SecretUnavailable``), as does a missing ``a2a`` extra."""
    remotes = bundle.swarm_remote_agents(swarm)
    if remotes and not a2a_client_installed():
        names = ", ".join(r.name for r in remotes)
        raise RemoteAgentsUnavailable(
            f"the swarm delegates to RemoteAgent {names}, which needs the a2a-sdk: {A2A_EXTRA}"
        )
    targets = {}
    for remote in remotes:
        spec: RemoteAgentSpec = remote.spec
        token = None
        if spec.auth is not None:
            source = ValueSource(value_from=spec.auth.bearer.value_from)
            token = resolve_value(source, field="token")
        targets[remote.name] = RemoteTarget(remote.name, spec.card_url, spec.timeout_seconds, token)
    return targets
