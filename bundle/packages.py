"""Packages that are always available: found by entry point, read without importing them."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

ENTRY_POINT_GROUP = "goondan.packages"
BUILTIN_PACKAGES = {"@goondan/base": "tools_base"}
"""Fallback when the distribution's entry points are not installed (a source checkout)."""
MANIFEST = "goondan.yaml"


def builtin_package_manifests() -> dict[str, Path]:
    """Package name → path of its ``goondan.yaml``, for every installed Goondan package."""
    modules = dict(BUILTIN_PACKAGES)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        modules[entry.name] = entry.value
    manifests: dict[str, Path] = {}
    for package, module in modules.items():
        spec = importlib.util.find_spec(module)
        locations = spec.submodule_search_locations if spec is not None else None
        for location in locations or ():
            manifest = Path(location) / MANIFEST
            if manifest.is_file():
                manifests[package] = manifest
                break
    return manifests
