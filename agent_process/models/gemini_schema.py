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
        resolved, seen = self._deref(schema, seen)
        if resolved is None:
            return {}
        schema = self._merge_all_of(resolved, seen)
        union = _as_union(schema)
        if union is not None:
            return self._union(*union, seen)
        if schema.get("type") == "null":
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
                _merge_part(merged, resolved or {})
            schema = merged
        return schema

    def _union(
        self, rest: dict[str, Any], branches: list[Any], seen: tuple[str, ...]
    ) -> JsonObject:
        options = [b for b in branches if not _is_null(b)]
        nullable = len(options) < len(branches)
        if len(options) == 1:
            return self._only_option(options[0], rest, seen, nullable=nullable)
        out: JsonObject = {}
        if options:
            shared = {k: v for k, v in rest.items() if k not in ("description", "default")}
            out["anyOf"] = [
                self.convert({**shared, **o} if isinstance(o, dict) else o, seen) for o in options
            ]
        return self._finish(out, _text(rest.get("description")), nullable=nullable)

    def _only_option(
        self, option: Any, rest: dict[str, Any], seen: tuple[str, ...], *, nullable: bool
    ) -> JsonObject:
        """A union of one non-null branch: that branch, with the keywords beside the union (a
        description, a default), which are the field's own."""
        single = self.convert({**(option if isinstance(option, dict) else {}), **rest}, seen)
        if nullable:
            single["nullable"] = True
        return single

    def _single(self, schema: dict[str, Any], seen: tuple[str, ...]) -> JsonObject:
        out: JsonObject = {}
        notes: list[str] = []
        kind = _TYPES.get(schema["type"]) if isinstance(schema.get("type"), str) else None
        kind, null_value = _enumeration(schema, kind, out, notes)
        nullable = schema.get("nullable") is True or null_value
        kind = kind or _implied_kind(schema)
        _format(schema.get("format"), kind, out, notes)
        out.update(_bounds(schema, kind))
        if kind == "OBJECT":
            kind = self._object(schema, seen, out, notes)
        elif kind == "ARRAY":
            out["items"] = self._items(schema, seen)
        if kind is not None:
            out["type"] = kind
        return self._finish(out, _described(schema, notes), nullable=nullable)

    def _object(
        self, schema: dict[str, Any], seen: tuple[str, ...], out: JsonObject, notes: list[str]
    ) -> str | None:
        """Fills ``out`` with an object's properties; its Gemini type, or ``None`` for a
        free-form map (Gemini refuses an ``OBJECT`` without properties)."""
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            notes.append("a JSON object")
            return None
        out["properties"] = {str(name): self.convert(sub, seen) for name, sub in properties.items()}
        required = schema.get("required")
        if isinstance(required, list):
            names = [r for r in dict.fromkeys(required) if r in properties]
            if names:
                out["required"] = names
        return "OBJECT"

    def _items(self, schema: dict[str, Any], seen: tuple[str, ...]) -> JsonObject:
        items = schema.get("items", schema.get("prefixItems"))
        if isinstance(items, list):  # a tuple: any of its members
            items = {"anyOf": items} if items else {}
        return self.convert(items, seen)

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


def _as_union(schema: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """``schema`` as (the keywords beside the union, its branches) when it is one: an
    ``anyOf``/``oneOf``, or a list of types."""
    branches = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(branches, list):
        return {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}, branches
    kind = schema.get("type")
    if isinstance(kind, list):
        return {k: v for k, v in schema.items() if k != "type"}, [{"type": k} for k in kind]
    return None


def _merge_part(merged: dict[str, Any], part: dict[str, Any]) -> None:
    """One ``allOf`` member merged into ``merged``: properties and required names add up,
    any other keyword already there wins."""
    for key, value in part.items():
        if key == "properties" and isinstance(value, dict):
            merged["properties"] = {**value, **merged.get("properties", {})}
        elif key == "required" and isinstance(value, list):
            merged["required"] = [*merged.get("required", []), *value]
        else:
            merged.setdefault(key, value)


def _enum_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _enumeration(
    schema: dict[str, Any], kind: str | None, out: JsonObject, notes: list[str]
) -> tuple[str | None, bool]:
    """An ``enum``/``const`` kept in ``out`` when its values are strings, named in ``notes``
    otherwise; the kind it implies, and whether ``null`` was among its values."""
    values = _enum_values(schema)
    if values is None:
        return kind, False
    nullable = None in values
    values = [v for v in values if v is not None]
    if not values:
        return kind, nullable
    if kind in (None, "STRING") and all(isinstance(v, str) for v in values):
        out["enum"] = values
        return "STRING", nullable
    notes.append("one of: " + ", ".join(json.dumps(v) for v in values))
    return kind or _kind_of(values), nullable


def _implied_kind(schema: dict[str, Any]) -> str | None:
    if isinstance(schema.get("properties"), dict):
        return "OBJECT"
    return "ARRAY" if "items" in schema else None


def _format(fmt: Any, kind: str | None, out: JsonObject, notes: list[str]) -> None:
    if not isinstance(fmt, str) or not fmt:
        return
    if fmt in _FORMATS.get(kind or "", ()):
        out["format"] = fmt
    else:
        notes.append(f"format: {fmt}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_KEPT = {
    **dict.fromkeys(("minimum", "maximum"), _is_number),
    **dict.fromkeys(
        ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"),
        _is_count,
    ),
}
"""The bounds Gemini accepts as they are, each with the test a value must pass to be kept."""


def _bounds(schema: dict[str, Any], kind: str | None) -> JsonObject:
    """The pattern, numeric bounds, counts and default Gemini accepts as they are."""
    out: JsonObject = {}
    if isinstance(schema.get("pattern"), str) and kind == "STRING":
        out["pattern"] = schema["pattern"]
    out.update({key: schema[key] for key, keep in _KEPT.items() if keep(schema.get(key))})
    if schema.get("default") is not None:
        out["default"] = schema["default"]
    return out


def _described(schema: dict[str, Any], notes: list[str]) -> str | None:
    """The schema's description, with what the conversion could not keep noted after it."""
    description = _text(schema.get("description"))
    if not notes:
        return description
    note = "; ".join(notes)
    return f"{description} ({note})" if description else note[0].upper() + note[1:]
