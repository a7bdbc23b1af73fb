"""Argument validation against an export's JSON Schema, before the handler runs.

Validation sits on the hot path of every tool call, so a schema is compiled once, at
registration, into Python functions whose checks are plain ``if`` statements (see
:class:`_Codegen`): the arguments of a typical tool are checked in one function call. The
compiled checker covers the keywords
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
from typing import Any, NamedTuple

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
    check = _Codegen().compile(root) if _is_compilable(root) else _library_checker(root)
    return ArgsValidator(schema=root, required=required, allowed=allowed, _check=check)


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
    return all(_is_compilable_keyword(key, value) for key, value in schema.items())


def _is_compilable_keyword(key: str, value: JsonValue) -> bool:
    if key in _ANNOTATIONS:
        return True
    if key not in _COMPILED:
        return False
    if key == "properties":
        return isinstance(value, dict) and all(_is_compilable(s) for s in value.values())
    if key in ("items", "additionalProperties"):
        return _is_compilable(value)
    return True


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


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda value: isinstance(value, str),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "integer": _is_integer,
    "number": _is_number,
}


def _matches_type(value: Any, expected: str) -> bool:
    test = _TYPE_TESTS.get(expected)
    return (
        True if test is None else test(value)
    )  # unknown type names pass, as upstream's validator does


_CLASS_OF_TYPE = {"string": "str", "object": "dict", "array": "list", "boolean": "bool"}
"""JSON types that are exactly one Python class (see ``_matches_type``)."""

_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties")
_CHAINED_PROPERTIES = 12
"""Up to this many properties, a key finds its checks by ``if key == ...`` tests."""
_NUMBER_BOUNDS = (
    ("minimum", "<", ">="),
    ("maximum", ">", "<="),
    ("exclusiveMinimum", "<=", ">"),
    ("exclusiveMaximum", ">=", "<"),
)
_LENGTH_BOUNDS = (
    ("minLength", "str", "<", "at least", "characters"),
    ("maxLength", "str", ">", "at most", "characters"),
    ("minItems", "list", "<", "at least", "items"),
    ("maxItems", "list", ">", "at most", "items"),
)


class _Codegen:
    """Writes one schema out as Python functions: each check is an ``if`` on the value.

    A schema with object or array keywords becomes a function ``(value, path, issues)``; the
    checks of a flat subschema (a property without properties or items of its own) are written
    into its parent's function, so a typical tool call's arguments are checked by a single
    function call. ``path`` is the rendered path of the function's value (``args.env``); the
    path of a flat subschema, and every issue's message, is only put together when an issue
    is found. Checks run in a fixed order (type; enum, const; numeric then length bounds;
    pattern; object; items) and a wrong type skips the rest of its schema's checks, which
    would only be noise.

    Nothing from the schema becomes code: names and messages enter the source as ``repr``
    literals, numbers as numbers, and patterns and enum options as constants of the namespace.
    """

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "_json_type": _json_type,
            "_matches_type": _matches_type,
            "_enum_has": _enum_has,
            "_OTHER": object(),
        }
        self.sources: list[str] = []
        self._count = 0

    def compile(self, schema: JsonObject) -> Callable[[JsonObject], list[str]]:
        body = self._checks(schema, "value", "path", 1)
        lines = [
            "def check(value):",
            "    issues = []",
            "    path = 'args'",
            *body,
            "    return issues",
        ]
        self.sources.append("\n".join(lines))
        exec("\n\n".join(self.sources), self.namespace)  # source written above from the schema
        check: Callable[[JsonObject], list[str]] = self.namespace["check"]
        return check

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _constant(self, value: Any) -> str:
        name = self._name("_c")
        self.namespace[name] = value
        return name

    def _function(self, schema: JsonValue) -> str:
        name = self._name("_check")
        body = self._checks(schema, "value", "path", 1)
        self.sources.append(f"def {name}(value, path, issues):\n" + "\n".join(body or ["    pass"]))
        return name

    def _checks(self, schema: JsonValue, value: str, path: str, depth: int) -> list[str]:
        """Lines checking ``value`` (a variable) against ``schema``, indented ``depth`` levels;
        ``path`` is an expression for the value's rendered path, evaluated only on an issue."""
        pad = "    " * depth
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [f"{pad}issues.append({path} + ': no value is allowed here')"]
        assert isinstance(schema, dict)
        types = _type_names(schema.get("type"))
        rest = self._value_checks(schema, value, path, depth + (1 if types else 0))
        if not types:
            return rest
        message = repr(f": expected {'|'.join(types)} but got ")
        lines = [
            f"{pad}if not ({' or '.join(_type_test(t, value) for t in types)}):",
            f"{pad}    issues.append({path} + {message} + _json_type({value}))",
        ]
        return lines + ([f"{pad}else:", *rest] if rest else [])

    def _value_checks(self, schema: JsonObject, value: str, path: str, depth: int) -> list[str]:
        lines = [
            *self._enum_checks(schema, value, path, depth),
            *self._bound_checks(schema, value, path, depth),
            *self._pattern_checks(schema.get("pattern"), value, path, depth),
        ]
        if any(key in schema for key in _OBJECT_KEYWORDS):
            lines.extend(self._object_checks(schema, value, path, depth))
        if "items" in schema:
            lines.extend(self._items_checks(schema["items"], value, path, depth))
        return lines

    def _enum_checks(self, schema: JsonObject, value: str, path: str, depth: int) -> list[str]:
        enums = []
        if "enum" in schema and isinstance(schema["enum"], list):
            enums.append(schema["enum"])
        if "const" in schema:
            enums.append([schema["const"]])
        lines: list[str] = []
        for options in enums:
            rendered = ", ".join(_short_json(o) for o in options)
            test = f"not _enum_has({self._constant(options)}, {value})"
            if all(type(o) is str for o in options):  # the usual enum: a set lookup
                strings = self._constant(frozenset(options))
                test = f"not ({value} in {strings} if type({value}) is str else _enum_has({self._constant(options)}, {value}))"
            lines += _issue(depth, path, test, f": value must be one of [{rendered}]")
        return lines

    def _bound_checks(self, schema: JsonObject, value: str, path: str, depth: int) -> list[str]:
        lines: list[str] = []
        for key, fails, words in _NUMBER_BOUNDS:
            limit = schema.get(key)
            if isinstance(limit, int | float) and not isinstance(limit, bool):
                bound = self._constant(float(limit))
                test = (
                    f"isinstance({value}, int | float) and not isinstance({value}, bool) "
                    f"and {value} {fails} {bound}"
                )
                lines += _issue(depth, path, test, f": must be {words} {limit}")
        for key, kind, fails, words, unit in _LENGTH_BOUNDS:
            limit = schema.get(key)
            if isinstance(limit, int) and not isinstance(limit, bool):
                test = f"isinstance({value}, {kind}) and len({value}) {fails} {limit}"
                lines += _issue(depth, path, test, f": must have {words} {limit} {unit}")
        return lines

    def _pattern_checks(self, pattern: JsonValue, value: str, path: str, depth: int) -> list[str]:
        if not isinstance(pattern, str):
            return []
        try:
            compiled = self._constant(re.compile(pattern))
        except re.error:
            return []  # the config plane rejects invalid patterns; never fail a call on it
        test = f"isinstance({value}, str) and {compiled}.search({value}) is None"
        return _issue(depth, path, test, f": must match pattern {pattern!r}")

    def _items_checks(self, items: JsonValue, value: str, path: str, depth: int) -> list[str]:
        pad = "    " * depth
        item, index = self._name("item"), self._name("index")
        item_lines = self._sub_checks(items, item, f"{path} + '[' + str({index}) + ']'", depth + 2)
        if not item_lines:
            return []
        return [
            f"{pad}if isinstance({value}, list):",
            f"{pad}    for {index}, {item} in enumerate({value}):",
            *item_lines,
        ]

    def _object_checks(self, schema: JsonObject, value: str, path: str, depth: int) -> list[str]:
        pad = "    " * depth
        lines: list[str] = []
        for name in _string_list(schema.get("required")):
            missing = f".{name}: required property is missing"
            lines += [
                f"{pad}    if {name!r} not in {value}:",
                f"{pad}        issues.append({path} + {missing!r})",
            ]
        key, item = self._name("key"), self._name("item")
        raw_props = schema.get("properties")
        props = list(raw_props.items()) if isinstance(raw_props, dict) else []
        # Every key of the value goes to its property's checks, or else to the "other" checks;
        # with few properties an if/elif on the key picks them, with many a dict lookup does.
        chained = len(props) <= _CHAINED_PROPERTIES
        inner = depth + (2 if chained and not props else 3)  # where the other checks sit
        other_path = f"{path} + '.' + str({key})"
        additional = schema.get("additionalProperties", True)
        if additional is False:
            other = [f"{'    ' * inner}issues.append({other_path} + ': unexpected property')"]
        else:
            other = self._sub_checks(additional, item, other_path, inner)
        loop = _Loop(pad, key, item, value, path)
        if chained:
            lines += self._chained_dispatch(props, other, loop, depth)
        else:
            lines += self._table_dispatch(props, other, loop)
        return [f"{pad}if isinstance({value}, dict):", *lines] if lines else []

    def _chained_dispatch(
        self, props: list[tuple[str, JsonValue]], other: list[str], loop: _Loop, depth: int
    ) -> list[str]:
        """The loop over a value's keys picking each property's checks by ``if key == ...``."""
        pad, path = loop.pad, loop.path
        branches = [
            (name, self._sub_checks(sub, loop.item, f"{path} + {'.' + name!r}", depth + 3))
            for name, sub in props
        ]
        if not other:  # a property without checks needs no branch of its own then
            branches = [(name, checks) for name, checks in branches if checks]
        if not other and not branches:
            return []
        lines = [loop.header(), *_key_branches(branches, loop)]
        if other and branches:
            lines.append(f"{pad}        else:")
        return lines + other

    def _table_dispatch(
        self, props: list[tuple[str, JsonValue]], other: list[str], loop: _Loop
    ) -> list[str]:
        """The loop over a value's keys finding each property's function in a dict."""
        pad, key, item = loop.pad, loop.key, loop.item
        functions = {
            name: "None" if sub is True or sub == {} else self._function(sub) for name, sub in props
        }
        table = self._name("_properties")  # defined after the functions it names
        entries = ", ".join(f"{name!r}: {function}" for name, function in functions.items())
        self.sources.append(f"{table} = {{{entries}}}")
        check = self._name("check")
        return [
            loop.header(),
            f"{pad}        {check} = {table}.get({key}, _OTHER)",
            f"{pad}        if {check} is _OTHER:",
            *(other or [f"{pad}            pass"]),
            f"{pad}        elif {check} is not None:",
            f"{pad}            {check}({item}, {loop.path} + '.' + {key}, issues)",
        ]

    def _sub_checks(self, schema: JsonValue, value: str, path: str, depth: int) -> list[str]:
        """A subschema's checks: written in place when flat, else a call to its own function."""
        if isinstance(schema, dict) and (
            "items" in schema or any(k in schema for k in _OBJECT_KEYWORDS)
        ):
            return [f"{'    ' * depth}{self._function(schema)}({value}, {path}, issues)"]
        return self._checks(schema, value, path, depth)


def _key_branches(branches: list[tuple[str, list[str]]], loop: _Loop) -> list[str]:
    """An ``if``/``elif`` on the key per property, each followed by that property's checks."""
    lines = []
    for number, (name, checks) in enumerate(branches):
        lines.append(f"{loop.pad}        {'elif' if number else 'if'} {loop.key} == {name!r}:")
        lines += checks or [f"{loop.pad}            pass"]
    return lines


def _type_names(raw_type: JsonValue) -> tuple[str, ...]:
    if isinstance(raw_type, str):
        return (raw_type,)
    if isinstance(raw_type, list):
        return tuple(t for t in raw_type if isinstance(t, str))
    return ()


def _issue(depth: int, path: str, test: str, message: str) -> list[str]:
    """Lines appending ``message`` (after the value's path) to the issues when ``test`` holds."""
    pad = "    " * depth
    return [f"{pad}if {test}:", f"{pad}    issues.append({path} + {message!r})"]


class _Loop(NamedTuple):
    """The generated loop over an object value's keys: names of its variables, and where."""

    pad: str
    key: str
    item: str
    value: str
    path: str

    def header(self) -> str:
        return f"{self.pad}    for {self.key}, {self.item} in {self.value}.items():"


def _type_test(name: str, value: str) -> str:
    if name in _CLASS_OF_TYPE:
        return f"isinstance({value}, {_CLASS_OF_TYPE[name]})"
    if name == "null":
        return f"{value} is None"
    if name in ("integer", "number"):
        return f"(type({value}) is int or _matches_type({value}, {name!r}))"
    return f"_matches_type({value}, {name!r})"


def _enum_has(options: list[JsonValue], value: Any) -> bool:
    """JSON equality against each option: true is not 1, and 1 equals 1.0."""
    for option in options:
        if isinstance(value, bool) or isinstance(option, bool):
            if isinstance(value, bool) and isinstance(option, bool) and value == option:
                return True
        elif value == option:
            return True
    return False


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
    path = "".join(
        f"[{segment}]" if isinstance(segment, int) else f".{segment}"
        for segment in error.absolute_path
    )
    return f"args{path}: {error.message}"
