"""Tool catalogs' JSON Schemas converted to the subset Gemini's function declarations accept."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from agent_process.models.gemini_schema import function_declaration, to_gemini_schema
from agent_process.tools.catalog import ToolCatalogItem

SCHEMA_KEYS = {
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "default",
    "items",
    "minimum",
    "maximum",
}
"""Gemini's ``Schema`` fields this conversion may produce."""


def only_gemini_keys(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    if not set(schema) <= SCHEMA_KEYS:
        return False
    subs = [*schema.get("properties", {}).values(), *schema.get("anyOf", [])]
    if "items" in schema:
        subs.append(schema["items"])
    return all(only_gemini_keys(sub) for sub in subs)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "string"}, {"type": "STRING"}),
        (
            {"type": "integer", "minimum": 1, "maximum": 9},
            {"type": "INTEGER", "minimum": 1, "maximum": 9},
        ),
        ({"type": "boolean", "default": False}, {"type": "BOOLEAN", "default": False}),
        ({"type": ["string", "null"]}, {"type": "STRING", "nullable": True}),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, {"type": "INTEGER", "nullable": True}),
        (
            {"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "id"},
            {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}], "description": "id"},
        ),
        (
            {"type": ["integer", "string", "null"]},
            {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}], "nullable": True},
        ),
        ({"enum": ["a", "b"]}, {"type": "STRING", "enum": ["a", "b"]}),
        ({"enum": ["a", None]}, {"type": "STRING", "enum": ["a"], "nullable": True}),
        ({"const": "only"}, {"type": "STRING", "enum": ["only"]}),
        (
            {"type": "integer", "enum": [1, 2, 3]},
            {"type": "INTEGER", "description": "One of: 1, 2, 3"},
        ),
        (
            {"enum": [0.5, 1], "description": "ratio"},
            {"type": "NUMBER", "description": "ratio (one of: 0.5, 1)"},
        ),
        ({"type": "string", "format": "date-time"}, {"type": "STRING", "format": "date-time"}),
        ({"type": "integer", "format": "int64"}, {"type": "INTEGER", "format": "int64"}),
        (
            {"type": "string", "format": "email", "description": "to"},
            {"type": "STRING", "description": "to (format: email)"},
        ),
        (
            {"type": "string", "title": "Name", "minLength": 1, "pattern": "^[a-z]+$"},
            {"type": "STRING", "minLength": 1, "pattern": "^[a-z]+$"},
        ),
        (
            {"type": "number", "exclusiveMinimum": 0, "multipleOf": 2, "examples": [4]},
            {"type": "NUMBER"},
        ),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
            {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1},
        ),
        ({"type": "array"}, {"type": "ARRAY", "items": {}}),
        (
            {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            {"type": "ARRAY", "items": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}},
        ),
        (
            {"type": "object", "additionalProperties": {"type": "string"}, "description": "env"},
            {"description": "env (a JSON object)"},
        ),
        ({}, {}),
        ({"type": "null"}, {"nullable": True}),
        (
            {"properties": {"a": {"type": "string"}}, "required": ["a", "ghost", "a"]},
            {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}, "required": ["a"]},
        ),
    ],
)
def test_one_schema(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert to_gemini_schema(schema) == expected


def test_refs_are_inlined_and_a_recursive_one_stops_where_it_recurs() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            },
        },
        "properties": {"root": {"$ref": "#/$defs/Node", "description": "the top"}},
    }
    node = to_gemini_schema(schema)["properties"]["root"]  # type: ignore[index]
    assert node == {
        "type": "OBJECT",
        "description": "the top",
        "required": ["name"],
        "properties": {
            "name": {"type": "STRING"},
            "children": {"type": "ARRAY", "items": {}},  # a Node again: any value
        },
    }


def test_an_unresolvable_ref_accepts_any_value() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "other.json#/Thing"}}}
    assert to_gemini_schema(schema) == {"type": "OBJECT", "properties": {"x": {}}}


def test_all_of_is_merged() -> None:
    schema = {
        "definitions": {
            "Named": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            }
        },
        "allOf": [
            {"$ref": "#/definitions/Named"},
            {"properties": {"age": {"type": "integer"}}, "required": ["age"]},
        ],
    }
    assert to_gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {"name": {"type": "STRING"}, "age": {"type": "INTEGER"}},
        "required": ["name", "age"],
    }


class Address(BaseModel):
    street: str
    zip_code: str | None = Field(default=None, pattern=r"^\d{5}$")


class Order(BaseModel):
    """What a pydantic model's JSON Schema (as tools are often declared) becomes."""

    kind: str = Field(json_schema_extra={"enum": ["pickup", "delivery"]})
    quantity: int = Field(ge=1, le=10)
    ship_to: Address | None = None
    tags: list[str] = Field(default_factory=list, max_length=5)
    extra: dict[str, int] = Field(default_factory=dict)


def test_a_pydantic_models_schema_keeps_only_what_gemini_knows() -> None:
    converted = to_gemini_schema(Order.model_json_schema())
    assert only_gemini_keys(converted)
    properties = converted["properties"]
    assert isinstance(properties, dict)
    assert properties["kind"] == {"type": "STRING", "enum": ["pickup", "delivery"]}
    assert properties["quantity"] == {"type": "INTEGER", "minimum": 1, "maximum": 10}
    assert properties["ship_to"] == {
        "type": "OBJECT",
        "nullable": True,
        "properties": {
            "street": {"type": "STRING"},
            "zip_code": {"type": "STRING", "pattern": r"^\d{5}$", "nullable": True},
        },
        "required": ["street"],
    }
    assert properties["tags"] == {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 5}
    assert properties["extra"] == {"description": "A JSON object"}
    assert converted["required"] == ["kind", "quantity"]


def test_a_declaration_without_arguments_has_no_parameters() -> None:
    empty = ToolCatalogItem(name="clock__now", description="now", parameters={"type": "object"})
    assert function_declaration(empty) == {"name": "clock__now", "description": "now"}
    tool = ToolCatalogItem(
        name="bash__exec",
        description=None,
        parameters={"type": "object", "properties": {"c": {"type": "string"}}},
    )
    assert function_declaration(tool) == {
        "name": "bash__exec",
        "description": "",
        "parameters": {"type": "OBJECT", "properties": {"c": {"type": "STRING"}}},
    }
