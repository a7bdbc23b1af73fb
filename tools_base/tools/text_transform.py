"""``text-transform``: small string operations with JavaScript semantics.

Exports (required parameters in **bold**; ``text`` is always a non-empty string):

``replace``: **text**, **search**, ``replacement`` (default ``""``), ``all`` (default false:
    first occurrence only) → ``{original, result, replacements}``.
``slice``: **text**, ``start`` (default 0), ``end`` (default the length) → ``{original,
    result, start, end, length}``. JavaScript ``slice``: negative indices count from the
    end, fractions are truncated, out-of-range indices are clamped, ``end`` before ``start``
    gives ``""``. ``end`` in the output is the given end or the text length.
``split``: **text**, ``delimiter`` (default ``"\\n"``; ``""`` splits into characters),
    ``maxParts`` → ``{delimiter, count, parts}``. JavaScript ``split(d, limit)``: keeps the
    first ``maxParts`` pieces and **drops the rest** (unlike Python's ``maxsplit``);
    ``maxParts`` is taken modulo 2^32, so 0 gives ``[]`` and -1 means no limit.
``join``: **parts** (array of strings, numbers, booleans), ``delimiter`` (default ``"\\n"``)
    → ``{delimiter, count, result}``; numbers and booleans print as JavaScript does
    (``1``, ``1.5``, ``true``).
``trim``: **text**, ``mode`` (``start``, ``end`` or ``both``; default and anything else mean
    both) → ``{original, result, mode, trimmedLength}``. Whitespace is JavaScript's (Unicode
    spaces, line terminators and U+FEFF).
``case``: **text**, **to** (``upper`` or ``lower``) → ``{original, result, to}``.
``transform``: **operation** (one of the names above) plus that operation's parameters;
    returns that operation's output with ``operation`` added.

Lengths and indices count Unicode code points, not JavaScript's UTF-16 units (a slice can
never split an emoji into invalid halves). Error code: ``E_TOOL_INVALID_ARGS``. No config.

Handlers are pure and quick: marked ``@nonblocking``, they run on the event loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tools_base import JsonObject, JsonValue, ToolContext, ToolHandler, nonblocking
from tools_base.tools._common import (
    invalid_arg,
    optional_number,
    optional_string,
    primitive_to_string,
    require_string,
)

JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's ``String.prototype.trim`` removes."""


def _to_integer(value: float) -> int:
    """ECMAScript ``ToIntegerOrInfinity`` for finite numbers: truncate toward zero."""
    return math.trunc(value)


def _to_uint32(value: float) -> int:
    """ECMAScript ``ToUint32``."""
    return math.trunc(value) % 2**32


@nonblocking
def replace(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``replace``: substitute the first (or every) occurrence of ``search``."""
    text = require_string(input, "text")
    search = require_string(input, "search")
    replacement = optional_string(input, "replacement") or ""
    every = input.get("all") is True
    if every:
        result, count = text.replace(search, replacement), text.count(search)
    else:
        result, count = text.replace(search, replacement, 1), int(search in text)
    return {"original": text, "result": result, "replacements": count}


@nonblocking
def slice_(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``slice``: JavaScript ``text.slice(start, end)``."""
    text = require_string(input, "text")
    start = optional_number(input, "start")
    start = 0 if start is None else start
    end = optional_number(input, "end")
    stop = None if end is None else _to_integer(end)
    result = text[_to_integer(start) : stop]
    return {
        "original": text,
        "result": result,
        "start": start,
        "end": len(text) if end is None else end,
        "length": len(result),
    }


@nonblocking
def split(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``split``: JavaScript ``text.split(delimiter, maxParts)``."""
    text = require_string(input, "text")
    delimiter = optional_string(input, "delimiter")
    delimiter = "\n" if delimiter is None else delimiter
    max_parts = optional_number(input, "maxParts")
    parts: list[str] = text.split(delimiter) if delimiter else list(text)
    if max_parts is not None:
        parts = parts[: _to_uint32(max_parts)]
    parts_out: list[JsonValue] = list(parts)
    return {"delimiter": delimiter, "count": len(parts), "parts": parts_out}


@nonblocking
def join(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``join``: JavaScript ``parts.join(delimiter)``."""
    raw = input.get("parts")
    if not isinstance(raw, list):
        raise invalid_arg("'parts' must be an array")
    parts: list[str] = []
    for item in raw:
        text = primitive_to_string(item)
        if text is None:
            raise invalid_arg("'parts' must contain only string/number/boolean values")
        parts.append(text)
    delimiter = optional_string(input, "delimiter")
    delimiter = "\n" if delimiter is None else delimiter
    return {"delimiter": delimiter, "count": len(parts), "result": delimiter.join(parts)}


@nonblocking
def trim(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``trim``: strip JavaScript whitespace from the start, the end, or both."""
    text = require_string(input, "text")
    mode = optional_string(input, "mode")
    mode = "both" if mode is None else mode
    if mode == "start":
        result = text.lstrip(JS_WHITESPACE)
    elif mode == "end":
        result = text.rstrip(JS_WHITESPACE)
    else:
        result = text.strip(JS_WHITESPACE)
    return {
        "original": text,
        "result": result,
        "mode": mode,
        "trimmedLength": len(text) - len(result),
    }


@nonblocking
def case(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``case``: upper- or lower-case the text."""
    text = require_string(input, "text")
    to = require_string(input, "to")
    if to == "upper":
        result = text.upper()
    elif to == "lower":
        result = text.lower()
    else:
        raise invalid_arg(
            f"Unsupported case transform {to!r}. Use 'upper' or 'lower'.",
            suggestion="Set to: 'upper' or to: 'lower'.",
        )
    return {"original": text, "result": result, "to": to}


OPERATIONS: dict[str, Callable[[ToolContext, JsonObject], JsonValue]] = {
    "replace": replace,
    "slice": slice_,
    "split": split,
    "join": join,
    "trim": trim,
    "case": case,
}


@nonblocking
def transform(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``transform``: run the operation named by ``operation`` on the other parameters."""
    operation = require_string(input, "operation")
    handler = OPERATIONS.get(operation)
    if handler is None:
        raise invalid_arg(
            f"unknown operation {operation!r}",
            suggestion=f"Use one of: {', '.join(OPERATIONS)}.",
        )
    args = {k: v for k, v in input.items() if k != "operation"}
    output = handler(ctx, args)
    assert isinstance(output, dict)  # every operation returns an object
    return {"operation": operation, **output}


handlers: dict[str, ToolHandler] = {**OPERATIONS, "transform": transform}
