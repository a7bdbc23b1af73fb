"""Whether a body the API answered fits the schema the OpenAPI document gives it."""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import urlsplit

import jsonschema

from orchestrator.http.front_doors import front_door_operations
from orchestrator.http.openapi import document


@functools.cache
def _document() -> dict[str, Any]:
    return document(front_door_operations())


def _template_of(method: str, path: str) -> str | None:
    for template, operations in _document()["paths"].items():
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+(?:/[^/]+)*?", re.escape(template))
        if method.lower() in operations and re.fullmatch(pattern, path):
            return str(template)
    return None


def schema_problem(method: str, url: str, status: int, body: object) -> str | None:
    """Why ``body`` (JSON) does not fit the document's schema of ``method url`` answering
    ``status``; ``None`` when it fits or the document gives no JSON schema for it."""
    path = urlsplit(url).path
    template = _template_of(method, path)
    if template is None:
        return None if status == 404 else f"{method} {path} is in no operation"
    responses = _document()["paths"][template][method.lower()]["responses"]
    response = responses.get(str(status), responses["default"])
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    root = {**schema, "components": _document()["components"]}
    try:
        jsonschema.Draft202012Validator(root).validate(body)
    except jsonschema.ValidationError as exc:
        return f"{method} {path} {status}: {exc.message} at {list(exc.absolute_path)}"
    return None
