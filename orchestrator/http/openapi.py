"""The HTTP API as an OpenAPI 3.1 document, served at ``GET /openapi.json``.

Every route is one :class:`Operation` of :data:`OPERATIONS` (and of each front door's table):
its summary, what it takes and what it answers, as types of :mod:`orchestrator.operations`
(the answers the routes really encode, and :mod:`~orchestrator.operations.bodies`' request
bodies). A test checks that every route the app serves has its operation and that the bodies
the routes answer fit their schemas, so the document is the API, not a description of it.
Bodies another specification defines (OpenAI's, MCP's, A2A's, AG-UI's) are named by a link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from orchestrator.operations import answers as a
from orchestrator.operations import bodies as b
from orchestrator.operations.schema import describe_components

Schema = dict[str, Any]

OPENAI_API = "https://platform.openai.com/docs/api-reference"
SSE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Query:
    """A query parameter."""

    name: str
    description: str
    schema: Schema = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of the API, as the document describes it."""

    summary: str
    answer: type[msgspec.Struct] | Schema | None = None
    """The JSON body of its success (``None``: no JSON body)."""
    status: int = 200
    body: type[msgspec.Struct] | Schema | None = None
    """The JSON request body it takes."""
    stream: bool = False
    """It may answer with server-sent events instead (or only, without ``answer``)."""
    text: str | None = None
    """The media type of a body that is not JSON (``/metrics``)."""
    query: tuple[Query, ...] = ()
    tag: str = "swarm"
    idempotent_key: bool = False
    """It takes ``Idempotency-Key`` and names the request it accepted."""
    external: str | None = None
    """Where another specification defines its bodies."""
    also: tuple[tuple[int, type[msgspec.Struct]], ...] = ()
    """Other statuses whose body is not the error body, with theirs."""


AGENT_FILTER = Query("agent", "Only this agent's.")
WAIT_FOR_TURN = Query("wait", "1: also the Turn's answer, once it ends.")
WAIT = Query("wait", "Also wait up to this many seconds (at most 300).", {"type": "number"})

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/healthz"): Operation("The process is up.", a.Health, tag="health"),
    ("GET", "/readyz"): Operation(
        "200 when the entry agent is ready, else 503.",
        a.Readiness,
        tag="health",
        also=((503, a.Readiness),),
    ),
    ("GET", "/metrics"): Operation(
        "Prometheus metrics.", text="text/plain; version=0.0.4", tag="health"
    ),
    ("GET", "/openapi.json"): Operation("This document.", {"type": "object"}, tag="health"),
    ("GET", "/v1/agents"): Operation("One status row per agent and per Connection.", a.SwarmStatus),
    ("POST", "/v1/agents/{agent}/requests"): Operation(
        "Run a Turn and answer with its answer (502, 409 or 429 when it failed).",
        b.TurnAnswer,
        body=b.TurnRequest,
        stream=True,
        tag="requests",
        idempotent_key=True,
        also=((409, b.TurnAnswer), (502, b.TurnAnswer)),
    ),
    ("POST", "/v1/agents/{agent}/sends"): Operation(
        "Deliver text without waiting.",
        a.Accepted,
        202,
        body=b.SendRequest,
        tag="requests",
        idempotent_key=True,
    ),
    ("POST", "/v1/agents/{agent}/restart"): Operation(
        "Stop the agent gracefully and start it again.",
        a.Restarted,
        query=(Query("fresh", "1: delete its conversations in between."),),
    ),
    ("GET", "/v1/requests"): Operation(
        "The requests waiting for an answer.", a.Requests, tag="requests"
    ),
    ("GET", "/v1/requests/{id}"): Operation(
        "An accepted request by its id: running, or done with its answer.",
        a.RequestState,
        query=(WAIT,),
        tag="requests",
    ),
    ("GET", "/v1/requests/{id}/events"): Operation(
        "The request's stream again, after Last-Event-ID, until its answer.",
        stream=True,
        tag="requests",
    ),
    ("POST", "/v1/requests/{id}/cancel"): Operation(
        "Cancel a request (by request id or trace id).",
        a.Cancelled,
        body=b.CancelRequest,
        tag="requests",
    ),
    ("GET", "/v1/instances"): Operation(
        "The conversation instances on disk.", a.Instances, query=(AGENT_FILTER,), tag="instances"
    ),
    ("DELETE", "/v1/agents/{agent}/instances/{key}"): Operation(
        "Delete one conversation.", a.InstanceDeleted, tag="instances"
    ),
    ("POST", "/v1/agents/{agent}/instances/{key}/restart"): Operation(
        "Reload one conversation from disk; its running Turn is answered CANCELLED.",
        a.InstanceRestarted,
        tag="instances",
    ),
    ("GET", "/v1/usage"): Operation(
        "Tokens and cost per agent, instance, recent trace and pool (one trace with ?trace=).",
        {
            "oneOf": [
                {"$ref": "#/components/schemas/UsageReport"},
                {"$ref": "#/components/schemas/TraceUsage"},
            ]
        },
        query=(
            Query("traces", "How many recent traces.", {"type": "integer", "minimum": 0}),
            Query("trace", "One trace's usage."),
        ),
        tag="usage",
    ),
    ("GET", "/v1/events"): Operation(
        "Runtime events as they happen.",
        stream=True,
        query=(AGENT_FILTER, Query("trace", "Only this trace's.")),
        tag="events",
    ),
    ("GET", "/v1/approvals"): Operation(
        "Tool calls parked for approval.",
        a.Approvals,
        query=(AGENT_FILTER, Query("all", "1: decided ones too.")),
        tag="approvals",
    ),
    ("GET", "/v1/approvals/{id}"): Operation("One approval.", a.ApprovalAnswer, tag="approvals"),
    ("POST", "/v1/approvals/{id}/approve"): Operation(
        "Approve a parked call: it runs.",
        a.ApprovalAnswer,
        body=b.ApproveRequest,
        query=(WAIT_FOR_TURN,),
        tag="approvals",
    ),
    ("POST", "/v1/approvals/{id}/reject"): Operation(
        "Reject a parked call: the model gets E_TOOL_REJECTED with the reason.",
        a.ApprovalAnswer,
        body=b.RejectRequest,
        query=(WAIT_FOR_TURN,),
        tag="approvals",
    ),
    ("GET", "/v1/models"): Operation(
        "The agents as OpenAI models.",
        {"type": "object", "required": ["object", "data"]},
        tag="openai",
        external=f"{OPENAI_API}/models/list",
    ),
    ("POST", "/v1/chat/completions"): Operation(
        "A Turn as an OpenAI chat completion (the agent is the model).",
        {"type": "object"},
        body={"type": "object", "required": ["model", "messages"]},
        stream=True,
        tag="openai",
        idempotent_key=True,
        external=f"{OPENAI_API}/chat/create",
    ),
}
"""Every route of the daemon's own API (the front doors add theirs, see :func:`document`)."""

_PARAMETER = re.compile(r"\{([a-z_]+)(?::[a-z]+)?\}")


def path_template(path: str) -> str:
    """A Starlette path (``{key:path}``) as OpenAPI writes it (``{key}``)."""
    return _PARAMETER.sub(r"{\1}", path)


def document(extra: Mapping[tuple[str, str], Operation] | None = None) -> Schema:
    """The OpenAPI 3.1 document of :data:`OPERATIONS` and ``extra`` (the front doors')."""
    operations = {**OPERATIONS, **(extra or {})}
    structs = {
        kind
        for op in operations.values()
        for kind in (op.answer, op.body, *(k for _, k in op.also))
        if isinstance(kind, type)
    }
    _, components = msgspec.json.schema_components(
        sorted({a.ErrorBody, a.TraceUsage, a.UsageReport, *structs}, key=lambda t: t.__name__),
        ref_template="#/components/schemas/{name}",
    )
    describe_components(components)
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), op in sorted(operations.items(), key=lambda item: item[0][1]):
        paths.setdefault(path_template(path), {})[method.lower()] = _operation(method, path, op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "goondan daemon",
            "version": _version(),
            "description": "The HTTP API of a running swarm: on the state directory's api.sock "
            "and, with `run --listen`, on TCP, where every request carries the bearer token "
            "when the daemon has one.",
        },
        "security": [{}, {"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("goondan-py")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _schema(kind: type[msgspec.Struct] | Schema) -> Schema:
    if isinstance(kind, type):
        return {"$ref": f"#/components/schemas/{kind.__name__}"}
    return kind


def _operation(method: str, path: str, op: Operation) -> Schema:
    described: Schema = {
        "summary": op.summary,
        "operationId": f"{method.lower()}{re.sub(r'[^A-Za-z0-9]+', '_', path_template(path))}",
        "tags": [op.tag],
        "responses": {
            str(op.status): _success(op),
            **{
                str(status): {
                    "description": f"The answer, as {status}.",
                    "content": {"application/json": {"schema": _schema(kind)}},
                }
                for status, kind in op.also
            },
            "default": {
                "description": "An error: its code and message (see the error-code reference).",
                "content": {"application/json": {"schema": _schema(a.ErrorBody)}},
            },
        },
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAMETER.findall(path)
    ]
    parameters += [
        {"name": q.name, "in": "query", "description": q.description, "schema": q.schema}
        for q in op.query
    ]
    if op.idempotent_key:
        parameters.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "description": "1 to 255 printable ASCII characters: the same key and body "
                "within the retention start no second Turn.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            }
        )
    if path.endswith("/events") and path.startswith("/v1/requests"):
        parameters.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "description": "Replay what came after this event.",
                "schema": {"type": "string"},
            }
        )
    if parameters:
        described["parameters"] = parameters
    if op.body is not None:
        described["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _schema(op.body)}},
        }
    if op.external is not None:
        described["externalDocs"] = {"url": op.external}
    return described


def _success(op: Operation) -> Schema:
    content: Schema = {}
    if op.answer is not None:
        content["application/json"] = {"schema": _schema(op.answer)}
    if op.stream:
        content[SSE] = {"schema": {"type": "string", "description": "Server-sent events."}}
    if op.text is not None:
        content[op.text] = {"schema": {"type": "string"}}
    success: Schema = {"description": op.summary}
    if content:
        success["content"] = content
    if op.idempotent_key:
        success["headers"] = {
            "X-Goondan-Request-Id": {
                "description": "The accepted request's id (GET /v1/requests/{id}).",
                "schema": {"type": "string"},
            }
        }
    return success
