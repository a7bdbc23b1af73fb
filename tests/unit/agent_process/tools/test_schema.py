"""Argument validation against an export's JSON Schema (issue: validate before the handler)."""

from __future__ import annotations

import pytest

from agent_process.tools.schema import compile_args_validator, format_issues
from tools_base import JsonObject, JsonValue

SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1},
        "timeoutMs": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number"},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
        "flags": {"type": "array", "items": {"type": "boolean"}},
        "env": {"type": "object", "properties": {"HOME": {"type": "string"}}},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["command"],
    "additionalProperties": False,
}


def issues(args: JsonObject, schema: JsonObject = SCHEMA) -> list[str]:
    return compile_args_validator(schema).validate(args)


def test_valid_arguments_have_no_issues() -> None:
    args: JsonObject = {
        "command": "ls",
        "timeoutMs": 10,
        "ratio": 0.5,
        "mode": "safe",
        "flags": [True, False],
        "env": {"HOME": "/x"},
        "maybe": None,
    }
    assert issues(args) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, "args.command: required property is missing"),
        ({"command": "ls", "bogus": 1}, "args.bogus: unexpected property"),
        ({"command": 5}, "args.command: expected string but got integer"),
        ({"command": "ls", "timeoutMs": 1.5}, "args.timeoutMs: expected integer but got number"),
        ({"command": "ls", "timeoutMs": True}, "args.timeoutMs: expected integer but got boolean"),
        ({"command": "ls", "ratio": "1"}, "args.ratio: expected number but got string"),
        ({"command": "ls", "mode": "slow"}, 'args.mode: value must be one of ["fast", "safe"]'),
        (
            {"command": "ls", "flags": [True, "no"]},
            "args.flags[1]: expected boolean but got string",
        ),
        ({"command": "ls", "env": {"HOME": 1}}, "args.env.HOME: expected string but got integer"),
        ({"command": ""}, "args.command: must have at least 1 characters"),
        ({"command": "ls", "timeoutMs": -1}, "args.timeoutMs: must be >= 0"),
        ({"command": "ls", "maybe": 3}, "args.maybe: expected string|null but got integer"),
    ],
)
def test_each_issue_names_the_field_and_why(args: JsonObject, expected: str) -> None:
    assert issues(args) == [expected]


def test_integer_accepts_whole_floats_and_number_rejects_non_finite() -> None:
    """JSON has one number type: 3.0 is an integer; NaN is not a number."""
    assert issues({"command": "ls", "timeoutMs": 3.0}) == []
    assert issues({"command": "ls", "ratio": float("nan")}) == [
        "args.ratio: expected number but got number"
    ]


def test_enum_distinguishes_true_from_one() -> None:
    schema: JsonObject = {"type": "object", "properties": {"v": {"enum": [1]}}}
    assert issues({"v": True}, schema) == ["args.v: value must be one of [1]"]
    assert issues({"v": 1.0}, schema) == []


def test_unknown_keywords_fall_back_to_the_full_validator() -> None:
    """A schema with oneOf/format/$ref is checked by jsonschema, not silently accepted."""
    schema: JsonObject = {
        "type": "object",
        "properties": {"n": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    validator = compile_args_validator(schema)
    assert validator.validate({"n": "x"}) == []
    [issue] = validator.validate({"n": [1]})
    assert issue.startswith("args.n: ")


def test_missing_schema_accepts_any_object() -> None:
    assert compile_args_validator(None).validate({"anything": [1, 2]}) == []


def test_at_most_five_issues_are_listed() -> None:
    many = [f"args.p{i}: unexpected property" for i in range(8)]
    text = format_issues(many)
    assert text.count("unexpected property") == 5
    assert text.endswith("; +3 more issues")


def test_suggestion_lists_required_and_allowed() -> None:
    suggestion = compile_args_validator(SCHEMA).suggestion()
    assert "required=['command']" in suggestion
    assert "allowed=['command', 'timeoutMs'" in suggestion


def test_many_properties_are_checked_like_few() -> None:
    """Past a dozen properties a key finds its checks by lookup; the issues do not change."""
    properties: JsonObject = {f"p{i}": {"type": "string"} for i in range(20)}
    properties["env"] = {"type": "object", "properties": {"HOME": {"type": "string"}}}
    schema: JsonObject = {
        "type": "object",
        "properties": properties,
        "required": ["p0"],
        "additionalProperties": False,
    }
    args: JsonObject = {"p3": 1, "bogus": True, "env": {"HOME": 2}, "p19": "ok"}
    assert issues(args, schema) == [
        "args.p0: required property is missing",
        "args.p3: expected string but got integer",
        "args.bogus: unexpected property",
        "args.env.HOME: expected string but got integer",
    ]


def test_property_names_are_data_not_code() -> None:
    name = "it's \"quoted\"\n'); import os; ('"
    schema: JsonObject = {
        "type": "object",
        "properties": {name: {"type": "integer", "enum": [1, 2]}},
        "required": [name],
    }
    assert issues({name: 1}, schema) == []
    assert issues({name: 3}, schema) == [f"args.{name}: value must be one of [1, 2]"]
    assert issues({}, schema) == [f"args.{name}: required property is missing"]


def test_deeply_nested_schemas_compile() -> None:
    schema: JsonObject = {"type": "string", "pattern": "^x"}
    for depth in range(40):
        schema = {"type": "object", "properties": {f"d{depth}": {"type": "array", "items": schema}}}
    args: JsonValue = "y"
    for depth in range(40):
        args = {f"d{depth}": [args]}
    assert isinstance(args, dict)
    path = "".join(f".d{depth}[0]" for depth in reversed(range(40)))
    assert issues(args, schema) == [f"args{path}: must match pattern '^x'"]
