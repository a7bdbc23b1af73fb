"""What every rule of :mod:`bundle.rules` works with: the index of the resources, the issues
collected so far, where files may lie, and refs resolved (and reported when they name nothing)."""

from __future__ import annotations

from pathlib import Path

from bundle import errors as E
from bundle.errors import ConfigIssue
from bundle.loader import FailedKey, Resource, index
from bundle.spec_base import ObjectRef
from bundle.spelling import nearest

FieldPath = tuple[str | int, ...]


class RuleChecker:
    """Holds the index and the collected issues while the rules run."""

    def __init__(
        self,
        resources: list[Resource],
        failed: set[FailedKey],
        check_handlers: bool,
        allow_outside_bundle: bool = False,
    ) -> None:
        self.resources = resources
        self.files = {r.file for r in resources if r.package is None}
        """The bundle's own files (several for a bundle directory)."""
        self.index = index(resources)
        self.failed = failed
        self.check_handlers = check_handlers
        self.allow_outside_bundle = allow_outside_bundle
        self.issues: list[ConfigIssue] = []
        self.missing_packages: set[str] = set()
        """Dependencies reported not installed: refs into them are not reported again."""

    def confined(self, resource: Resource, path: Path, field: FieldPath, what: str) -> bool:
        """Whether ``path`` (resolved) may be used: inside the resource's own directory, or
        anywhere when the operator allowed it; reports it otherwise."""
        root = resource.base_dir.resolve()
        if self.allow_outside_bundle or path.is_relative_to(root):
            return True
        self.report(
            resource,
            E.E_OUTSIDE_BUNDLE,
            f"{what} {path} is outside the bundle directory {root}",
            field,
            suggestion="move it beside goondan.yaml, or run with --allow-outside-bundle "
            "(GOONDAN_ALLOW_OUTSIDE_BUNDLE=1) if that is intended",
        )
        return False

    def report(
        self,
        resource: Resource,
        code: str,
        message: str,
        path: FieldPath,
        suggestion: str | None = None,
    ) -> None:
        self.issues.append(resource.issue(code, message, path, suggestion))

    # -- refs ------------------------------------------------------------------------------

    def resolve(self, ref: ObjectRef, referrer: Resource, path: FieldPath) -> Resource | None:
        """The resource ``ref`` names, looked up in ``ref.package`` or the referrer's package."""
        package = ref.package if ref.package is not None else referrer.package
        target = self.index.get(package, ref.kind, ref.name)
        if (
            target is None
            and (package, ref.kind, ref.name) not in self.failed
            and package not in self.missing_packages
        ):
            elsewhere = self.index.packages_with(ref.kind, ref.name)
            near = nearest(ref.name, self.index.names_of(package, ref.kind))
            if elsewhere:
                hint = (
                    f"it exists in package {elsewhere[0]!r}: write {{kind: {ref.kind}, name: "
                    f'{ref.name}, package: "{elsewhere[0]}"}}'
                )
            elif near is not None:
                hint = f"did you mean {ref.kind}/{near}?"
            else:
                hint = f"declare the {ref.kind} {ref.name!r}, or fix the reference"
            scope = f"package {package!r}" if package else "this bundle"
            self.report(
                referrer, E.E_REF_NOT_FOUND, f"{ref} not found in {scope}", path, suggestion=hint
            )
        return target

    def resolve_kind(
        self, ref: ObjectRef, kind: str, referrer: Resource, path: FieldPath
    ) -> Resource | None:
        """Like :meth:`resolve`, but the ref must name a ``kind``."""
        if ref.kind != kind:
            self.report(
                referrer,
                E.E_SCHEMA_INVALID,
                f"expected a reference to a {kind}, got {ref}",
                path,
                suggestion=f'write "{kind}/<name>"',
            )
            return None
        return self.resolve(ref, referrer, path)


def item_path(resource: Resource, key: str, i: int) -> FieldPath:
    """``spec.<key>[i].ref`` when the item was written as ``{ref: ...}``, else ``spec.<key>[i]``."""
    path: FieldPath = ("spec", key, i)
    return (*path, "ref") if (*path, "ref") in resource.document.lines else path
