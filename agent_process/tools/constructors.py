"""Cheap constructors for the frozen dataclasses the executor builds on every tool call."""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _Factory:
    """The default shown for a field with a ``default_factory``, as ``dataclasses`` shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def slot_constructor(cls: Callable[P, T]) -> Callable[P, T]:
    """A function that builds ``cls`` as ``cls(...)`` does, for about half the cost.

    ``cls`` is a frozen dataclass with slots. ``cls(...)`` pays twice on a hot path: CPython
    3.11 packs the keyword arguments of a class call into a dict and unpacks them again for
    ``__init__``, and the ``__init__`` that ``dataclasses`` writes for a frozen class stores each
    field with ``object.__setattr__(self, "name", value)``, which finds the slot by name every
    time. The function returned takes the same arguments (its signature is checked against
    ``__init__``'s), creates the instance with ``object.__new__`` and fills each slot through
    its descriptor. What it returns is what ``cls(...)`` returns: frozen, equal and hashing
    alike.
    """
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    _check_adoptable(cls)
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY, "_new": object.__new__, "_cls": cls}
    positional: list[str] = []
    keyword: list[str] = []
    body = ["    self = _new(_cls)"]
    for index, field in enumerate(dataclasses.fields(cls)):
        param = _field_source(cls, index, field, namespace, body)
        (keyword if field.kw_only else positional).append(param)
    body.append("    return self")
    signature = ", ".join([*positional, *(["*", *keyword] if keyword else [])])
    # The source is made of the field names only; it runs once, when the class is adopted.
    exec(f"def new({signature}):\n" + "\n".join(body), namespace)
    constructor: Callable[P, T] = namespace["new"]
    _dress_as_init(constructor, cls)
    return constructor


def _check_adoptable(cls: type) -> None:
    """Raise ``TypeError`` unless :func:`slot_constructor` can build ``cls``."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not (params.frozen and params.init) or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__qualname__} is not a frozen dataclass with slots and __init__")
    if hasattr(cls, "__post_init__") or "__new__" in vars(cls):
        raise TypeError(f"{cls.__qualname__}: __post_init__ or __new__ is not supported")


def _field_source(
    cls: type, index: int, field: dataclasses.Field[Any], namespace: dict[str, Any], body: list[str]
) -> str:
    """The parameter of ``field`` (number ``index``); the lines that store it are added to
    ``body``, the defaults and slot setter they use to ``namespace``."""
    if not field.init:
        raise TypeError(f"{cls.__qualname__}.{field.name}: init=False is not supported")
    name = param = field.name
    if name == "self" or name.startswith("_"):  # would clash with the names used below
        raise TypeError(f"{cls.__qualname__}.{name}: field name not supported")
    if field.default is not dataclasses.MISSING:
        namespace[f"_default_{index}"] = field.default
        param = f"{name}=_default_{index}"
    elif field.default_factory is not dataclasses.MISSING:
        namespace[f"_factory_{index}"] = field.default_factory
        param = f"{name}=_FACTORY"
        body.append(f"    if {name} is _FACTORY:\n        {name} = _factory_{index}()")
    namespace[f"_set_{index}"] = _slot(cls, name).__set__
    body.append(f"    _set_{index}(self, {name})")
    return param


def _dress_as_init(constructor: Callable[..., Any], cls: type) -> None:
    """Give ``constructor`` the annotations, name and doc of a constructor of ``cls``, and
    check its signature is that of the ``__init__`` ``dataclasses`` wrote."""
    init = vars(cls)["__init__"]
    annotations = dict(init.__annotations__)
    annotations.pop("return", None)
    constructor.__annotations__ = annotations
    constructor.__qualname__ = constructor.__name__ = f"new_{cls.__name__}"
    constructor.__doc__ = f"Build a {cls.__qualname__}, as ``{cls.__qualname__}(...)`` does."
    wanted = [str(p) for p in inspect.signature(init).parameters.values()][1:]  # without self
    if [str(p) for p in inspect.signature(constructor).parameters.values()] != wanted:
        raise TypeError(f"{cls.__qualname__}: cannot reproduce the signature of __init__")


def _slot(cls: type, name: str) -> types.MemberDescriptorType:
    for klass in cls.__mro__:
        slot = vars(klass).get(name)
        if isinstance(slot, types.MemberDescriptorType):
            return slot
    raise TypeError(f"{cls.__qualname__}.{name} is not a slot")
