"""text-transform: JavaScript string semantics (slice, split limit, trim), as tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.tool_context import make_ctx
from tools_base import ToolError, is_nonblocking
from tools_base.tools import text_transform

H = text_transform.handlers
CTX = make_ctx(Path("unused-workdir"))  # text-transform never touches the workdir


def call(export: str, **args: Any) -> dict[str, Any]:
    out = H[export](CTX, args)
    assert isinstance(out, dict)
    return out


def invalid(export: str, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as exc_info:
        H[export](CTX, args)
    assert exc_info.value.code == "E_TOOL_INVALID_ARGS"
    return exc_info.value


@pytest.mark.parametrize(
    ("args", "result", "count"),
    [
        ({"text": "a-b-c", "search": "-", "replacement": "+"}, "a+b-c", 1),
        ({"text": "a-b-c", "search": "-", "replacement": "+", "all": True}, "a+b+c", 2),
        ({"text": "a-b-c", "search": "-"}, "ab-c", 1),
        ({"text": "a-b-c", "search": "x", "all": True}, "a-b-c", 0),
        ({"text": "aaaa", "search": "aa", "replacement": "b", "all": True}, "bb", 2),
        ({"text": "a.b", "search": ".", "replacement": "$&"}, "a$&b", 1),  # not a pattern
    ],
)
def test_replace(args: dict[str, Any], result: str, count: int) -> None:
    out = call("replace", **args)
    assert out == {"original": args["text"], "result": result, "replacements": count}


@pytest.mark.parametrize(
    ("start", "end", "result", "end_out"),
    [
        (None, None, "hello", 5),
        (1, 3, "el", 3),
        (-3, None, "llo", 5),
        (-3, -1, "ll", -1),
        (1.7, 3.9, "el", 3.9),
        (-1.5, None, "o", 5),
        (3, 1, "", 1),
        (-10, None, "hello", 5),
        (2, 100, "llo", 100),
        (10, None, "", 5),
    ],
)
def test_slice(start: float | None, end: float | None, result: str, end_out: float) -> None:
    args: dict[str, Any] = {"text": "hello"}
    if start is not None:
        args["start"] = start
    if end is not None:
        args["end"] = end
    out = call("slice", **args)
    expected_start = 0 if start is None else start
    assert out == {
        "original": "hello",
        "result": result,
        "start": expected_start,
        "end": end_out,
        "length": len(result),
    }


def test_slice_counts_code_points() -> None:
    assert call("slice", text="a😀b", start=1, end=2)["result"] == "😀"


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        ({"text": "a\nb\nc"}, ["a", "b", "c"]),
        ({"text": "a,b,c", "delimiter": ","}, ["a", "b", "c"]),
        ({"text": "a,b,c", "delimiter": ",", "maxParts": 2}, ["a", "b"]),  # rest dropped
        ({"text": "a,b,c", "delimiter": ",", "maxParts": 0}, []),
        ({"text": "a,b,c", "delimiter": ",", "maxParts": -1}, ["a", "b", "c"]),  # ToUint32
        ({"text": "a,b,c", "delimiter": ",", "maxParts": 1.9}, ["a"]),
        ({"text": "a,b,c", "delimiter": ",", "maxParts": 10}, ["a", "b", "c"]),
        ({"text": "abc", "delimiter": ""}, ["a", "b", "c"]),
        ({"text": ",a,", "delimiter": ","}, ["", "a", ""]),
        ({"text": "abc", "delimiter": "x"}, ["abc"]),
    ],
)
def test_split(args: dict[str, Any], parts: list[str]) -> None:
    out = call("split", **args)
    assert out == {"delimiter": args.get("delimiter", "\n"), "count": len(parts), "parts": parts}


@pytest.mark.parametrize(
    ("args", "result"),
    [
        ({"parts": ["a", "b"]}, "a\nb"),
        ({"parts": ["a", 1, 1.5, 2.0, True, False], "delimiter": ","}, "a,1,1.5,2,true,false"),
        ({"parts": [], "delimiter": ","}, ""),
        ({"parts": ["x"], "delimiter": ""}, "x"),
    ],
)
def test_join(args: dict[str, Any], result: str) -> None:
    out = call("join", **args)
    assert out == {
        "delimiter": args.get("delimiter", "\n"),
        "count": len(args["parts"]),
        "result": result,
    }


@pytest.mark.parametrize("parts", [[None], [["nested"]], [{"a": 1}], "a,b"])
def test_join_rejects_non_primitives(parts: Any) -> None:
    invalid("join", parts=parts)


@pytest.mark.parametrize(
    ("text", "mode", "result"),
    [
        ("  hi \n", None, "hi"),
        ("  hi \n", "both", "hi"),
        ("  hi \n", "start", "hi \n"),
        ("  hi \n", "end", "  hi"),
        ("  hi \n", "sideways", "hi"),  # unknown → both
        ("\ufeff\u00a0hi\u3000\u2028", None, "hi"),  # JavaScript whitespace
        ("\x1chi\x1f", None, "\x1chi\x1f"),  # Python's isspace() would strip these; JS doesn't
    ],
)
def test_trim(text: str, mode: str | None, result: str) -> None:
    args: dict[str, Any] = {"text": text}
    if mode is not None:
        args["mode"] = mode
    out = call("trim", **args)
    assert out == {
        "original": text,
        "result": result,
        "mode": mode or "both",
        "trimmedLength": len(text) - len(result),
    }


@pytest.mark.parametrize(
    ("text", "to", "result"),
    [("Hello World", "upper", "HELLO WORLD"), ("Hello World", "lower", "hello world"),
     ("straße", "upper", "STRASSE")],
)  # fmt: skip
def test_case(text: str, to: str, result: str) -> None:
    assert call("case", text=text, to=to) == {"original": text, "result": result, "to": to}


def test_case_rejects_other_targets() -> None:
    error = invalid("case", text="x", to="title")
    assert "'title'" in error.message


@pytest.mark.parametrize(
    ("export", "args"),
    [
        ("replace", {"text": "", "search": "a"}),
        ("replace", {"text": "abc", "search": ""}),
        ("slice", {"text": ""}),
        ("slice", {"text": "abc", "start": "1"}),
        ("split", {"text": "abc", "maxParts": "2"}),
        ("trim", {"text": 5}),
        ("case", {"text": "abc"}),
    ],
)
def test_invalid_arguments(export: str, args: dict[str, Any]) -> None:
    invalid(export, **args)


def test_transform_dispatches_to_the_operation() -> None:
    out = call("transform", operation="split", text="a,b,c", delimiter=",", maxParts=2)
    assert out == {"operation": "split", "delimiter": ",", "count": 2, "parts": ["a", "b"]}
    assert call("transform", operation="case", text="ab", to="upper")["result"] == "AB"
    assert call("transform", operation="join", parts=[1, 2], delimiter="+")["result"] == "1+2"


def test_transform_unknown_operation() -> None:
    error = invalid("transform", operation="reverse", text="abc")
    assert error.suggestion
    assert "replace" in error.suggestion
    invalid("transform", text="abc")


def test_handlers_run_inline() -> None:
    assert set(H) == {"replace", "slice", "split", "join", "trim", "case", "transform"}
    assert all(is_nonblocking(handler) for handler in H.values())
