"""The core install: what ``pip install goondan-py`` (no extra) brings, read from
``pyproject.toml`` and the installed packages' metadata, and a Python that sees only that.

:func:`core_only_site` writes a ``sitecustomize`` that makes every module of an installed
distribution outside the core fail to import, as on a machine where only the core was
installed: a test (or a benchmark) runs the runtime under it, in a child process, inside the
development environment that has every extra.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OUR_DISTRIBUTION = "goondan-py"


def core_requirements(root: Path = ROOT) -> list[Requirement]:
    """``[project] dependencies`` of ``pyproject.toml`` that apply on this machine."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(spec) for spec in project["dependencies"]]
    return [r for r in wanted if r.marker is None or r.marker.evaluate({"extra": ""})]


def core_closure(requirements: list[Requirement]) -> dict[str, str]:
    """Every distribution ``requirements`` pull in (their own dependencies, no extras), by
    canonical name, with its installed version. Raises ``LookupError`` for one not installed
    or installed at a version the requirement excludes."""
    found: dict[str, str] = {}
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise LookupError(f"core dependency {requirement} is not installed") from None
        if not requirement.specifier.contains(dist.version, prereleases=True):
            raise LookupError(f"{requirement} is installed as {dist.version}")
        found[name] = dist.version
        for spec in dist.requires or []:
            child = Requirement(spec)
            if child.marker is None or child.marker.evaluate({"extra": ""}):
                todo.append(child)
    return dict(sorted(found.items()))


def modules_outside(core: set[str]) -> set[str]:
    """Top-level import names that only distributions outside ``core`` (and ours) provide."""
    allowed = {canonicalize_name(name) for name in core} | {OUR_DISTRIBUTION}
    outside: set[str] = set()
    for module, distributions in metadata.packages_distributions().items():
        if not {canonicalize_name(d) for d in distributions} & allowed:
            outside.add(module)
    return outside


SITECUSTOMIZE = '''\
"""Only the core install: a module of any other installed distribution is not found, as if
it were not installed (an import fails, ``importlib.util.find_spec`` answers None), nor is its
metadata (``importlib.metadata``)."""
import sys
from importlib.machinery import PathFinder

BLOCKED = frozenset({blocked!r})
CORE = frozenset({core!r})


class CoreOnlyPathFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return PathFinder.find_spec(name, path, target)

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        for dist in PathFinder.find_distributions(*args, **kwargs):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-").replace(".", "-")
            if name in CORE:
                yield dist

    @classmethod
    def invalidate_caches(cls):
        PathFinder.invalidate_caches()


sys.meta_path[:] = [CoreOnlyPathFinder if f is PathFinder else f for f in sys.meta_path]
'''


def core_only_site(into: Path, root: Path = ROOT) -> Path:
    """A folder holding a ``sitecustomize.py`` that hides every non-core distribution; put it
    first on ``PYTHONPATH`` (beside the checkout) of a child Python."""
    core = set(core_closure(core_requirements(root)))
    blocked = sorted(modules_outside(core))
    into.mkdir(parents=True, exist_ok=True)
    shown = sorted(core | {OUR_DISTRIBUTION})
    (into / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=blocked, core=shown))
    return into
