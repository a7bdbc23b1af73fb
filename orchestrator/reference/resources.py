"""``reference/resources.md``: every resource kind and every field of its ``spec``, from the
JSON Schema ``goondan schema`` exports, with an example of each kind from the shipped swarms."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bundle.schema import json_schema
from bundle.spec_kinds import SPEC_MODELS
from orchestrator.reference.markdown import table

Schema = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = (
    ROOT / "goondan.yaml.example",
    *sorted((ROOT / "examples").glob("*/goondan.yaml")),
)
"""Where each kind's example is taken from (the first document of that kind)."""
MAX_DEPTH = 6


def resources_page() -> str:
    """The page: a section per kind with its description, its fields and an example."""
    schema = json_schema()
    defs: dict[str, Schema] = schema["$defs"]
    examples = _examples()
    parts = [
        "# Resources\n\n",
        "Every kind a `goondan.yaml` may declare, and every field of its `spec`: generated from "
        "the JSON Schema the runtime validates against (`python -m orchestrator schema` prints "
        "it; editors with `yaml-language-server` show the same descriptions). Every resource "
        "has `apiVersion: goondan.ai/v1`, a `kind` and `metadata` (`name`, and optional "
        "`labels`).\n\n",
    ]
    for kind, model in SPEC_MODELS.items():
        spec = defs[model.__name__]
        parts.append(f"## {kind}\n\n{_sentence(spec.get('description', ''))}\n\n")
        rows = list(_fields(spec, defs, "", 0, frozenset()))
        parts.append(table(("field", "type", "default", "description"), rows) or "No fields.\n")
        example = examples.get(kind)
        if example is not None:
            parts.append(f"\nFor example:\n\n```yaml\n{example}```\n")
        parts.append("\n")
    return "".join(parts).rstrip("\n") + "\n"


def _sentence(text: str) -> str:
    return " ".join(text.replace("``", "`").split())


def _fields(
    node: Schema, defs: dict[str, Schema], prefix: str, depth: int, seen: frozenset[str]
) -> Iterator[tuple[str, str, str, str]]:
    """A row per field of the object ``node``, and of the objects inside it."""
    required = set(node.get("required", ()))
    for name, field in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        shown = f"`{path}`" + (" (required)" if name in required else "")
        default = json.dumps(field["default"]) if "default" in field else ""
        description = _sentence(field.get("description", ""))
        yield shown, _type(field, defs), f"`{default}`" if default else "", description
        inner, suffix = _inner_object(field, defs)
        if inner is not None and depth < MAX_DEPTH:
            ref = inner.get("title", "")
            if ref in seen:
                continue
            yield from _fields(inner, defs, f"{path}{suffix}.", depth + 1, seen | {ref})


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return defs[ref.rsplit("/", 1)[-1]]
    return node


def _branches(node: Schema) -> list[Schema]:
    """The alternatives of ``node`` less ``null``."""
    alternatives = node.get("anyOf") or node.get("oneOf")
    if not alternatives:
        return [node]
    return [a for a in alternatives if a.get("type") != "null"]


def _inner_object(node: Schema, defs: dict[str, Schema]) -> tuple[Schema | None, str]:
    """The object schema a field holds (directly, as list items or as map values) and how
    its path goes on (``""``, ``[]`` or ``.<name>``)."""
    for branch in _branches(node):
        branch = _resolve(branch, defs)
        if branch.get("properties"):
            return branch, ""
        items = branch.get("items")
        if isinstance(items, dict) and _resolve(items, defs).get("properties"):
            return _resolve(items, defs), "[]"
        values = branch.get("additionalProperties")
        if isinstance(values, dict) and _resolve(values, defs).get("properties"):
            return _resolve(values, defs), ".<name>"
    return None, ""


def _type(node: Schema, defs: dict[str, Schema]) -> str:
    """The type of a field in a few words."""
    words = []
    for branch in _branches(node):
        words.append(_one_type(branch, defs))
    return " or ".join(dict.fromkeys(words)) or "any"


def _one_type(node: Schema, defs: dict[str, Schema]) -> str:
    if "$ref" in node:
        target = _resolve(node, defs)
        return "object" if target.get("properties") else _one_type(target, defs)
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " or ".join(json.dumps(v) for v in node["enum"])
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        return f"list of {_type(items, defs)}" if isinstance(items, dict) else "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict):
            return f"map of {_type(values, defs)}"
        return "object"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if node.get("anyOf") or node.get("oneOf"):
        return _type(node, defs)
    return str(kind or "any")


def _examples() -> dict[str, str]:
    """The first document of each kind in the shipped swarms, as YAML."""
    found: dict[str, str] = {}
    for path in EXAMPLES:
        if not path.exists():
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict):
                continue
            kind = document.get("kind")
            if isinstance(kind, str) and kind not in found:
                found[kind] = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    return found
