"""Which files a check of handlers would import that are not the runtime's own.

``validate`` imports the entry module of every Tool, Extension and Connector to check it, in a
child process so that a module cannot end or wedge the command. A configuration that names no
module of its own (only the built-in tools, or none) has nothing to fear from that: it is
checked in the calling process and the child's start-up (a second and more of imports) is
saved.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bundle.loader import Resource
from bundle.loading import read_resources
from bundle.packages import BUILTIN_PACKAGES

_ENTRY_KINDS = frozenset({"Tool", "Extension", "Connector"})


def runtime_package_dirs() -> list[Path]:
    """The directories of the packages that ship with the runtime (``tools_base``), found
    without importing them."""
    dirs: list[Path] = []
    for module in BUILTIN_PACKAGES.values():
        spec = importlib.util.find_spec(module)
        locations = spec.submodule_search_locations if spec is not None else None
        dirs.extend(Path(location).resolve() for location in locations or ())
    return dirs


def entry_files(resources: list[Resource]) -> list[Path]:
    """The entry file of each Tool, Extension and Connector of ``resources`` that exists."""
    files: list[Path] = []
    for resource in resources:
        if resource.kind in _ENTRY_KINDS:
            entry = (resource.base_dir / resource.spec.entry).resolve()
            if entry.is_file():
                files.append(entry)
    return files


def user_code(path: Path) -> list[Path]:
    """The entry files that checking the handlers of the configuration at ``path`` would import
    and that lie outside the runtime's own packages. Reads the YAML, imports nothing of it."""
    own = runtime_package_dirs()
    return [
        entry
        for entry in entry_files(read_resources(path).resources)
        if not any(entry.is_relative_to(root) for root in own)
    ]
