"""The front doors: protocols besides the daemon's own API that callers reach agents through.

Each door is a module under :mod:`orchestrator.http` that maps its protocol's shapes onto the
operations (:class:`~orchestrator.operations.SwarmOperations`) and the request desk
(:class:`~orchestrator.requests.RequestDesk`) and back, with no Turn logic of its own; this
module lists their routes for :func:`orchestrator.http.app.build_app` and says which agents a
door shows (``Agent.spec.expose`` and ``Swarm.spec.expose``).
"""

from __future__ import annotations

from functools import partial

from starlette.routing import BaseRoute

from bundle.spec_agent import FrontDoor
from orchestrator.http.a2a import a2a_routes
from orchestrator.operations import SwarmOperations
from orchestrator.operations.protocol import AgentView
from orchestrator.requests import RequestDesk


def exposed(daemon: SwarmOperations, door: FrontDoor) -> list[AgentView]:
    """The agents ``door`` shows, by name."""
    views = (daemon.agent(name) for name in sorted(daemon.agent_names()))
    return [
        view
        for view in views
        if view is not None and (view.plan is None or door in view.plan.front_doors)
    ]


def shown(daemon: SwarmOperations, door: FrontDoor, agent: str) -> bool:
    """Whether ``door`` shows ``agent`` (an agent of the swarm it exposes)."""
    view = daemon.agent(agent)
    return view is not None and (view.plan is None or door in view.plan.front_doors)


def description(daemon: SwarmOperations, agent: str) -> str:
    """What ``agent`` does, as its callers are told (``Agent.spec.description``, else a line
    naming it and its swarm)."""
    view = daemon.agent(agent)
    described = view.plan.description if view is not None and view.plan is not None else None
    return described or f"The {agent} agent of the {daemon.name} swarm."


def front_door_routes(daemon: SwarmOperations, desk: RequestDesk) -> list[BaseRoute]:
    """The routes of every front door (beside ``/v1/chat/completions``, served by
    :mod:`orchestrator.http.openai`)."""
    routes: list[BaseRoute] = []
    routes += a2a_routes(daemon, desk, partial(shown, daemon, "a2a"), partial(description, daemon))
    return routes
