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

from bundle.errors import (
    E_ENTRY_LOAD_FAILED,
    E_ENTRY_NOT_FOUND,
    E_HANDLER_MISSING,
    E_SCHEMA_INVALID,
)
from goondan.errors import ConfigError
from goondan.modules import dotted_name

SYNTHETIC_PREFIX = "goondan_entry_"
"""Prefix of the ``sys.modules`` name of an entry loaded from its path."""


class EntryLoadError(ConfigError):
    """The entry module could not be imported, or does not export what it must.

    :attr:`code` is the config error code to report (``E_CONFIG_ENTRY_LOAD_FAILED``,
    ``E_CONFIG_HANDLER_MISSING``, ...).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def module_name_for(path: Path) -> str | None:
    """The dotted name of ``path`` if it lies in a package importable from ``sys.path``."""
    return dotted_name(path.resolve())


_loaded: dict[Path, ModuleType] = {}
"""The module each file was loaded as, while it stays in ``sys.modules``: loading a file again
(every agent loads the built-in tools the fork server already loaded) is a lookup."""


def load_entry_module(path: Path) -> ModuleType:
    """Import the module at ``path`` (see the module docstring for how).

    Raises :class:`EntryLoadError` when the file is missing or importing it fails, including a
    module that calls ``sys.exit()`` at import time; only ``KeyboardInterrupt`` passes through.
    """
    path = path.resolve()
    if not path.is_file():
        raise EntryLoadError(f"entry file not found: {path}", code=E_ENTRY_NOT_FOUND)
    module = _loaded.get(path)
    if module is None or sys.modules.get(module.__name__) is not module:
        module = _loaded[path] = _import_file(path)
    return module


def remember_entry_module(module: ModuleType) -> None:
    """Make :func:`load_entry_module` of ``module``'s file return ``module`` (imported by its
    dotted name already), with no further look at the file system."""
    file = getattr(module, "__file__", None)
    if file is not None:
        _loaded[Path(file).resolve()] = module


def _import_file(path: Path) -> ModuleType:
    dotted = dotted_name(path)
    if dotted is not None:
        try:
            module = importlib.import_module(dotted)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise _load_failed(path, exc) from exc
        # A same-named module earlier on sys.path would shadow the file the YAML names.
        if _same_file(getattr(module, "__file__", None), path):
            return module
    return _load_from_path(path)


def _same_file(module_file: str | None, path: Path) -> bool:
    return module_file is not None and Path(module_file).resolve() == path


def _load_from_path(path: Path) -> ModuleType:
    name = SYNTHETIC_PREFIX + hashlib.sha1(str(path).encode()).hexdigest()[:16]
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EntryLoadError(f"cannot import {path}: not a Python module", code=E_ENTRY_LOAD_FAILED)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:
        del sys.modules[name]
        raise _load_failed(path, exc) from exc
    return module


def _load_failed(path: Path, exc: BaseException) -> EntryLoadError:
    return EntryLoadError(
        f"importing {path} raised {type(exc).__name__}: {exc}", code=E_ENTRY_LOAD_FAILED
    )


def _describe(module: ModuleType) -> str:
    """The module's file for messages: synthetic module names mean nothing to a user."""
    return str(getattr(module, "__file__", None) or module.__name__)


def resolve_handlers(
    module: ModuleType, config: Mapping[str, Any]
) -> Mapping[str, Callable[..., Any]]:
    """The module's handlers, by export name.

    With a non-empty ``config`` the module must define ``configure(config)``, which returns the
    handlers; a ``ValueError`` it raises (such as ``tools_base.ToolConfigError``) means the
    config is wrong. Without config, the module-level ``handlers`` mapping is used. Entries that
    are not callable are dropped. Raises :class:`EntryLoadError` with the code to report.
    """
    where = _describe(module)
    if config:
        configure = getattr(module, "configure", None)
        if not callable(configure):
            raise EntryLoadError(
                f"{where} takes no configuration: it defines no configure(config), "
                f"but config was given ({', '.join(sorted(config))})",
                code=E_HANDLER_MISSING,
            )
        try:
            handlers = configure(dict(config))
        except ValueError as exc:
            raise EntryLoadError(f"invalid config: {exc}", code=E_SCHEMA_INVALID) from exc
        except Exception as exc:
            raise EntryLoadError(
                f"configure(config) of {where} raised {type(exc).__name__}: {exc}",
                code=E_ENTRY_LOAD_FAILED,
            ) from exc
        what = "configure(config)"
    else:
        handlers = getattr(module, "handlers", None)
        if handlers is None:
            raise EntryLoadError(f"{where} does not export `handlers`", code=E_HANDLER_MISSING)
        what = "`handlers`"
    if not isinstance(handlers, Mapping):
        raise EntryLoadError(
            f"{what} of {where} must give a dict of export name to function, "
            f"not {type(handlers).__name__}",
            code=E_HANDLER_MISSING,
        )
    return {str(k): v for k, v in handlers.items() if callable(v)}
