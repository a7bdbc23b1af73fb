"""The front doors: protocols besides the daemon's own API that callers reach agents through.

Each door is a module under :mod:`orchestrator.http` that maps its protocol's shapes onto the
operations (:class:`~orchestrator.operations.SwarmOperations`) and the request desk
(:class:`~orchestrator.requests.RequestDesk`) and back, with no Turn logic of its own; this
module lists their routes for :func:`orchestrator.http.app.build_app` and their operations for
the OpenAPI document. Which agents a door shows: :mod:`orchestrator.http.exposure`.
"""

from __future__ import annotations

import functools

import msgspec
from starlette.routing import BaseRoute

from orchestrator.http.ag_ui import AG_UI_OPERATIONS, ag_ui_routes
from orchestrator.http.exposure import shown
from orchestrator.http.openapi import Operation, document
from orchestrator.http.responses_api import RESPONSES_OPERATIONS, responses_routes
from orchestrator.operations import SwarmOperations
from orchestrator.requests import RequestDesk


def front_door_routes(daemon: SwarmOperations, desk: RequestDesk) -> list[BaseRoute]:
    """The routes of every front door (beside ``/v1/chat/completions``, served by
    :mod:`orchestrator.http.openai`)."""
    routes: list[BaseRoute] = []
    routes += responses_routes(daemon, desk)
    routes += ag_ui_routes(daemon, desk, lambda agent: shown(daemon, "agUi", agent))
    return routes


def front_door_operations() -> dict[tuple[str, str], Operation]:
    """What the OpenAPI document says of each front door's routes (by method and path, as
    :func:`front_door_routes` serves them)."""
    operations: dict[tuple[str, str], Operation] = {}
    operations.update(RESPONSES_OPERATIONS)
    operations.update(AG_UI_OPERATIONS)
    return operations


@functools.cache
def api_document() -> bytes:
    """The OpenAPI document ``/openapi.json`` serves: the API's and the doors' (made once)."""
    return msgspec.json.encode(document(front_door_operations()))
