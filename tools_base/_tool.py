"""Tool exports from type hints: the ``@tool`` decorator and the schema it derives.

A handler written as ``def hello(ctx: ToolContext, name: str, loud: bool = False)`` says what
its arguments are; :func:`tool` turns it into a handler of the usual shape,
``handler(ctx, input)``, that validates ``input`` against those hints (with pydantic) and calls
the function with the values. The JSON Schema of the same hints, with descriptions from the
docstring, is what ``goondan tool schema`` prints for the Tool's ``exports`` and what
``validate`` compares with the YAML; the YAML stays what the model is shown.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, overload

import pydantic

from goondan.errors import ToolCode
from tools_base._context import ToolContext
from tools_base._docstring import parse_docstring
from tools_base._json import JsonObject, JsonValue
from tools_base._result import ToolError

EXPORT_ATTR = "__goondan_tool_export__"
"""Attribute of a :func:`tool` handler: its ``exports`` entry (``name``, ``description``,
``parameters``), a plain JSON object, so the config plane can read it without this package."""

CONTEXT_NAME = "ctx"
"""An unannotated parameter of this name receives the context."""

MAX_LISTED_ISSUES = 5
"""Issues spelled out in one error message; the rest are counted (as the runtime's own)."""

_R = TypeVar("_R")
# Keys first in every schema object, in this order, so the YAML reads like a hand-written one.
_KEY_ORDER = ("type", "description", "enum", "const", "default", "properties", "required", "items")


class ToolSignatureError(TypeError):
    """A function whose signature cannot describe a tool's arguments; the message names the
    function and the parameter, and says what to change."""


@overload
def tool(function: Callable[..., _R], /) -> Callable[[ToolContext, JsonObject], _R]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., _R]], Callable[[ToolContext, JsonObject], _R]]: ...


def tool(
    function: Callable[..., _R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Make a handler of a function whose parameters are typed, as ``@tool`` or
    ``@tool(name=..., description=...)``.

    The parameter annotated :class:`ToolContext` (or an unannotated one named ``ctx``) gets the
    call's context and is not an argument; every other parameter is one, typed by its hint
    (anything pydantic validates and describes: ``str``, ``int``, ``float``, ``bool``,
    ``Literal[...]``, enums, ``X | None``, ``list[...]``, ``dict[str, ...]``, pydantic models,
    ``typing_extensions.TypedDict``), required unless it has a default, described by the
    docstring's ``Args:`` entry. The result is called as every handler is,
    ``handler(ctx, input)``; arguments that do not match the hints fail the call with
    ``E_TOOL_INVALID_ARGS`` naming the field. An ``async def`` stays a coroutine function, and
    :func:`~tools_base.nonblocking` applies before or after.

    ``name`` is the export's name (default: the function's); ``description`` replaces the
    docstring's. Raises :class:`ToolSignatureError` at decoration for a hint with no JSON
    Schema, a missing hint, or ``*args``/``**kwargs``.
    """

    def decorate(fn: Callable[..., _R]) -> Callable[[ToolContext, JsonObject], _R]:
        signature = _ToolSignature(fn, name=name, description=description)
        handler: Callable[[ToolContext, JsonObject], Any]
        if inspect.iscoroutinefunction(fn):

            async def run_async(ctx: ToolContext, input: JsonObject) -> Any:
                args, kwargs = signature.arguments(ctx, input)
                return await fn(*args, **kwargs)

            handler = run_async
        else:

            def run(ctx: ToolContext, input: JsonObject) -> Any:
                args, kwargs = signature.arguments(ctx, input)
                return fn(*args, **kwargs)

            handler = run
        wrapped = functools.wraps(fn)(handler)
        del wrapped.__wrapped__  # the handler's own signature is (ctx, input), not fn's
        setattr(wrapped, EXPORT_ATTR, signature.export)
        return wrapped

    if function is not None:
        return decorate(function)
    return decorate


def tool_export(function: Callable[..., Any]) -> JsonObject:
    """The ``exports`` entry (``name``, ``description``, ``parameters``) of ``function``: the
    one :func:`tool` recorded, or one derived the same way from a plain typed function.
    Raises :class:`ToolSignatureError` as :func:`tool` does."""
    recorded = getattr(function, EXPORT_ATTR, None)
    if isinstance(recorded, dict):
        return recorded
    if _is_plain_handler(function):
        raise ToolSignatureError(
            f"{getattr(function, '__qualname__', repr(function))}() is a handler of the usual "
            "shape, (ctx, input): its arguments have no hints to describe; give each argument "
            "a typed parameter of its own and decorate it with @tool"
        )
    return _ToolSignature(function, name=None, description=None).export


def _is_plain_handler(function: Callable[..., Any]) -> bool:
    """``(ctx, input)`` with nothing said about ``input`` but that it is a JSON object."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    if len(params) != 2 or params[1].name != "input":
        return False
    hint = params[1].annotation
    return hint in (inspect.Parameter.empty, dict, "dict", "JsonObject") or (
        typing.get_origin(hint) is dict or hint == JsonObject
    )


class _ToolSignature:
    """One function's arguments: the model that validates them and the export it describes."""

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None, description: str | None
    ) -> None:
        self.where = f"{getattr(fn, '__qualname__', repr(fn))}()"
        try:
            signature = inspect.signature(fn)
            hints = _parameter_hints(fn)
        except (TypeError, ValueError, NameError) as exc:
            raise ToolSignatureError(f"{self.where}: cannot read its type hints: {exc}") from exc
        docs = parse_docstring(inspect.getdoc(fn))
        self.context: str | None = None
        self.positional: list[str] = []  # in order, the context among them
        self.keyword: list[str] = []
        fields: dict[str, Any] = {}
        for index, param in enumerate(signature.parameters.values()):
            hint = hints.get(param.name, inspect.Parameter.empty)
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolSignatureError(
                    f"{self.where}: parameter {param.name!r} is *args or **kwargs; a tool's "
                    "arguments must each be a named parameter"
                )
            by_position = param.kind != param.KEYWORD_ONLY
            (self.positional if by_position else self.keyword).append(param.name)
            if _is_context(hint) or (
                hint is inspect.Parameter.empty and param.name == CONTEXT_NAME
            ):
                if self.context is not None:
                    raise ToolSignatureError(f"{self.where}: two parameters take the ToolContext")
                self.context = param.name
                continue
            if hint is inspect.Parameter.empty:
                raise ToolSignatureError(
                    f"{self.where}: parameter {param.name!r} has no type hint; add one "
                    "(str, int, a pydantic model...) so its JSON Schema can be derived"
                )
            default = ... if param.default is param.empty else param.default
            fields[f"p{index}"] = (
                hint,
                pydantic.Field(
                    default, alias=param.name, description=docs.parameters.get(param.name)
                ),
            )
        self.model = self._model(fn, fields)
        self.fields = {info.alias or key: key for key, info in self.model.model_fields.items()}
        said = description if description is not None else docs.description
        self.export: JsonObject = {"name": name or getattr(fn, "__name__", "tool")}
        if said:
            self.export["description"] = said
        self.export["parameters"] = self._parameters(fields)

    def _model(self, fn: Callable[..., Any], fields: dict[str, Any]) -> type[pydantic.BaseModel]:
        try:
            return pydantic.create_model(
                f"{getattr(fn, '__name__', 'tool')}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid", populate_by_name=False),
                **fields,
            )
        except Exception as exc:  # pydantic's errors name the type, not our parameter
            raise self._hint_error(fields, exc) from exc

    def _parameters(self, fields: dict[str, Any]) -> JsonObject:
        try:
            schema = self.model.model_json_schema(by_alias=True, mode="validation")
        except Exception as exc:
            raise self._hint_error(fields, exc) from exc
        return typing.cast(JsonObject, _tidy(_inline_refs(schema)))

    def _hint_error(self, fields: dict[str, Any], exc: Exception) -> ToolSignatureError:
        """The error naming the first parameter whose hint pydantic cannot take."""
        for hint, info in fields.values():
            try:
                pydantic.TypeAdapter(hint).json_schema()
            except Exception as own:
                first = str(own).strip().splitlines()[0] if str(own).strip() else type(own).__name__
                return ToolSignatureError(
                    f"{self.where}: parameter {info.alias!r}: its type hint {_show(hint)} has no "
                    f"JSON Schema ({first})"
                )
        return ToolSignatureError(f"{self.where}: its type hints have no JSON Schema: {exc}")

    def arguments(self, ctx: ToolContext, input: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments of one call, or :class:`ToolError`
        ``E_TOOL_INVALID_ARGS`` naming each field ``input`` gets wrong."""
        try:
            parsed = self.model.model_validate(input)
        except pydantic.ValidationError as exc:
            raise _invalid(exc, self.export["parameters"]) from None
        values: dict[str, Any] = {alias: getattr(parsed, key) for alias, key in self.fields.items()}
        if self.context is not None:
            values[self.context] = ctx
        return [values[n] for n in self.positional], {n: values[n] for n in self.keyword}


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The evaluated hints of ``fn``'s parameters. The return hint is left out: it says
    nothing about the arguments, and a string alias there (``-> JsonValue`` in a module with
    ``from __future__ import annotations``) may name what the module never imported."""
    target = inspect.unwrap(fn)
    own = {k: v for k, v in getattr(target, "__annotations__", {}).items() if k != "return"}
    holder = types.SimpleNamespace(__annotations__=own)
    return typing.get_type_hints(
        holder, globalns=getattr(target, "__globals__", {}), include_extras=True
    )


def _is_context(hint: Any) -> bool:
    """``ToolContext``, ``ToolContext | None`` or ``Annotated[ToolContext, ...]``."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(_is_context(a) for a in typing.get_args(hint) if a is not type(None))
    return isinstance(hint, type) and issubclass(hint, ToolContext)


def _show(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else repr(hint).replace("typing.", "")


def _invalid(exc: pydantic.ValidationError, parameters: JsonValue) -> ToolError:
    """The runtime's own answer to arguments its schema refuses: ``args.<path>: <why>``,
    without the offending values (they may be secrets)."""
    issues = []
    for error in exc.errors(include_url=False, include_input=False):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        issues.append(f"args{path}: {error['msg']}")
    shown = "; ".join(issues[:MAX_LISTED_ISSUES])
    if len(issues) > MAX_LISTED_ISSUES:
        shown += f"; +{len(issues) - MAX_LISTED_ISSUES} more issues"
    schema = parameters if isinstance(parameters, dict) else {}
    required = schema.get("required", [])
    allowed = list(schema.get("properties") or {})  # type: ignore[arg-type]
    return ToolError(
        f"Invalid arguments: {shown}",
        code=ToolCode.E_TOOL_INVALID_ARGS,
        name="ToolInputValidationError",
        suggestion="Call the tool again with arguments that match its parameters: "
        f"required={required}, allowed={allowed}",
    )


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``$ref`` into ``$defs`` replaced by its definition, which every
    provider accepts; a recursive type keeps its ``$defs`` (it has no finite inline form)."""
    defs: dict[str, Any] = schema.get("$defs", {})
    recursive = False

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        nonlocal recursive
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen or name not in defs:
                recursive = True
                return node
            beside = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**defs[name], **beside}, (*seen, name))
        return {key: walk(value, seen) for key, value in node.items() if key != "$defs"}

    inlined = walk(schema, ())
    return schema if recursive else typing.cast(dict[str, Any], inlined)


def _tidy(schema: Any, *, is_properties: bool = False) -> Any:
    """Drop pydantic's generated ``title`` s (noise to a model) and put the common keys first.
    ``is_properties``: ``schema`` maps property names to schemas (a name may be ``title``)."""
    if isinstance(schema, list):
        return [_tidy(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if is_properties:
        return {name: _tidy(sub) for name, sub in schema.items()}
    out = {
        key: _tidy(value, is_properties=key in ("properties", "$defs", "patternProperties"))
        for key, value in schema.items()
        if key != "title"
    }
    first = {key: out.pop(key) for key in _KEY_ORDER if key in out}
    return {**first, **out}
