"""The front doors: protocols besides the daemon's own API that callers reach agents through.

Each door is a module under :mod:`orchestrator.http` that maps its protocol's shapes onto the
operations (:class:`~orchestrator.operations.SwarmOperations`) and the request desk
(:class:`~orchestrator.requests.RequestDesk`) and back, with no Turn logic of its own; this
module lists their routes for :func:`orchestrator.http.app.build_app`. Which agents a door
shows (``Agent.spec.expose`` and ``Swarm.spec.expose``) is :mod:`orchestrator.http.exposure`,
which a door imports (never this module, which imports the doors).
"""

from __future__ import annotations

from starlette.routing import BaseRoute

# Which agents a door shows lives in its own module: the doors read it, and this one imports
# the doors (names kept here for the callers that know them from here).
from orchestrator.http.exposure import description, exposed, shown
from orchestrator.http.responses_api import responses_routes
from orchestrator.operations import SwarmOperations
from orchestrator.requests import RequestDesk

__all__ = ["description", "exposed", "front_door_routes", "shown"]


def front_door_routes(daemon: SwarmOperations, desk: RequestDesk) -> list[BaseRoute]:
    """The routes of every front door (beside ``/v1/chat/completions``, served by
    :mod:`orchestrator.http.openai`)."""
    routes: list[BaseRoute] = []
    routes += responses_routes(daemon, desk)
    return routes
