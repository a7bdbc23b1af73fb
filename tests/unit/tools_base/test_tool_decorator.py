"""``@tool``: the JSON Schema a typed handler's hints and docstring describe, and the handler it
makes (the usual ``handler(ctx, input)``, validating ``input`` against the hints)."""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agent_process.tools.schema import compile_args_validator
from tests.support.tool_context import make_ctx
from tools_base import (
    JsonObject,
    ToolContext,
    ToolError,
    ToolSignatureError,
    is_nonblocking,
    nonblocking,
    tool,
    tool_export,
)
from tools_base._tool import EXPORT_ATTR


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(TypedDict):
    street: str
    number: int


class Order(BaseModel):
    """An order to place."""

    item: str
    quantity: int = 1
    ship_to: list[Address] = []


def parameters(function: Callable[..., Any]) -> dict[str, Any]:
    params = tool_export(function)["parameters"]
    assert isinstance(params, dict)
    return params


def test_simple_types_defaults_and_the_required_list() -> None:
    @tool
    def f(ctx: ToolContext, text: str, count: int, ratio: float = 0.5, loud: bool = False) -> str:
        return text

    assert parameters(f) == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number", "default": 0.5},
            "loud": {"type": "boolean", "default": False},
        },
        "required": ["text", "count"],
        "additionalProperties": False,
    }


def test_optional_literal_enum_list_and_dict() -> None:
    @tool
    def f(
        ctx: ToolContext,
        mode: Literal["fast", "slow"],
        colour: Colour = Colour.RED,
        note: str | None = None,
        tags: list[str] | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        return None

    props = parameters(f)["properties"]
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["colour"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    assert props["note"] == {"default": None, "anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["weights"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert parameters(f)["required"] == ["mode"]


def test_nested_models_and_typed_dicts_are_inlined_without_titles() -> None:
    @tool
    def place(ctx: ToolContext, order: Order) -> None:
        return None

    schema = parameters(place)
    assert "$defs" not in schema
    assert "title" not in str(schema)
    order = schema["properties"]["order"]
    assert order["type"] == "object"
    assert order["description"] == "An order to place."
    assert order["required"] == ["item"]
    address = order["properties"]["ship_to"]["items"]
    assert address == {
        "type": "object",
        "properties": {"street": {"type": "string"}, "number": {"type": "integer"}},
        "required": ["street", "number"],
    }


def test_a_property_named_title_is_kept() -> None:
    @tool
    def f(ctx: ToolContext, title: str) -> None:
        return None

    assert parameters(f)["properties"] == {"title": {"type": "string"}}


def test_google_docstring_describes_the_tool_and_each_parameter() -> None:
    @tool
    def search(ctx: ToolContext, query: str, limit: int = 10) -> list[str]:
        """Search the catalogue.

        Matches are ranked by relevance.

        Args:
            query: What to look for; words are
                combined with AND.
            limit (int): At most this many results.

        Returns:
            The matching titles.
        """
        return []

    export = tool_export(search)
    assert export["name"] == "search"
    assert export["description"] == "Search the catalogue.\n\nMatches are ranked by relevance."
    props = parameters(search)["properties"]
    assert props["query"]["description"] == "What to look for; words are combined with AND."
    assert props["limit"] == {
        "type": "integer",
        "description": "At most this many results.",
        "default": 10,
    }


def test_numpy_and_sphinx_docstrings() -> None:
    @tool
    def numpy_style(ctx: ToolContext, path: str, depth: int = 1) -> None:
        """List a directory.

        Parameters
        ----------
        path : str
            The directory, relative to the workspace.
        depth : int
            How deep to go.

        Returns
        -------
        None
        """

    @tool
    def sphinx_style(ctx: ToolContext, path: str) -> None:
        """Read a file.

        :param path: The file to read.
        :returns: nothing
        """

    assert tool_export(numpy_style)["description"] == "List a directory."
    props = parameters(numpy_style)["properties"]
    assert props["path"]["description"] == "The directory, relative to the workspace."
    assert props["depth"]["description"] == "How deep to go."
    assert tool_export(sphinx_style)["description"] == "Read a file."
    assert parameters(sphinx_style)["properties"]["path"]["description"] == "The file to read."


def test_name_and_description_given_to_the_decorator_win() -> None:
    @tool(name="lookup", description="Look it up.")
    def find(ctx: ToolContext, key: str) -> None:
        """Something else."""

    export = tool_export(find)
    assert (export["name"], export["description"]) == ("lookup", "Look it up.")


def test_the_context_is_never_an_argument_wherever_it_is() -> None:
    @tool
    def annotated(ctx: ToolContext, a: int) -> Any:
        return ctx

    @tool
    def unannotated(ctx, a: int) -> Any:  # type: ignore[no-untyped-def]
        return ctx

    @tool
    def optional_last(a: int, *, context: ToolContext | None = None) -> Any:
        return context

    @tool
    def without(a: int) -> int:
        return a

    for handler in (annotated, unannotated, optional_last, without):
        assert list(parameters(handler)["properties"]) == ["a"]
    ctx = make_ctx(Path("."))
    assert annotated(ctx, {"a": 1}) is ctx
    assert unannotated(ctx, {"a": 1}) is ctx
    assert optional_last(ctx, {"a": 1}) is ctx
    assert without(ctx, {"a": 7}) == 7


def test_the_handler_is_called_with_validated_values() -> None:
    seen: dict[str, Any] = {}

    @tool
    def place(
        ctx: ToolContext, order: Order, colour: Colour = Colour.BLUE, *, rush: bool = False
    ) -> str:
        seen.update(order=order, colour=colour, rush=rush)
        return "ok"

    assert inspect.signature(place).parameters.keys() == {"ctx", "input"}
    assert place(make_ctx(Path(".")), {"order": {"item": "tea"}, "rush": True}) == "ok"
    assert seen == {"order": Order(item="tea"), "colour": Colour.BLUE, "rush": True}


def test_bad_arguments_are_the_runtimes_structured_error_naming_each_field() -> None:
    @tool
    def place(ctx: ToolContext, order: Order, count: int) -> None:
        raise AssertionError("never called with bad arguments")

    with pytest.raises(ToolError) as refused:
        place(make_ctx(Path(".")), {"order": {"ship_to": [{"street": "s3cr3t-value"}]}, "cnt": 2})
    error = refused.value
    assert (error.code, error.name) == ("E_TOOL_INVALID_ARGS", "ToolInputValidationError")
    assert "args.order.item: Field required" in error.message
    assert "args.order.ship_to[0].number: Field required" in error.message
    assert "args.count: Field required" in error.message
    assert "args.cnt: Extra inputs are not permitted" in error.message
    assert "s3cr3t-value" not in error.message  # values may be secrets
    assert error.suggestion is not None
    assert "required=['order', 'count']" in error.suggestion


def test_a_wrong_type_names_the_field() -> None:
    @tool
    def f(ctx: ToolContext, count: int) -> int:
        return count

    with pytest.raises(ToolError, match=r"args\.count: Input should be a valid integer"):
        f(make_ctx(Path(".")), {"count": "many"})


def test_an_async_function_stays_a_coroutine_function() -> None:
    @tool
    async def wait(ctx: ToolContext, seconds: float) -> float:
        await asyncio.sleep(0)
        return seconds

    assert inspect.iscoroutinefunction(wait)
    assert asyncio.run(wait(make_ctx(Path(".")), {"seconds": 2})) == 2.0  # type: ignore[arg-type]


def test_nonblocking_survives_either_order() -> None:
    @tool
    @nonblocking
    def inner(ctx: ToolContext, a: int) -> int:
        return a

    @nonblocking
    @tool
    def outer(ctx: ToolContext, a: int) -> int:
        return a

    assert is_nonblocking(inner)
    assert is_nonblocking(outer)


def test_the_export_is_a_plain_attribute() -> None:
    @tool
    def f(ctx: ToolContext, a: int) -> int:
        return a

    assert getattr(f, EXPORT_ATTR) == tool_export(f)


def test_a_plain_typed_function_is_described_the_same_way() -> None:
    def plain(ctx: ToolContext, a: int, b: str = "x") -> None:
        """Do it.

        Args:
            a: The a.
        """

    assert tool_export(plain) == tool_export(tool(plain))


def test_the_derived_schema_is_one_the_runtime_validates_with() -> None:
    @tool
    def place(ctx: ToolContext, order: Order, mode: Literal["a", "b"] = "a") -> None:
        return None

    validator = compile_args_validator(parameters(place))
    assert validator.validate({"order": {"item": "tea", "ship_to": []}}) == []
    assert validator.validate({"order": {"item": 3}, "mode": "c", "x": 1}) != []


@pytest.mark.parametrize(
    ("define", "says"),
    [
        (lambda: tool(lambda ctx, a: a), r"parameter 'a' has no type hint"),
        (lambda: tool(_var_args), r"parameter 'rest' is \*args or \*\*kwargs"),
        (lambda: tool(_opaque), r"parameter 'thing': its type hint Opaque has no JSON Schema"),
        (lambda: tool(_callable), r"parameter 'callback': its type hint .* has no JSON Schema"),
        (lambda: tool(_two_contexts), r"two parameters take the ToolContext"),
        (lambda: tool_export(_usual_handler), r"a handler of the usual shape, \(ctx, input\)"),
    ],
)
def test_hints_with_no_json_schema_are_refused_naming_the_parameter(
    define: Callable[[], object], says: str
) -> None:
    with pytest.raises(ToolSignatureError, match=says):
        define()


class Opaque:
    pass


def _var_args(ctx: ToolContext, *rest: int) -> None: ...


def _opaque(ctx: ToolContext, thing: Opaque) -> None: ...


def _callable(ctx: ToolContext, callback: Callable[[int], int]) -> None: ...


def _two_contexts(ctx: ToolContext, other: ToolContext) -> None: ...


def _usual_handler(ctx: ToolContext, input: JsonObject) -> None: ...


def test_constraints_from_annotated_fields_reach_the_schema_and_the_check() -> None:
    @tool
    def f(ctx: ToolContext, times: Annotated[int, Field(ge=1, le=3)] = 1) -> int:
        return times

    assert parameters(f)["properties"]["times"] == {
        "type": "integer",
        "default": 1,
        "maximum": 3,
        "minimum": 1,
    }
    with pytest.raises(ToolError, match=r"args\.times: Input should be greater than or equal to 1"):
        f(make_ctx(Path(".")), {"times": 0})


def test_the_return_hint_is_not_evaluated() -> None:
    # With postponed annotations, a return alias may name what this module never imported.
    @tool
    def f(ctx: ToolContext, a: int) -> NeverImportedHere:  # type: ignore[name-defined]  # noqa: F821
        return a  # type: ignore[no-any-return]

    assert list(parameters(f)["properties"]) == ["a"]
    assert f(make_ctx(Path(".")), {"a": 3}) == 3
