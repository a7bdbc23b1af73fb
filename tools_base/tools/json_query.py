"""``json-query``: read values out of JSON text.

``data`` is always a JSON **string** (the model passes the text it got from another tool).
Paths: an optional leading ``.``, then segments separated by ``.`` or written in brackets:
``.items[0].name``, ``items.0.name`` and ``items[0][name]`` are the same path; ``""`` and
``.`` are the root. A segment indexes an object by key, or an array by the integer at its
start (JavaScript ``parseInt``: ``"2"``, ``"2abc"``); anything else is "not found".

Exports (required parameters in **bold**):

``query``: **data**, ``path`` (default ``.``) → ``{path, found, value}``; ``value`` is null
    when not found (a JSON null that exists is ``found: true``).
``pick``: **data** (a JSON object), **keys** (array of strings) → ``{keys, result}`` with
    the keys that exist, in ``keys`` order.
``count``: **data**, ``path`` (default ``.``) → ``{path, count, type}``: array length and
    ``"array"``, object key count and ``"object"``, string length and ``"string"``, ``0`` and
    ``"null"`` for null or missing, else ``1`` and ``"number"``/``"boolean"``.
``flatten``: **data** (a JSON array), ``depth`` (default 1) → ``{depth, count, result}``.

Error codes: ``E_JSON_PARSE`` (``data`` is not JSON; ``NaN``/``Infinity`` are not JSON
either), ``E_JSON_TYPE_MISMATCH`` (``pick`` on a non-object, ``flatten`` on a non-array),
``E_TOOL_INVALID_ARGS``. No config.

Handlers are pure and quick: marked ``@nonblocking``, they run on the event loop.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Final

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler, nonblocking
from tools_base.tools._common import invalid_arg, optional_number, optional_string, require_string


class _Missing(enum.Enum):
    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")


def _reject_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not valid JSON")


def parse_data(raw: str) -> JsonValue:
    """``JSON.parse``: strict JSON text to a value."""
    try:
        value: JsonValue = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ToolError(
            f"Failed to parse input as JSON: {detail}",
            code=ToolCode.E_JSON_PARSE,
            suggestion='Pass data as a JSON string, for example "{\\"a\\": [1, 2]}".',
        ) from exc
    return value


def parse_path(path: str) -> list[str]:
    """Split a path into segments, exactly as upstream's ``parsePath``."""
    if path in ("", "."):
        return []
    raw = path[1:] if path.startswith(".") else path
    segments: list[str] = []
    current = ""
    inside_bracket = False
    for char in raw:
        if char in "[]" or (char == "." and not inside_bracket):
            if current:
                segments.append(current)
                current = ""
            if char != ".":
                inside_bracket = char == "["
            continue
        current += char
    if current:
        segments.append(current)
    return segments


def _array_index(segment: str) -> int | None:
    match = _LEADING_INT.match(segment)
    return int(match.group(1)) if match else None


def resolve(data: JsonValue, path: str) -> JsonValue | _Missing:
    """The value at ``path``, or ``_MISSING``."""
    current: JsonValue | _Missing = data
    for segment in parse_path(path):
        if current is _MISSING or current is None:
            return _MISSING
        if isinstance(current, dict):
            current = current.get(segment, _MISSING)
        elif isinstance(current, list):
            index = _array_index(segment)
            current = (
                current[index] if index is not None and 0 <= index < len(current) else _MISSING
            )
        else:
            return _MISSING
    return current


def _at_path(input: JsonObject) -> tuple[str, JsonValue | _Missing]:
    """The call's ``path`` (default ``.``) and what ``data`` holds there (``_MISSING``: none)."""
    raw = require_string(input, "data")
    path = optional_string(input, "path")
    path = "." if path is None else path
    return path, resolve(parse_data(raw), path)


@nonblocking
def query(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``query``: the value at a path."""
    path, found = _at_path(input)
    if found is _MISSING:
        return {"path": path, "found": False, "value": None}
    return {"path": path, "found": True, "value": found}


@nonblocking
def pick(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``pick``: a sub-object with the given keys."""
    raw = require_string(input, "data")
    keys_raw = input.get("keys")
    if not isinstance(keys_raw, list):
        raise invalid_arg("'keys' must be an array of strings")
    keys: list[str] = []
    for key in keys_raw:
        if not isinstance(key, str):
            raise invalid_arg("'keys' must contain only strings")
        keys.append(key)
    data = parse_data(raw)
    if not isinstance(data, dict):
        raise ToolError(
            "Input data must be a JSON object for pick operation",
            code=ToolCode.E_JSON_TYPE_MISMATCH,
        )
    result: JsonObject = {key: data[key] for key in keys if key in data}
    keys_out: list[JsonValue] = list(keys)
    return {"keys": keys_out, "result": result}


@nonblocking
def count(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``count``: the size of the value at a path."""
    path, found = _at_path(input)
    if found is _MISSING or found is None:
        return {"path": path, "count": 0, "type": "null"}
    if isinstance(found, list):
        return {"path": path, "count": len(found), "type": "array"}
    if isinstance(found, dict):
        return {"path": path, "count": len(found), "type": "object"}
    if isinstance(found, str):
        return {"path": path, "count": len(found), "type": "string"}
    return {"path": path, "count": 1, "type": "boolean" if isinstance(found, bool) else "number"}


def _flatten(items: list[JsonValue], depth: float) -> list[JsonValue]:
    out: list[JsonValue] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


@nonblocking
def flatten(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``flatten``: nested arrays spliced into their parent, ``depth`` levels deep."""
    raw = require_string(input, "data")
    depth = optional_number(input, "depth")
    depth = 1 if depth is None else depth
    data = parse_data(raw)
    if not isinstance(data, list):
        raise ToolError(
            "Input data must be a JSON array for flatten operation",
            code=ToolCode.E_JSON_TYPE_MISMATCH,
        )
    try:
        result = _flatten(data, depth)
    except RecursionError as exc:  # only reachable with absurd nesting and depth
        raise ToolError("data is nested too deeply to flatten", code=ToolCode.E_JSON_PARSE) from exc
    return {"depth": depth, "count": len(result), "result": result}


handlers: dict[str, ToolHandler] = {
    "query": query,
    "pick": pick,
    "count": count,
    "flatten": flatten,
}
