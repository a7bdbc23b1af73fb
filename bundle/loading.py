"""Loading a whole bundle: its files and packages read, the rules that span resources checked.

Above :mod:`bundle.loader` (documents to resources), which the rules and the :class:`Bundle`
build on; this module brings them together, so none of them imports it back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bundle import errors as E
from bundle.bundle import Bundle
from bundle.errors import BundleError, ConfigIssue
from bundle.loader import FailedKey, Resource, load_documents, load_package_documents
from bundle.packages import builtin_package_manifests
from bundle.providers import provider_issues
from bundle.rules import check_rules
from bundle.scan import source_files

ALLOW_OUTSIDE_BUNDLE_ENV = "GOONDAN_ALLOW_OUTSIDE_BUNDLE"
"""Set to ``1`` to let entry modules and ``systemRef`` files lie outside the bundle."""


def load_bundle(
    path: str | Path,
    *,
    check_handlers: bool = True,
    packages: Mapping[str, Path] | None = None,
    allow_outside_bundle: bool | None = None,
    check_providers: bool = False,
) -> Bundle:
    """Load and validate ``path`` and the packages it may reference.

    ``path`` may also be a directory: its ``goondan.yaml``, ``models.yaml``, ``model.yaml``,
    ``tools.yaml``, ... (:data:`bundle.scan.BUNDLE_FILE_STEMS`, each also as ``.yml``), there
    and in the directories under it (:func:`bundle.scan.bundle_files`), are read as one bundle,
    one namespace; every error still names its own file. ``packages`` adds (or
    overrides) package manifests by name; the built-in ones (``@goondan/base``) are always
    available. With ``check_handlers`` the entry modules of Tools are imported to check that
    every export has a handler. Entry modules and ``systemRef`` files must lie inside the
    directory of the YAML that declares them unless ``allow_outside_bundle`` (default: the
    ``GOONDAN_ALLOW_OUTSIDE_BUNDLE`` environment variable set to ``1``). With
    ``check_providers`` every Model of the bundle must name a provider an agent can start with
    here, its SDK installed (:func:`bundle.providers.provider_issues`).
    """
    read = read_resources(path, packages)
    resources, issues, failed = read.resources, read.issues, read.failed
    path = read.path
    if allow_outside_bundle is None:
        allow_outside_bundle = os.environ.get(ALLOW_OUTSIDE_BUNDLE_ENV) == "1"
    issues.extend(
        check_rules(
            resources,
            path,
            check_handlers=check_handlers,
            failed=failed,
            allow_outside_bundle=allow_outside_bundle,
        )
    )
    if check_providers:
        issues.extend(provider_issues(resources))
    if issues:
        raise BundleError(issues)
    return Bundle(path=path, resources=resources, files=read.files, directory=read.directory)


@dataclass(slots=True)
class ReadResources:
    """A bundle's files and packages read into resources, before the cross-resource rules."""

    path: Path
    """The bundle's first file (its only one unless it is a directory)."""
    files: list[Path]
    """Every file of the bundle."""
    directory: Path | None
    """The bundle's directory when it was given as one."""
    resources: list[Resource]
    """The resources that validated, the packages' included."""
    issues: list[ConfigIssue]
    """The problems found so far, each naming its file."""
    failed: set[FailedKey]
    """The resources that named themselves but did not validate."""


def read_resources(path: str | Path, packages: Mapping[str, Path] | None = None) -> ReadResources:
    """The documents of ``path`` (a file or a bundle directory, as :func:`load_bundle` takes
    it) and of every available package, read into resources. Imports nothing the bundle names."""
    path = Path(path).absolute()
    files = [path]
    directory = None
    if path.is_dir():
        directory = path
        files = source_files(path)
        path = files[0]
    resources: list[Resource] = []
    issues: list[ConfigIssue] = []
    failed: set[FailedKey] = set()
    for file in files:
        file_resources, file_issues, file_failed = load_documents(file, None)
        if not file_resources and not file_issues and not file_failed:
            what = "the file" if directory is None else str(file.relative_to(directory))
            file_issues.append(
                ConfigIssue(
                    code=E.E_SCHEMA_INVALID,
                    message=f"{what} declares no resources",
                    file=file,
                    line=1,
                    suggestion="add at least a Model, an Agent and a Swarm "
                    "(see goondan.yaml.example)"
                    if len(files) == 1
                    else "add resources to it, or remove it",
                )
            )
        resources.extend(file_resources)
        issues.extend(file_issues)
        failed |= file_failed
    manifests = {**builtin_package_manifests(), **(packages or {})}
    for name, manifest in manifests.items():
        package_resources, package_issues, package_failed = load_package_documents(manifest, name)
        resources.extend(r for r in package_resources if r.kind != "Package")
        issues.extend(package_issues)
        failed |= package_failed
    return ReadResources(path, files, directory, resources, issues, failed)
