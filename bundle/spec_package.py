"""``kind: Package``: a bundle's identity and the packages it depends on."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from bundle.spec_base import Spec


class PackageDependency(Spec):
    """A package this bundle depends on."""

    name: str = Field(min_length=1, description='Package name, e.g. "@goondan/base".')
    version: str = Field(
        min_length=1,
        description="Semantic version range, e.g. ^1.0.0 (npm's syntax, or a PEP 440 specifier).",
    )
    distribution: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
        description="The Python distribution that provides it (default: the name without its "
        '"@" and with "/" as "-": @acme/tools → acme-tools).',
    )


class PackageSpec(Spec):
    """``kind: Package``: the bundle's identity (optional; the first document when present)."""

    version: str | None = Field(default=None, description="Semantic version of this package.")
    description: str | None = Field(default=None, description="What the package is for.")
    access: Literal["public", "restricted"] = Field(default="public", description="Visibility.")
    dependencies: list[PackageDependency] = Field(
        default_factory=list, description="Packages used."
    )
    registry: dict[str, Any] | None = Field(default=None, description="Registry settings.")
