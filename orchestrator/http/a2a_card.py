"""The A2A agent card of a swarm's agent: who it is, where its JSON-RPC endpoint is, and what
it can do (see :mod:`orchestrator.http.a2a`). Imports the ``a2a-sdk``: only
:mod:`orchestrator.http.a2a` imports this module, once it found the extra installed."""

from __future__ import annotations

import importlib.metadata

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.requests import Request

from orchestrator.operations import SwarmOperations

TEXT_MODE = "text/plain"
"""What the agents take and give: text (a structured answer travels as JSON text)."""
BEARER_SCHEME = "bearer"
"""The card's name of the daemon's bearer token scheme."""


def goondan_version() -> str:
    """The installed goondan-py's version (``0.0.0`` in a source tree without metadata)."""
    try:
        return importlib.metadata.version("goondan-py")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def base_url(request: Request) -> str:
    """``scheme://host[:port]`` the caller reached the daemon at (its ``Host``, which the Host
    check already found to be one of the listener's names on TCP)."""
    host = request.headers.get("host") or "localhost"
    return f"{request.url.scheme}://{host}"


def rpc_url(request: Request, agent: str) -> str:
    """The absolute URL of ``agent``'s JSON-RPC endpoint, as the caller reaches the daemon."""
    return f"{base_url(request)}/a2a/{agent}"


def skills_of(daemon: SwarmOperations, agent: str, said: str) -> list[AgentSkill]:
    """The agent itself as a skill (what it does: ``said``), then one skill per function of
    its Tools (``{tool}__{export}``, as its model sees them)."""
    skills = [
        AgentSkill(
            id=agent,
            name=agent,
            description=said,
            tags=["agent", daemon.name],
            input_modes=[TEXT_MODE],
            output_modes=[TEXT_MODE],
        )
    ]
    view = daemon.agent(agent)
    plan = view.plan if view is not None else None
    for tool in plan.tools if plan is not None else []:
        for export in tool.exports:
            name = f"{tool.name}__{export.name}"
            told = export.description or f"The {export.name} function of the {tool.name} tool."
            skills.append(
                AgentSkill(id=name, name=name, description=told.strip(), tags=["tool", tool.name])
            )
    return skills


def agent_card(
    daemon: SwarmOperations, agent: str, said: str, request: Request, bearer: bool
) -> AgentCard:
    """The card of ``agent`` (which does what ``said`` says) as ``request``'s caller reaches
    it; with ``bearer``, it says the endpoint takes the daemon's bearer token."""
    card = AgentCard(
        name=agent,
        description=said,
        supported_interfaces=[
            AgentInterface(
                url=rpc_url(request, agent),
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        provider=AgentProvider(organization=f"goondan swarm {daemon.name}", url=base_url(request)),
        version=goondan_version(),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=[TEXT_MODE],
        default_output_modes=[TEXT_MODE],
        skills=skills_of(daemon, agent, said),
    )
    if bearer:
        scheme = HTTPAuthSecurityScheme(
            scheme="Bearer", description="The daemon's API token (--api-token-env)."
        )
        card.security_schemes[BEARER_SCHEME].CopyFrom(
            SecurityScheme(http_auth_security_scheme=scheme)
        )
        requirement = SecurityRequirement()
        requirement.schemes[BEARER_SCHEME].CopyFrom(StringList())
        card.security_requirements.append(requirement)
    return card
