"""A did-you-mean for a misspelt field: the fields the model expects where it was written.

``spec.cases[0].expect.maxStep`` is looked up by walking the kind's spec model along the
path (through lists, mappings, optional and annotated types) to the model that holds it;
the closest of that model's camelCase field names is the suggestion.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence

from pydantic import BaseModel

from bundle.spec_kinds import SPEC_MODELS

Annotation = object


def _models_in(annotation: Annotation) -> list[type[BaseModel]]:
    """The models ``annotation`` names, inside ``list[...]``, ``X | None``, ``Annotated``..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None:
        return []
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        args = args[:1]
    elif origin is dict or (isinstance(origin, type) and issubclass(origin, dict)):
        args = args[1:]  # the values; keys are free-form
    elif origin not in (list, tuple, set, frozenset, typing.Union, types.UnionType):
        return []
    return [model for arg in args for model in _models_in(arg)]


def _aliases(model: type[BaseModel]) -> dict[str, Annotation]:
    """``camelCase name → annotation`` of each field of ``model``."""
    return {(info.alias or name): info.annotation for name, info in model.model_fields.items()}


def fields_at(kind: str, path: Sequence[str | int]) -> list[str]:
    """The field names expected at ``path`` (``("spec", "cases", 0, "expect")``) of a
    ``kind`` resource; empty when the path leaves the models (free-form config)."""
    model = SPEC_MODELS.get(kind)
    if model is None or not path or path[0] != "spec":
        return []
    current: Annotation = model
    for part in path[1:]:
        if isinstance(part, int):
            continue  # a list's item: its models are found through the list
        found = [fields[part] for m in _models_in(current) if part in (fields := _aliases(m))]
        if not found:
            return []
        current = found[0]
    return sorted({name for m in _models_in(current) for name in _aliases(m)})


def field_suggestion(kind: object, path: Sequence[str | int]) -> str | None:
    """``did you mean 'maxSteps'?`` for the unknown field at the end of ``path``, or ``None``."""
    if not isinstance(kind, str) or not path or not isinstance(path[-1], str):
        return None
    close = difflib.get_close_matches(path[-1], fields_at(kind, path[:-1]), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None
