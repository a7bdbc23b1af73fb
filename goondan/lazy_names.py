"""Names a package re-exports from its modules, each imported when first asked for, so that
importing one module of the package does not import them all (the CLI's start counts them)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping


def lazy_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) for ``package``: a name of ``homes`` is taken from the
    module ``homes`` names for it, imported then, and kept in the package for the next use;
    any other name is an ``AttributeError``."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        __import__(home)  # as a statement would (-X importtime reports it)
        value = getattr(sys.modules[home], name)
        namespace[name] = value
        return value

    return __getattr__
