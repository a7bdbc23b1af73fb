"""``reference/http-api.md``: every route of the daemon's HTTP API, from the OpenAPI document
it serves at ``/openapi.json`` (:mod:`orchestrator.http.openapi`): what each takes and
answers, and each body's fields."""

from __future__ import annotations

from typing import Any

from orchestrator.http.front_doors import front_door_operations
from orchestrator.http.openapi import document
from orchestrator.reference.markdown import anchor, table

Schema = dict[str, Any]
TAG_TITLES = {"openai": "OpenAI", "mcp": "MCP", "a2a": "A2A", "agui": "AG-UI"}
"""Tags whose title is not their name capitalised."""


def http_api_page() -> str:
    """The page: the routes by tag, then each body's fields."""
    whole = document(front_door_operations())
    components: dict[str, Schema] = whole["components"]["schemas"]
    parts = [
        "# HTTP API\n\n",
        "Every route of the daemon, generated from the OpenAPI 3.1 document it serves at "
        "`GET /openapi.json` (on `api.sock`, and on TCP with `run --listen`, where every "
        "request carries the bearer token when the daemon has one). Every failure answers "
        '[`ErrorBody`](#errorbody): `{"error": {"code", "message"}}`.\n',
    ]
    by_tag: dict[str, list[tuple[str, str, Schema]]] = {}
    for path, operations in whole["paths"].items():
        for method, operation in operations.items():
            by_tag.setdefault(operation["tags"][0], []).append((method.upper(), path, operation))
    for tag, operations in by_tag.items():
        parts.append(f"\n## {TAG_TITLES.get(tag, tag.capitalize())}\n\n")
        rows = [(f"`{m} {p}`", _takes(op), _answers(op), op["summary"]) for m, p, op in operations]
        parts.append(table(("route", "takes", "answers", "what it does"), rows))
    parts.append("\n## Bodies\n")
    for name in sorted(components):
        schema = components[name]
        parts.append(f"\n### {name}\n\n{' '.join(schema.get('description', '').split())}\n\n")
        required = set(schema.get("required", ()))
        fields = [
            (
                f"`{field}`" + (" (required)" if field in required else ""),
                _type(spec),
                " ".join(str(spec.get("description", "")).replace("``", "`").split()),
            )
            for field, spec in schema.get("properties", {}).items()
        ]
        parts.append(table(("field", "type", "description"), fields))
    return "".join(parts)


def _link(schema: Schema) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return f"[`{name}`](#{anchor(name)})"
    if "oneOf" in schema:
        return " or ".join(_link(s) for s in schema["oneOf"])
    return "JSON"


def _takes(operation: Schema) -> str:
    taken = []
    for parameter in operation.get("parameters", ()):
        if parameter["in"] in ("query", "header"):
            taken.append(f"`{parameter['name']}`")
    body = operation.get("requestBody")
    if body is not None:
        taken.insert(0, _link(body["content"]["application/json"]["schema"]))
    external = operation.get("externalDocs")
    if external is not None:
        taken.append(f"([defined there]({external['url']}))")
    return ", ".join(taken)


def _answers(operation: Schema) -> str:
    said = []
    for status, response in operation["responses"].items():
        if status == "default":
            continue
        content = response.get("content", {})
        kinds = []
        if "application/json" in content:
            kinds.append(_link(content["application/json"]["schema"]))
        kinds += ["events" for media in content if media == "text/event-stream"]
        kinds += ["text" for media in content if media.startswith("text/plain")]
        said.append(f"{status} {' or '.join(kinds)}".strip())
    return "; ".join(said)


def _type(spec: Schema) -> str:
    if "$ref" in spec:
        return _link(spec)
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    kind = spec.get("type")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}))}"
    if "enum" in spec:
        return " or ".join(f'"{v}"' for v in spec["enum"])
    return str(kind or "any")
