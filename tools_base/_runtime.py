"""The inter-agent API a tool reaches through ``ToolContext.runtime``."""

from __future__ import annotations

from typing import Protocol, TypedDict

from tools_base._json import JsonObject, JsonValue


class AgentEvent(TypedDict, total=False):
    """What one agent sends another."""

    input: str
    """The text the target agent receives as its user message."""
    instanceKey: str
    """Target conversation; defaults to the caller's instance key."""
    eventType: str
    """Free-form event type; ``agent.request`` / ``agent.send`` by default."""
    metadata: JsonObject
    """Free-form metadata carried to the target Turn."""


class AgentRequestResult(TypedDict):
    """Outcome of :meth:`AgentToolRuntime.request`."""

    target: str
    eventId: str
    correlationId: str
    accepted: bool
    async_: bool
    response: JsonValue


class AgentSendResult(TypedDict):
    """Outcome of :meth:`AgentToolRuntime.send`."""

    target: str
    eventId: str
    accepted: bool


class AgentSpawnResult(TypedDict):
    """Outcome of :meth:`AgentToolRuntime.spawn`."""

    target: str
    instanceKey: str
    spawned: bool
    cwd: str | None


class SpawnedAgentInfo(TypedDict):
    """One instance recorded by ``spawn``."""

    target: str
    instanceKey: str
    ownerAgent: str
    ownerInstanceKey: str
    createdAt: str
    cwd: str | None


class AgentListResult(TypedDict):
    """Outcome of :meth:`AgentToolRuntime.list`."""

    agents: list[SpawnedAgentInfo]


class AgentCatalogResult(TypedDict):
    """Outcome of :meth:`AgentToolRuntime.catalog`."""

    swarmName: str
    entryAgent: str
    selfAgent: str
    availableAgents: list[str]
    callableAgents: list[str]


class AgentToolRuntime(Protocol):
    """Talk to the other agents of the Swarm; the runtime injects it as ``ctx.runtime``.

    Every method raises :class:`tools_base.ToolError` with a distinct ``code`` when the
    Orchestrator refuses or the target fails (unknown agent, crash, timeout, cycle), so the
    calling tool fails with a structured result.
    """

    async def request(
        self, target: str, event: AgentEvent, *, timeout_ms: int | None = None, async_: bool = False
    ) -> AgentRequestResult:
        """Send ``event`` to ``target`` and wait for its Turn's answer (unless ``async_``)."""
        ...

    async def send(self, target: str, event: AgentEvent) -> AgentSendResult:
        """Fire-and-forget delivery of ``event`` to ``target``."""
        ...

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> AgentSpawnResult:
        """Prepare an instance of an agent declared in the Swarm."""
        ...

    async def list(self, *, include_all: bool = False) -> AgentListResult:
        """Instances spawned by the caller (or by anyone with ``include_all``)."""
        ...

    async def catalog(self) -> AgentCatalogResult:
        """Swarm name, entry agent, the caller, and the agents it may call."""
        ...
