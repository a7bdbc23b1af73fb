"""Where a Tool export's YAML parameters and its handler's hints disagree."""

from __future__ import annotations

from typing import Any

import pytest

from bundle.tool_hints import EXPORT_ATTR, parameter_differences
from tools_base._tool import EXPORT_ATTR as WRITTEN_BY_THE_SDK


def schema(properties: dict[str, Any], required: list[str], closed: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if closed:
        out["additionalProperties"] = False
    return out


HINTS = schema(
    {
        "name": {"type": "string"},
        "times": {"type": "integer", "default": 1},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "ratio": {"type": "number", "default": 0.5},
    },
    ["name"],
)


def test_the_same_parameters_agree() -> None:
    assert parameter_differences(HINTS, HINTS) == []


def test_the_yaml_may_leave_out_optional_parameters_and_loosen_nothing_else() -> None:
    yaml = schema({"name": {"type": "string", "description": "Who."}}, ["name"])
    assert parameter_differences(yaml, HINTS) == []


def test_a_parameter_the_yaml_requires_and_the_handler_lacks() -> None:
    yaml = schema({"name": {"type": "string"}, "extra": {"type": "string"}}, ["name", "extra"])
    assert parameter_differences(yaml, HINTS) == [
        "the YAML requires 'extra' but the handler has no parameter 'extra' (every call fails)"
    ]


def test_a_parameter_the_yaml_declares_and_the_handler_lacks() -> None:
    yaml = schema({"name": {"type": "string"}, "extra": {"type": "string"}}, ["name"])
    assert parameter_differences(yaml, HINTS) == [
        "the YAML declares 'extra' but the handler has no parameter 'extra' "
        "(a call that passes it fails)"
    ]


def test_a_parameter_the_handler_requires_and_the_yaml_lacks_or_makes_optional() -> None:
    assert parameter_differences(schema({}, []), HINTS) == [
        "the handler requires 'name' but the YAML does not declare it "
        "(the model is never told to pass it)"
    ]
    assert parameter_differences(schema({"name": {"type": "string"}}, []), HINTS) == [
        "the handler requires 'name' but the YAML makes it optional (a call without it fails)"
    ]


@pytest.mark.parametrize(
    ("yaml_type", "agrees"),
    [
        ({"type": "string"}, True),
        ({"type": ["string", "null"]}, True),
        ({"type": "integer"}, False),
        ({"enum": ["a", "b"]}, True),  # no type named: nothing to compare
        ({"type": "string", "enum": ["a", "b"]}, True),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, False),
    ],
)
def test_simple_types_are_compared_null_aside(yaml_type: dict[str, Any], agrees: bool) -> None:
    yaml = schema({"name": yaml_type}, ["name"])
    found = parameter_differences(yaml, HINTS)
    assert (found == []) is agrees, found


def test_a_type_mismatch_names_both_sides() -> None:
    yaml = schema({"name": {"type": "integer"}}, ["name"])
    assert parameter_differences(yaml, HINTS) == [
        "'name' is integer in the YAML but string in the handler's hints"
    ]


def test_integer_and_number_are_compatible_either_way() -> None:
    def differences(name: str, yaml_type: str) -> list[str]:
        yaml = schema({"name": {"type": "string"}, name: {"type": yaml_type}}, ["name"])
        return parameter_differences(yaml, HINTS)

    assert differences("ratio", "integer") == []
    assert differences("times", "number") == []
    assert differences("times", "boolean") == [
        "'times' is boolean in the YAML but integer in the handler's hints"
    ]


def test_a_handler_open_to_more_properties_accepts_what_the_yaml_adds() -> None:
    open_hints = schema({"name": {"type": "string"}}, ["name"], closed=False)
    yaml = schema({"name": {"type": "string"}, "extra": {"type": "string"}}, ["name"])
    assert parameter_differences(yaml, open_hints) == []


def test_the_attribute_read_is_the_one_the_sdk_writes() -> None:
    assert EXPORT_ATTR == WRITTEN_BY_THE_SDK
