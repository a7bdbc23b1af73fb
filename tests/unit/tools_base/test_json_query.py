"""json-query: upstream's path syntax and outputs, as tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.tool_context import make_ctx
from tools_base import JsonValue, ToolError, is_nonblocking
from tools_base.tools import json_query
from tools_base.tools.json_query import parse_path

H = json_query.handlers
_CTX = make_ctx(Path("unused-workdir"))  # json-query never touches the workdir
DOC = json.dumps(
    {"a": {"b": [1, {"c": 2}], "n": None}, "s": "héllo", "t": True, "x": 1.5, "a.b": "dotted"}
)


def call(export: str, **args: Any) -> dict[str, Any]:
    out = H[export](_CTX, args)
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        ("", []),
        (".", []),
        ("a", ["a"]),
        (".a.b", ["a", "b"]),
        ("a.b[1].c", ["a", "b", "1", "c"]),
        ("a[b][0]", ["a", "b", "0"]),
        ("[a.b]", ["a.b"]),
        ("a..b", ["a", "b"]),
        ("items[0]name", ["items", "0", "name"]),
    ],
)
def test_parse_path(path: str, segments: list[str]) -> None:
    assert parse_path(path) == segments


@pytest.mark.parametrize(
    ("data", "path", "found", "value"),
    [
        (DOC, "a.b[1].c", True, 2),
        (DOC, ".a.b.1.c", True, 2),
        (DOC, "a.b[0]", True, 1),
        (DOC, "a.b[2]", False, None),
        (DOC, "a.b[-1]", False, None),
        (DOC, "a.b[1abc]", True, {"c": 2}),  # parseInt reads the leading digits
        (DOC, "a.b[x]", False, None),
        (DOC, "a.n", True, None),  # a JSON null that exists
        (DOC, "a.n.deeper", False, None),
        (DOC, "a.missing", False, None),
        (DOC, "s.0", False, None),  # strings are not indexable
        (DOC, "[a.b]", True, "dotted"),
        (DOC, "x", True, 1.5),
        ("[10, 20, 30]", "[1]", True, 20),
        ("[10, 20, 30]", "2", True, 30),
        ('"just text"', ".", True, "just text"),
        ("null", ".", True, None),
    ],
)
def test_query(data: str, path: str, found: bool, value: JsonValue) -> None:
    assert call("query", data=data, path=path) == {"path": path, "found": found, "value": value}


def test_query_defaults_to_the_root() -> None:
    assert call("query", data="[1]") == {"path": ".", "found": True, "value": [1]}


@pytest.mark.parametrize("data", ["{bad", "", "NaN", "[Infinity]", "{'a': 1}", "[1,]"])
def test_invalid_json(data: str) -> None:
    with pytest.raises(ToolError) as exc_info:
        H["query"](_CTX, {"data": data})
    expected = "E_TOOL_INVALID_ARGS" if data == "" else "E_JSON_PARSE"
    assert exc_info.value.code == expected
    if data:
        assert exc_info.value.message.startswith("Failed to parse input as JSON")


def test_deeply_nested_json_is_a_parse_error() -> None:
    with pytest.raises(ToolError) as exc_info:
        H["query"](_CTX, {"data": "[" * 100_000 + "]" * 100_000})
    assert exc_info.value.code == "E_JSON_PARSE"


def test_pick() -> None:
    out = call("pick", data='{"a": 1, "b": null, "c": 3}', keys=["c", "b", "zzz"])
    assert out == {"keys": ["c", "b", "zzz"], "result": {"c": 3, "b": None}}
    assert list(out["result"]) == ["c", "b"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"data": "[1]", "keys": ["a"]}, "E_JSON_TYPE_MISMATCH"),
        ({"data": "{}", "keys": "a"}, "E_TOOL_INVALID_ARGS"),
        ({"data": "{}", "keys": [1]}, "E_TOOL_INVALID_ARGS"),
        ({"data": "{}"}, "E_TOOL_INVALID_ARGS"),
    ],
)
def test_pick_errors(args: dict[str, Any], code: str) -> None:
    with pytest.raises(ToolError) as exc_info:
        H["pick"](_CTX, args)
    assert exc_info.value.code == code


@pytest.mark.parametrize(
    ("path", "count", "kind"),
    [
        (".", 5, "object"),
        ("a.b", 2, "array"),
        ("s", 5, "string"),
        ("a.n", 0, "null"),
        ("missing", 0, "null"),
        ("x", 1, "number"),
        ("a.b[0]", 1, "number"),
        ("t", 1, "boolean"),
    ],
)
def test_count(path: str, count: int, kind: str) -> None:
    assert call("count", data=DOC, path=path) == {"path": path, "count": count, "type": kind}


@pytest.mark.parametrize(
    ("depth", "result"),
    [
        (None, [1, 2, [3, [4]], 5]),
        (0, [1, [2, [3, [4]]], 5]),
        (-1, [1, [2, [3, [4]]], 5]),
        (1, [1, 2, [3, [4]], 5]),
        (2, [1, 2, 3, [4], 5]),
        (1.5, [1, 2, 3, [4], 5]),  # like JavaScript: 1.5 > 0, then 0.5 > 0
        (10, [1, 2, 3, 4, 5]),
    ],
)
def test_flatten(depth: float | None, result: list[Any]) -> None:
    args: dict[str, Any] = {"data": "[1, [2, [3, [4]]], 5]"}
    if depth is not None:
        args["depth"] = depth
    out = call("flatten", **args)
    assert out == {"depth": 1 if depth is None else depth, "count": len(result), "result": result}


def test_flatten_needs_an_array() -> None:
    with pytest.raises(ToolError) as exc_info:
        H["flatten"](_CTX, {"data": "{}"})
    assert exc_info.value.code == "E_JSON_TYPE_MISMATCH"


def test_handlers_run_inline() -> None:
    assert all(is_nonblocking(handler) for handler in H.values())
