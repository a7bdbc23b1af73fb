"""Loading the Python module behind a Tool (or Extension) ``entry``.

A module inside an importable package (the built-in tools in ``tools_base``) is imported by its
dotted name, so it is the same module object everywhere. Any other file is loaded from its
path under a unique synthetic name and registered in ``sys.modules`` first, so dataclasses and
pickling inside it work.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any


class EntryLoadError(Exception):
    """The entry module could not be imported, or does not export what it must."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def module_name_for(path: Path) -> str | None:
    """The dotted name of ``path`` if it lies in a package importable from ``sys.path``."""
    path = path.resolve()
    parts = [path.stem]
    directory = path.parent
    while (directory / "__init__.py").exists():
        parts.insert(0, directory.name)
        directory = directory.parent
    if len(parts) == 1:
        return None
    roots = {Path(p or ".").resolve() for p in sys.path}
    return ".".join(parts) if directory in roots else None


def load_entry_module(path: Path) -> ModuleType:
    """Import the module at ``path`` (see the module docstring for how)."""
    path = path.resolve()
    if not path.is_file():
        raise EntryLoadError(f"entry file not found: {path}", code="E_CONFIG_ENTRY_NOT_FOUND")
    dotted = module_name_for(path)
    if dotted is not None:
        try:
            return importlib.import_module(dotted)
        except Exception as exc:
            raise _load_failed(path, exc) from exc
    name = "goondan_entry_" + hashlib.sha1(str(path).encode()).hexdigest()[:16]
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EntryLoadError(f"cannot import {path}", code="E_CONFIG_ENTRY_LOAD_FAILED")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise _load_failed(path, exc) from exc
    return module


def _load_failed(path: Path, exc: Exception) -> EntryLoadError:
    return EntryLoadError(
        f"importing {path} raised {type(exc).__name__}: {exc}", code="E_CONFIG_ENTRY_LOAD_FAILED"
    )


def resolve_handlers(
    module: ModuleType, config: Mapping[str, Any]
) -> Mapping[str, Callable[..., Any]]:
    """The module's handlers: ``configure(config)`` when there is config, else ``handlers``."""
    if config:
        configure = getattr(module, "configure", None)
        if not callable(configure):
            raise EntryLoadError(
                f"{module.__name__} takes no configuration: it defines no configure(config), "
                f"but config was given ({', '.join(sorted(config))})",
                code="E_CONFIG_HANDLER_MISSING",
            )
        try:
            handlers = configure(dict(config))
        except ValueError as exc:
            raise EntryLoadError(f"invalid config: {exc}", code="E_CONFIG_SCHEMA_INVALID") from exc
    else:
        handlers = getattr(module, "handlers", None)
        if handlers is None:
            raise EntryLoadError(
                f"{module.__name__} does not export `handlers`",
                code="E_CONFIG_HANDLER_MISSING",
            )
    if not isinstance(handlers, Mapping):
        raise EntryLoadError(
            f"`handlers` of {module.__name__} must be a dict of export name to function, "
            f"not {type(handlers).__name__}",
            code="E_CONFIG_HANDLER_MISSING",
        )
    return {str(k): v for k, v in handlers.items() if callable(v)}
