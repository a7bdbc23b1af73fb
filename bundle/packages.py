"""Goondan packages: Python distributions that expose a ``goondan.packages`` entry point.

An entry point maps a package name (``@acme/tools``) to the module whose directory holds the
package's ``goondan.yaml``. Every installed one is available to a bundle, read without being
imported. A bundle declares what it needs in its Package document's ``spec.dependencies``
(``{name, version, distribution?}``); :func:`dependency_problem` says why one is not usable.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from bundle.ranges import pep440_specifier
from bundle.spec_package import PackageDependency

ENTRY_POINT_GROUP = "goondan.packages"
BUILTIN_PACKAGES = {"@goondan/base": "tools_base"}
"""Fallback when the distribution's entry points are not installed (a source checkout)."""
MANIFEST = "goondan.yaml"
INSTALL_HINT = "run `goondan package install`"


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


def canonicalize_name(name: str) -> str:
    """PEP 503's normal form of a distribution name (``Acme_Tools`` → ``acme-tools``);
    ``packaging.utils``'s, without the ~15 ms its import costs every bundle load."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_name(package: str) -> str:
    """The distribution that provides ``package`` unless a dependency names one: the name
    without its ``@``, ``/`` as ``-``, normalised as PEP 503 does (``@acme/tools`` →
    ``acme-tools``, ``Acme_Tools`` → ``acme-tools``)."""
    return canonicalize_name(re.sub(r"^@", "", package).replace("/", "-"))


@dataclass(frozen=True, slots=True)
class Dependency:
    """One entry of ``spec.dependencies``, with its distribution and PEP 440 specifier."""

    name: str
    """The Goondan package name, e.g. ``@acme/tools``."""
    range: str
    """The range as written, e.g. ``^1.0.0``."""
    distribution: str
    """The normalised distribution name, e.g. ``acme-tools``."""
    specifier: str
    """The range as PEP 440, e.g. ``>=1.0.0,<2`` (``""``: any version)."""

    @classmethod
    def of(cls, declared: PackageDependency) -> Dependency:
        """The dependency ``declared`` (:class:`bundle.ranges.RangeError` if its range has no
        PEP 440 form)."""
        return cls(
            name=declared.name,
            range=declared.version,
            distribution=canonicalize_name(
                declared.distribution or distribution_name(declared.name)
            ),
            specifier=pep440_specifier(declared.version),
        )

    @property
    def builtin(self) -> bool:
        """Whether goondan-py itself provides it (``@goondan/base``): nothing to install."""
        return self.name in BUILTIN_PACKAGES

    @property
    def requirement(self) -> str:
        """The pip requirement, e.g. ``acme-tools>=1.0.0,<2``."""
        return f"{self.distribution}{self.specifier}"

    def allows(self, version: str) -> bool:
        """Whether ``version`` is within the range (a pre-release only if the range names one:
        PEP 440's rule, close to npm's)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        specifier = SpecifierSet(self.specifier)
        return specifier.contains(parsed, prereleases=parsed.is_prerelease or None)


def dependency_problem(dependency: Dependency) -> str | None:
    """Why ``dependency`` is not usable in this interpreter: its distribution missing, of a
    version outside the range, or without the package's entry point; ``None`` if it is."""
    if dependency.builtin:
        return None
    try:
        found = importlib.metadata.distribution(dependency.distribution)
    except importlib.metadata.PackageNotFoundError:
        return (
            f"package {dependency.name!r} {dependency.range} is not installed "
            f"(distribution {dependency.distribution})"
        )
    if not dependency.allows(found.version):
        return (
            f"package {dependency.name!r}: {dependency.distribution} {found.version} is "
            f"installed, outside {dependency.range}"
        )
    names = sorted(e.name for e in found.entry_points if e.group == ENTRY_POINT_GROUP)
    if dependency.name not in names:
        provides = ", ".join(repr(name) for name in names) or "none"
        return (
            f"package {dependency.name!r}: {dependency.distribution} {found.version} is "
            f"installed but provides no such Goondan package (its {ENTRY_POINT_GROUP} entry "
            f"points: {provides})"
        )
    return None
