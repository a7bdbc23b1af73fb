"""The JSON Schema of every answer of the HTTP API, for the API reference and for clients.

:func:`answer_schemas` is all a documentation build needs: no daemon, no CLI, no network.
:data:`ROUTES` names the answer of each route (its 2xx body; every failure answers
:class:`~orchestrator.operations.answers.ErrorBody`).
"""

from __future__ import annotations

import ast
import functools
import inspect
from types import ModuleType
from typing import Any

import msgspec

from orchestrator.operations import answers, bodies
from orchestrator.operations.answers import (
    ANSWERS,
    Accepted,
    Answer,
    ApprovalAnswer,
    Approvals,
    Cancelled,
    Health,
    InstanceDeleted,
    InstanceRestarted,
    Instances,
    Readiness,
    Requests,
    RequestState,
    Restarted,
    SwarmStatus,
    TraceUsage,
    UsageReport,
)

ROUTES: dict[str, type[Answer]] = {
    "GET /healthz": Health,
    "GET /readyz": Readiness,
    "GET /v1/agents": SwarmStatus,
    "POST /v1/agents/{agent}/sends": Accepted,
    "POST /v1/agents/{agent}/restart": Restarted,
    "GET /v1/requests": Requests,
    "GET /v1/requests/{id}": RequestState,
    "POST /v1/requests/{id}/cancel": Cancelled,
    "GET /v1/instances": Instances,
    "GET /v1/usage": UsageReport,
    "GET /v1/usage?trace=ID": TraceUsage,
    "DELETE /v1/agents/{agent}/instances/{key}": InstanceDeleted,
    "POST /v1/agents/{agent}/instances/{key}/restart": InstanceRestarted,
    "GET /v1/approvals": Approvals,
    "GET /v1/approvals/{id}": ApprovalAnswer,
    "POST /v1/approvals/{id}/approve": ApprovalAnswer,
    "POST /v1/approvals/{id}/reject": ApprovalAnswer,
}
"""Each route → the struct of its successful body. Not here: a request's answer (the wire
form of ``ipc.delegation.DelegateAnswer``), the event stream (server-sent runtime events),
``/metrics`` (Prometheus text) and the OpenAI-compatible routes (OpenAI's bodies)."""


def answer_schema(kind: type[Answer]) -> dict[str, object]:
    """The JSON Schema (2020-12) of the bodies of ``kind``, each struct and field described by
    its docstring."""
    schema: dict[str, object] = msgspec.json.schema(kind)
    definitions = schema.get("$defs")
    if isinstance(definitions, dict):
        described = _docstrings(answers)
        for name, definition in definitions.items():
            _describe(definition, described.get(name, {}))
    return schema


def describe_components(components: dict[str, Any]) -> None:
    """Give each struct's schema among ``components`` (by struct name) the docstrings of its
    fields, where it has none (structs of :mod:`answers` and of :mod:`bodies`)."""
    described = {**_docstrings(answers), **_docstrings(bodies)}
    for name, definition in components.items():
        if isinstance(definition, dict):
            _describe(definition, described.get(name, {}))


def _describe(definition: dict[str, object], fields: dict[str, str]) -> None:
    properties = definition.get("properties")
    if not isinstance(properties, dict):
        return
    for key, spec in properties.items():
        text = fields.get(key)
        if text is not None and isinstance(spec, dict):
            spec.setdefault("description", text)


@functools.cache
def _docstrings(module: ModuleType) -> dict[str, dict[str, str]]:
    """Struct name → wire name of each field → its docstring, read from the source of
    ``module`` (msgspec does not keep them); a field a struct inherits has its base's."""
    tree = ast.parse(inspect.getsource(module))
    own: dict[type, list[tuple[str, str]]] = {}
    for node in tree.body:
        kind = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
        if isinstance(node, ast.ClassDef) and isinstance(kind, type):
            own[kind] = _field_docs(node)
    found: dict[str, dict[str, str]] = {}
    for kind in own:
        wire = {f.name: f.encode_name for f in msgspec.structs.fields(kind)}
        inherited = [doc for base in reversed(kind.__mro__) for doc in own.get(base, [])]
        found[kind.__name__] = {wire.get(name, name): text for name, text in inherited}
    return found


def _field_docs(node: ast.ClassDef) -> list[tuple[str, str]]:
    """``(field, docstring)`` of each annotated field of ``node`` followed by a string."""
    docs = []
    for field, doc in zip(node.body, node.body[1:], strict=False):
        if not isinstance(field, ast.AnnAssign) or not isinstance(field.target, ast.Name):
            continue
        constant = doc.value if isinstance(doc, ast.Expr) else None
        text = constant.value if isinstance(constant, ast.Constant) else None
        if isinstance(text, str):
            docs.append((field.target.id, text.strip()))
    return docs


def answer_schemas() -> dict[str, dict[str, object]]:
    """The JSON Schema of every answer, by the struct's name (``SwarmStatus``...)."""
    return {kind.__name__: answer_schema(kind) for kind in ANSWERS}
