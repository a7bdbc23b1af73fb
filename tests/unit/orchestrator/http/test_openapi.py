"""The OpenAPI document is the API: it validates as OpenAPI 3.1, every route the app serves
has its operation and every operation a route, the request types take what the routes take,
and the daemon serves it at ``/openapi.json``. (The golden bodies fit its schemas: see
``tests/unit/orchestrator/operations/test_golden_bodies.py``.)"""

from __future__ import annotations

import msgspec
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from orchestrator.http.app import build_app
from orchestrator.http.front_doors import front_door_operations
from orchestrator.http.openapi import OPERATIONS, document, path_template
from orchestrator.http.requests import REQUEST_FIELDS, SEND_FIELDS
from orchestrator.operations.bodies import SendRequest, TurnRequest
from tests.support.fake_swarm import FakeSwarm


def starlette_of(app: ASGIApp) -> Starlette:
    """The router inside the middleware the API wraps it in."""
    while not isinstance(app, Starlette):
        app = app.app  # type: ignore[attr-defined]
    return app


def served_routes() -> set[tuple[str, str]]:
    app = starlette_of(build_app(FakeSwarm()))
    served = set()
    for route in app.routes:
        assert isinstance(route, Route), route
        for method in route.methods or ():
            if method != "HEAD":
                served.add((method, path_template(route.path)))
    return served


def test_the_document_is_valid_openapi_3_1() -> None:
    whole = document(front_door_operations())
    validate(whole)
    assert whole["openapi"] == "3.1.0"


def test_every_route_served_is_documented_and_nothing_else() -> None:
    documented = {
        (method, path_template(path)) for method, path in {**OPERATIONS, **front_door_operations()}
    }
    assert served_routes() - documented == set(), "routes the document leaves out"
    assert documented - served_routes() == set(), "operations no route serves"


def test_the_request_types_take_what_the_routes_take() -> None:
    def fields(kind: type[msgspec.Struct]) -> set[str]:
        return {f.encode_name for f in msgspec.structs.fields(kind)}

    assert fields(TurnRequest) == set(REQUEST_FIELDS)
    assert fields(SendRequest) == set(SEND_FIELDS)


async def test_the_daemon_serves_its_document() -> None:
    import httpx2

    app = build_app(FakeSwarm())
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    body = response.json()
    assert "/v1/agents/{agent}/requests" in body["paths"]
    schema = body["components"]["schemas"]["TurnRequest"]
    assert schema["properties"]["input"]["description"] == "The text the agent answers (not empty)."
