"""Which agents a front door shows (``Agent.spec.expose`` and ``Swarm.spec.expose``), and
what it tells its callers each one does (``Agent.spec.description``): what every door asks
before it maps a call onto the operations."""

from __future__ import annotations

from dataclasses import dataclass

from bundle.spec_agent import FrontDoor
from orchestrator.operations import SwarmOperations
from orchestrator.operations.protocol import AgentView


def _shows(view: AgentView | None, door: FrontDoor) -> bool:
    """Whether ``door`` shows the agent of ``view`` (one with no plan yet: every door)."""
    return view is not None and (view.plan is None or door in view.plan.front_doors)


def exposed(daemon: SwarmOperations, door: FrontDoor) -> list[AgentView]:
    """The agents ``door`` shows, by name."""
    views = (daemon.agent(name) for name in sorted(daemon.agent_names()))
    return [view for view in views if view is not None and _shows(view, door)]


def shown(daemon: SwarmOperations, door: FrontDoor, agent: str) -> bool:
    """Whether ``door`` shows ``agent`` (an agent of the swarm it exposes)."""
    return _shows(daemon.agent(agent), door)


def description(daemon: SwarmOperations, agent: str) -> str:
    """What ``agent`` does, as its callers are told (``Agent.spec.description``, else a line
    naming it and its swarm)."""
    view = daemon.agent(agent)
    described = view.plan.description if view is not None and view.plan is not None else None
    return described or f"The {agent} agent of the {daemon.name} swarm."


@dataclass(frozen=True, slots=True)
class DoorView:
    """Which agents one door shows, and how each is described: what a door's module is given."""

    daemon: SwarmOperations
    door: FrontDoor

    def agents(self) -> list[str]:
        """The agents the door shows, by name."""
        return [view.name for view in exposed(self.daemon, self.door)]

    def shows(self, agent: str) -> bool:
        """Whether the door shows ``agent``."""
        return shown(self.daemon, self.door, agent)

    def describe(self, agent: str) -> str:
        """What ``agent`` does, as its callers are told."""
        return description(self.daemon, agent)
