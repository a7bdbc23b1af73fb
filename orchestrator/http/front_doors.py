"""The front doors: protocols besides the daemon's own API that callers reach agents through.

Each door is a module under :mod:`orchestrator.http` that maps its protocol's shapes onto the
operations (:class:`~orchestrator.operations.SwarmOperations`) and the request desk
(:class:`~orchestrator.requests.RequestDesk`) and back, with no Turn logic of its own; this
module lists their routes for :func:`orchestrator.http.app.build_app` and their operations for
the OpenAPI document. Which agents a door shows: :mod:`orchestrator.http.exposure` (a door is
handed its :class:`~orchestrator.http.exposure.DoorView`, and never imports this module, which
imports it).
"""

from __future__ import annotations

import functools

import msgspec
from starlette.routing import BaseRoute

from orchestrator.http.a2a import A2A_OPERATIONS, a2a_routes
from orchestrator.http.ag_ui import AG_UI_OPERATIONS, ag_ui_routes
from orchestrator.http.exposure import DoorView
from orchestrator.http.mcp_server import MCP_OPERATIONS, mcp_routes
from orchestrator.http.openapi import Operation, document
from orchestrator.http.responses_api import RESPONSES_OPERATIONS, responses_routes
from orchestrator.operations import SwarmOperations
from orchestrator.requests import RequestDesk
from orchestrator.tasks import TaskOwner


def front_door_routes(
    daemon: SwarmOperations, desk: RequestDesk, tasks: TaskOwner | None = None
) -> list[BaseRoute]:
    """The routes of every front door (beside ``/v1/chat/completions``, served by
    :mod:`orchestrator.http.openai`); a door's background work runs in ``tasks`` (the
    daemon's task owner)."""
    routes: list[BaseRoute] = []
    routes += responses_routes(daemon, desk)
    routes += mcp_routes(daemon, desk, DoorView(daemon, "mcp"), tasks)
    a2a = DoorView(daemon, "a2a")
    routes += a2a_routes(daemon, desk, a2a.shows, a2a.describe)
    routes += ag_ui_routes(daemon, desk, DoorView(daemon, "agUi").shows)
    return routes


def front_door_operations() -> dict[tuple[str, str], Operation]:
    """What the OpenAPI document says of each front door's routes (by method and path, as
    :func:`front_door_routes` serves them)."""
    return {**RESPONSES_OPERATIONS, **MCP_OPERATIONS, **A2A_OPERATIONS, **AG_UI_OPERATIONS}


@functools.cache
def api_document() -> bytes:
    """The OpenAPI document ``/openapi.json`` serves: the API's and the doors' (made once)."""
    return msgspec.json.encode(document(front_door_operations()))
