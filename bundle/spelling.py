""" "Did you mean" for a misspelt field or reference: the nearest name among those allowed."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

CUTOFF = 0.7
"""How alike a name must be to be offered (difflib's ratio)."""


def nearest(name: str, allowed: Iterable[str]) -> str | None:
    """The allowed name ``name`` most likely misspells, if one is close."""
    found = difflib.get_close_matches(name, list(allowed), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def field_names(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The field names (as written in YAML: aliases) of the object at ``path`` under
    ``model``; empty when the path leads to no model."""
    current: Any = model
    for segment in path:
        current = _step(current, segment)
        if current is None:
            return []
    target = _model_in(current)
    if target is None:
        return []
    return [info.alias or name for name, info in target.model_fields.items()]


def _step(annotation: Any, segment: str | int) -> Any:
    """What is found one step into a value of type ``annotation``."""
    for option in _options(annotation):
        origin = typing.get_origin(option)
        if origin in (list, tuple) and isinstance(segment, int):
            return typing.get_args(option)[0]
        if origin is dict and isinstance(segment, str):
            return typing.get_args(option)[1]
        model = _model_in(option)
        if model is not None and isinstance(segment, str):
            for name, info in model.model_fields.items():
                if segment in (name, info.alias):
                    return info.annotation
    return None


def _options(annotation: Any) -> list[Any]:
    """The members of a union (``X | None``), or the type itself; ``Annotated`` unwrapped."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_options(a)[0] for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for option in _options(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None
