"""Argument validation against an export's JSON Schema, before the handler runs.

Validation sits on the hot path of every tool call, so a schema is compiled once, at
registration, into a tree of small checker closures. The compiled checker covers the keywords
tool schemas use in practice (``type``, ``properties``, ``required``, ``additionalProperties``,
``items``, ``enum``, ``const``, numeric and length bounds, ``pattern``); a schema that uses any
other keyword (``oneOf``, ``$ref``, ``format``, ...) is validated by the ``jsonschema`` library
instead, so no keyword is ever silently ignored.

Issues read ``args.<path>: <what is wrong>`` (the format of upstream's validator), so the model
learns which field to fix and why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from tools_base import JsonObject, JsonValue

MAX_LISTED_ISSUES = 5
"""Issues spelled out in one error message; the rest are counted."""

_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$comment", "$schema", "$id", "deprecated"}
)
_COMPILED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
    }
)

# A path is built only when an issue is reported: a linked tuple (parent, segment) is cheap.
_Path = tuple[Any, str] | None
_Checker = Callable[[Any, _Path, list[str]], None]


@dataclass(frozen=True, slots=True)
class ArgsValidator:
    """A compiled validator for one export's ``parameters`` schema."""

    schema: JsonObject
    """The schema it was compiled from."""
    required: tuple[str, ...]
    """Top-level required property names (shown in the suggestion)."""
    allowed: tuple[str, ...] | None
    """Top-level property names when ``additionalProperties`` is false, else ``None``."""
    _check: Callable[[JsonObject], list[str]]

    def validate(self, args: JsonObject) -> list[str]:
        """Every issue found in ``args``; an empty list when they are valid."""
        return self._check(args)

    def suggestion(self) -> str:
        """A hint listing what the schema requires and allows."""
        parts = [f"required={list(self.required)}"]
        if self.allowed is not None:
            parts.append(f"allowed={list(self.allowed)}")
        return "Call the tool again with arguments that match its parameters: " + ", ".join(parts)


def compile_args_validator(schema: Mapping[str, JsonValue] | None) -> ArgsValidator:
    """Compile ``schema`` (an export's ``parameters``; ``None`` means "any object")."""
    root: JsonObject = dict(schema) if schema else {"type": "object", "properties": {}}
    required = _string_list(root.get("required"))
    props = root.get("properties")
    allowed = (
        tuple(props)
        if root.get("additionalProperties") is False and isinstance(props, dict)
        else None
    )
    check = _compiled_checker(root) if _is_compilable(root) else _library_checker(root)
    return ArgsValidator(schema=root, required=required, allowed=allowed, _check=check)


def _compiled_checker(schema: JsonObject) -> Callable[[JsonObject], list[str]]:
    checker = _compile(schema)

    def check(args: JsonObject) -> list[str]:
        issues: list[str] = []
        checker(args, None, issues)
        return issues

    return check


def format_issues(issues: list[str]) -> str:
    """Join issues for an error message, listing at most :data:`MAX_LISTED_ISSUES`."""
    shown = "; ".join(issues[:MAX_LISTED_ISSUES])
    extra = len(issues) - MAX_LISTED_ISSUES
    return f"{shown}; +{extra} more issues" if extra > 0 else shown


def _string_list(value: JsonValue) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _is_compilable(schema: JsonValue) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _COMPILED:
            return False
        if key == "properties":
            if not isinstance(value, dict) or not all(_is_compilable(s) for s in value.values()):
                return False
        elif key in ("items", "additionalProperties") and not _is_compilable(value):
            return False
    return True


def _render(path: _Path) -> str:
    segments: list[str] = []
    while path is not None:
        path, segment = path
        segments.append(segment)
    return "args" + "".join(reversed(segments))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches_type(value: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(value, str)
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if expected == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "number":
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    return True  # unknown type names pass, as upstream's validator does


def _compile(schema: JsonValue) -> _Checker:
    if schema is True or schema == {}:
        return _accept
    if schema is False:
        return _reject_all
    assert isinstance(schema, dict)
    checks: list[_Checker] = []

    raw_type = schema.get("type")
    types = (
        (raw_type,)
        if isinstance(raw_type, str)
        else tuple(t for t in raw_type if isinstance(t, str))
        if isinstance(raw_type, list)
        else ()
    )
    if types:
        checks.append(_type_check(types))
    if "enum" in schema and isinstance(schema["enum"], list):
        checks.append(_enum_check(schema["enum"]))
    if "const" in schema:
        checks.append(_enum_check([schema["const"]]))
    checks.extend(_bound_checks(schema))
    if isinstance(schema.get("pattern"), str):
        checks.append(_pattern_check(str(schema["pattern"])))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        checks.append(_object_check(schema))
    if "items" in schema:
        checks.append(_items_check(_compile(schema["items"])))

    if len(checks) == 1:
        return checks[0]

    def check_all(value: Any, path: _Path, issues: list[str]) -> None:
        for check in checks:
            before = len(issues)
            check(value, path, issues)
            if len(issues) > before and check is checks[0] and types:
                return  # a wrong type makes the remaining checks noise

    return check_all


def _accept(value: Any, path: _Path, issues: list[str]) -> None:
    return None


def _reject_all(value: Any, path: _Path, issues: list[str]) -> None:
    issues.append(f"{_render(path)}: no value is allowed here")


def _type_check(types: tuple[str, ...]) -> _Checker:
    expected = "|".join(types)

    def check(value: Any, path: _Path, issues: list[str]) -> None:
        for t in types:
            if _matches_type(value, t):
                return
        issues.append(f"{_render(path)}: expected {expected} but got {_json_type(value)}")

    return check


def _enum_check(options: list[JsonValue]) -> _Checker:
    def same(a: Any, b: Any) -> bool:
        # JSON equality: true is not 1, and 1 equals 1.0.
        if isinstance(a, bool) or isinstance(b, bool):
            return isinstance(a, bool) and isinstance(b, bool) and a == b
        return bool(a == b)

    rendered = ", ".join(_short_json(o) for o in options)

    def check(value: Any, path: _Path, issues: list[str]) -> None:
        if not any(same(value, option) for option in options):
            issues.append(f"{_render(path)}: value must be one of [{rendered}]")

    return check


def _bound_checks(schema: JsonObject) -> list[_Checker]:
    checks: list[_Checker] = []

    def number_bound(key: str, fails: Callable[[float, float], bool], words: str) -> None:
        limit = schema.get(key)
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            return
        bound = float(limit)

        def check(value: Any, path: _Path, issues: list[str]) -> None:
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and fails(value, bound)
            ):
                issues.append(f"{_render(path)}: must be {words} {limit}")

        checks.append(check)

    number_bound("minimum", lambda v, b: v < b, ">=")
    number_bound("maximum", lambda v, b: v > b, "<=")
    number_bound("exclusiveMinimum", lambda v, b: v <= b, ">")
    number_bound("exclusiveMaximum", lambda v, b: v >= b, "<")

    def length_bound(key: str, kind: type, fails: Callable[[int, int], bool], words: str) -> None:
        limit = schema.get(key)
        if isinstance(limit, bool) or not isinstance(limit, int):
            return
        unit = "characters" if kind is str else "items"

        def check(value: Any, path: _Path, issues: list[str]) -> None:
            if isinstance(value, kind) and fails(len(value), limit):  # type: ignore[arg-type]
                issues.append(f"{_render(path)}: must have {words} {limit} {unit}")

        checks.append(check)

    length_bound("minLength", str, lambda n, b: n < b, "at least")
    length_bound("maxLength", str, lambda n, b: n > b, "at most")
    length_bound("minItems", list, lambda n, b: n < b, "at least")
    length_bound("maxItems", list, lambda n, b: n > b, "at most")
    return checks


def _pattern_check(pattern: str) -> _Checker:
    try:
        compiled = re.compile(pattern)
    except re.error:
        return _accept  # the config plane rejects invalid patterns; never fail a call on it

    def check(value: Any, path: _Path, issues: list[str]) -> None:
        if isinstance(value, str) and compiled.search(value) is None:
            issues.append(f"{_render(path)}: must match pattern {pattern!r}")

    return check


def _object_check(schema: JsonObject) -> _Checker:
    raw_props = schema.get("properties")
    props = {
        name: _compile(sub)
        for name, sub in (raw_props.items() if isinstance(raw_props, dict) else ())
    }
    required = _string_list(schema.get("required"))
    additional = schema.get("additionalProperties", True)
    extra_check = None if additional is True else _compile(additional)
    closed = additional is False

    def check(value: Any, path: _Path, issues: list[str]) -> None:
        if not isinstance(value, dict):
            return
        for name in required:
            if name not in value:
                issues.append(f"{_render((path, '.' + name))}: required property is missing")
        for name, item in value.items():
            sub = props.get(name)
            if sub is not None:
                if sub is not _accept:
                    sub(item, (path, "." + name), issues)
            elif closed:
                issues.append(f"{_render((path, '.' + str(name)))}: unexpected property")
            elif extra_check is not None:
                extra_check(item, (path, "." + str(name)), issues)

    return check


def _items_check(item_check: _Checker) -> _Checker:
    def check(value: Any, path: _Path, issues: list[str]) -> None:
        if isinstance(value, list):
            for index, item in enumerate(value):
                item_check(item, (path, f"[{index}]"), issues)

    return check


def _short_json(value: JsonValue) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _library_checker(schema: JsonObject) -> Callable[[JsonObject], list[str]]:
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema)

    def check(args: JsonObject) -> list[str]:
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        return [_library_issue(error) for error in errors]

    return check


def _library_issue(error: ValidationError) -> str:
    path: _Path = None
    for segment in error.absolute_path:
        path = (path, f"[{segment}]" if isinstance(segment, int) else f".{segment}")
    return f"{_render(path)}: {error.message}"
