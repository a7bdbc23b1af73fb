"""Where a Python file sits among the importable packages: the one rule by which the runtime
and ``tool-schema`` load an entry module by its dotted name."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path


def dotted_name(path: Path) -> str | None:
    """The dotted module name of the resolved ``path`` when it lies in a package (a directory
    with ``__init__.py``, and its parents with one) whose root is on ``sys.path``; else
    ``None``."""
    parts = [path.stem]
    directory = path.parent
    while (directory / "__init__.py").exists():
        parts.insert(0, directory.name)
        directory = directory.parent
    if len(parts) == 1:
        return None
    return ".".join(parts) if directory in _import_roots(tuple(sys.path), os.getcwd()) else None


@functools.lru_cache(maxsize=8)
def _import_roots(search_path: tuple[str, ...], cwd: str) -> frozenset[Path]:
    """The directories of ``sys.path``, resolved. Resolving them again for every entry module
    (a ``lstat`` per path component) was most of the cost of loading an agent's tools."""
    return frozenset(Path(cwd, p).resolve() for p in search_path)
