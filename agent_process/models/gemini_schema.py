"""Tool catalogs' JSON Schemas in the form Gemini's function declarations accept.

Gemini's ``FunctionDeclaration.parameters`` is a ``Schema``: a select subset of OpenAPI 3.0,
not JSON Schema, and the API refuses a request with anything it does not know. The conversion:

- ``type`` in upper case (``OBJECT``, ``STRING``...); ``type: [X, "null"]``, an ``anyOf`` or
  ``oneOf`` with a ``null`` branch, and ``null`` among enum values become ``nullable``; several
  types, ``anyOf`` and ``oneOf`` become ``anyOf``;
- ``$ref`` into ``$defs``/``definitions`` is inlined (a recursive one accepts any value where it
  recurs); ``allOf`` is merged into one schema;
- ``enum`` and ``const`` stay only when they are strings (Gemini's enums are strings); other
  values are named in the description, as are ``format`` s Gemini does not know;
- an object with no ``properties`` (a free-form map) loses its type, since Gemini refuses an
  ``OBJECT`` without properties; an array without ``items`` gets items of any type;
- keywords outside the subset (``title``, ``additionalProperties``, ``$schema``,
  ``exclusiveMinimum``, ``not``...) are dropped; ``required`` keeps only declared properties.

What is dropped only loosens what the model is told: the tool still validates its arguments
against its own schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_process.tools.catalog import ToolCatalogItem
from tools_base import JsonObject

_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
_FORMATS = {
    "STRING": frozenset({"enum", "date-time"}),
    "NUMBER": frozenset({"float", "double"}),
    "INTEGER": frozenset({"int32", "int64"}),
}
"""The formats Gemini knows, by type; the API refuses others."""
_NUMBERS = ("minimum", "maximum")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")


def function_declaration(item: ToolCatalogItem) -> JsonObject:
    """A catalog item as a Gemini ``FunctionDeclaration`` (its name unchanged); a tool that
    takes no arguments declares no ``parameters``."""
    declaration: JsonObject = {"name": item.name, "description": item.description or ""}
    parameters = to_gemini_schema(item.parameters)
    if parameters.get("properties"):
        declaration["parameters"] = parameters
    return declaration


def to_gemini_schema(schema: Mapping[str, Any]) -> JsonObject:
    """``schema`` (JSON Schema) in the subset Gemini accepts; see the module's docstring."""
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        found = schema.get(key)
        if isinstance(found, dict):
            defs.update(found)
    return _Converter(defs).convert(schema, ())


def _is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null" and len(schema) == 1


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class _Converter:
    __slots__ = ("defs",)

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def convert(self, schema: Any, seen: tuple[str, ...]) -> JsonObject:
        """``seen``: the definitions being inlined above this point (a cycle stops there)."""
        if not isinstance(schema, dict):  # `true`, or nonsense: any value
            return {}
        schema, seen = self._deref(schema, seen)
        if schema is None:
            return {}
        schema = self._merge_all_of(schema, seen)
        branches = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(branches, list):
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            return self._union(rest, branches, seen)
        kind = schema.get("type")
        if isinstance(kind, list):
            rest = {k: v for k, v in schema.items() if k != "type"}
            return self._union(rest, [{"type": k} for k in kind], seen)
        if kind == "null":
            return self._finish({}, _text(schema.get("description")), nullable=True)
        return self._single(schema, seen)

    def _deref(
        self, schema: dict[str, Any], seen: tuple[str, ...]
    ) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
        while isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            name = ref.rsplit("/", 1)[-1]
            target = self.defs.get(name) if ref.startswith("#/") else None
            if not isinstance(target, dict) or name in seen:
                return None, seen
            # Keywords beside the $ref (a description, say) describe this use of it.
            beside = {k: v for k, v in schema.items() if k != "$ref"}
            schema, seen = {**target, **beside}, (*seen, name)
        return schema, seen

    def _merge_all_of(self, schema: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
        while isinstance(schema.get("allOf"), list):
            parts = schema["allOf"]
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                resolved = self._deref(part, seen)[0] if isinstance(part, dict) else None
                for key, value in (resolved or {}).items():
                    if key == "properties" and isinstance(value, dict):
                        merged["properties"] = {**value, **merged.get("properties", {})}
                    elif key == "required" and isinstance(value, list):
                        merged["required"] = [*merged.get("required", []), *value]
                    else:
                        merged.setdefault(key, value)
            schema = merged
        return schema

    def _union(
        self, rest: dict[str, Any], branches: list[Any], seen: tuple[str, ...]
    ) -> JsonObject:
        options = [b for b in branches if not _is_null(b)]
        nullable = len(options) < len(branches)
        description = _text(rest.get("description"))
        if len(options) == 1:
            # The keywords beside the union (a description, a default) are the field's own.
            option = options[0] if isinstance(options[0], dict) else {}
            single = self.convert({**option, **rest}, seen)
            if nullable:
                single["nullable"] = True
            return single
        out: JsonObject = {}
        if options:
            shared = {k: v for k, v in rest.items() if k not in ("description", "default")}
            out["anyOf"] = [
                self.convert({**shared, **o} if isinstance(o, dict) else o, seen) for o in options
            ]
        return self._finish(out, description, nullable=nullable)

    def _single(self, schema: dict[str, Any], seen: tuple[str, ...]) -> JsonObject:
        out: JsonObject = {}
        notes: list[str] = []
        nullable = schema.get("nullable") is True
        kind = _TYPES.get(schema["type"]) if isinstance(schema.get("type"), str) else None
        values: list[Any] | None = None
        if "const" in schema:
            values = [schema["const"]]
        elif isinstance(schema.get("enum"), list):
            values = list(schema["enum"])
        if values is not None:
            nullable = nullable or None in values
            values = [v for v in values if v is not None]
            if values and all(isinstance(v, str) for v in values) and kind in (None, "STRING"):
                kind = "STRING"
                out["enum"] = values
            elif values:
                notes.append("one of: " + ", ".join(json.dumps(v) for v in values))
                kind = kind or _kind_of(values)
        if kind is None:
            if isinstance(schema.get("properties"), dict):
                kind = "OBJECT"
            elif "items" in schema:
                kind = "ARRAY"
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt:
            if fmt in _FORMATS.get(kind or "", ()):
                out["format"] = fmt
            else:
                notes.append(f"format: {fmt}")
        if isinstance(schema.get("pattern"), str) and kind == "STRING":
            out["pattern"] = schema["pattern"]
        for key in _NUMBERS:
            value = schema.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = value
        for key in _COUNTS:
            value = schema.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                out[key] = value
        if schema.get("default") is not None:
            out["default"] = schema["default"]
        if kind == "OBJECT":
            properties = schema.get("properties")
            if isinstance(properties, dict) and properties:
                out["properties"] = {
                    str(name): self.convert(sub, seen) for name, sub in properties.items()
                }
                required = schema.get("required")
                if isinstance(required, list):
                    names = [r for r in dict.fromkeys(required) if r in properties]
                    if names:
                        out["required"] = names
            else:
                kind = None
                notes.append("a JSON object")
        elif kind == "ARRAY":
            items = schema.get("items", schema.get("prefixItems"))
            if isinstance(items, list):  # a tuple: any of its members
                items = {"anyOf": items} if items else {}
            out["items"] = self.convert(items, seen)
        if kind is not None:
            out["type"] = kind
        description = _text(schema.get("description"))
        if notes:
            note = "; ".join(notes)
            description = f"{description} ({note})" if description else note[0].upper() + note[1:]
        return self._finish(out, description, nullable=nullable)

    @staticmethod
    def _finish(out: JsonObject, description: str | None, *, nullable: bool) -> JsonObject:
        if description:
            out["description"] = description
        if nullable:
            out["nullable"] = True
        return out


def _kind_of(values: list[Any]) -> str | None:
    if all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "INTEGER"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "NUMBER"
    return None
