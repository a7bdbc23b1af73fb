"""From goondan.yaml to validated resources, in three layers.

:func:`bundle.loading.load_bundle` reads the file; :func:`bundle.source.parse_documents` splits it into
documents with line maps; :func:`validate_resources` validates each document's envelope and
spec, then :func:`bundle.rules.check_rules` applies the rules that span resources (names, refs,
entries, handlers) once the packages' resources are in. Every problem is collected; if any, one
:class:`~bundle.errors.BundleError` carries them all.
"""

from __future__ import annotations

import contextlib
import copy
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bundle import errors as E
from bundle.errors import ConfigIssue
from bundle.field_hints import field_suggestion
from bundle.source import Document, FieldPath, format_path, parse_documents, read_file
from bundle.spec_base import (
    API_VERSION,
    MAX_RESOURCE_NAME_LENGTH,
    MAX_TOOL_NAME_LENGTH,
    PACKAGE_NAME,
    RESOURCE_NAME,
    TOOL_NAME,
    Metadata,
)
from bundle.spec_kinds import KINDS, SPEC_MODELS


@dataclass(frozen=True, slots=True)
class Resource:
    """A validated resource and where it came from."""

    kind: str
    name: str
    package: str | None
    """The declaring package: ``None`` for the bundle itself, e.g. ``@goondan/base`` otherwise."""
    metadata: Metadata
    spec: Any
    """The kind's spec model (``ToolSpec``, ``AgentSpec``, ...)."""
    file: Path
    line: int
    document: Document

    @property
    def ref_string(self) -> str:
        """``Kind/name``."""
        return f"{self.kind}/{self.name}"

    @property
    def base_dir(self) -> Path:
        """The directory relative paths in this resource (entry, systemRef) start from."""
        return self.file.parent

    def line_of(self, *path: str | int) -> int:
        """Line of a field of this resource."""
        return self.document.line_of(path)

    def issue(
        self, code: str, message: str, path: FieldPath, suggestion: str | None = None
    ) -> ConfigIssue:
        """An issue about the field at ``path`` of this resource (file, line, resource, field)."""
        return ConfigIssue(
            code=code,
            message=message,
            file=self.file,
            line=self.line_of(*path),
            resource=self.ref_string,
            field=format_path(path) or None,
            suggestion=suggestion,
        )


FailedKey = tuple[str | None, str, str]
"""(package, kind, name) of a document that named itself but did not validate."""


def validate_resources(
    documents: Iterable[Document], package: str | None = None
) -> tuple[list[Resource], list[ConfigIssue], set[FailedKey]]:
    """Validate each document's envelope and spec; cross-resource rules are separate.

    Also returns the keys of resources that failed, so refs to them are not reported again
    as "not found".
    """
    resources: list[Resource] = []
    issues: list[ConfigIssue] = []
    failed: set[FailedKey] = set()
    for doc in documents:
        resource, doc_issues = _validate_document(doc, package)
        issues.extend(doc_issues)
        if resource is not None:
            resources.append(resource)
        elif isinstance(doc.data, dict):
            kind, metadata = doc.data.get("kind"), doc.data.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            if isinstance(kind, str) and isinstance(name, str):
                failed.add((package, kind, name))
                issues.extend(_entry_issues(doc, kind, name))
    return resources, issues, failed


def _entry_issues(doc: Document, kind: str, name: str) -> list[ConfigIssue]:
    """A missing entry file is worth reporting even when the rest of the spec is invalid."""
    spec = doc.data.get("spec")
    entry = spec.get("entry") if isinstance(spec, dict) else None
    if kind not in ("Tool", "Extension", "Connector") or not isinstance(entry, str):
        return []
    path = (doc.file.parent / entry).resolve()
    if path.is_file():
        return []
    return [
        ConfigIssue(
            code=E.E_ENTRY_NOT_FOUND,
            message=f"entry file {entry!r} not found (looked at {path})",
            file=doc.file,
            line=doc.line_of(("spec", "entry")),
            resource=f"{kind}/{name}",
            field="spec.entry",
            suggestion="the path is relative to the YAML file that declares the resource",
        )
    ]


@dataclass(slots=True)
class _DocumentIssues:
    """The issues found in one document, each placed at its file, line, resource and field."""

    doc: Document
    label: str | None
    found: list[ConfigIssue]

    def add(self, code: str, message: str, path: FieldPath, suggestion: str | None = None) -> None:
        self.found.append(
            ConfigIssue(
                code=code,
                message=message,
                file=self.doc.file,
                line=self.doc.line_of(path),
                resource=self.label,
                field=format_path(path) or None,
                suggestion=suggestion,
            )
        )

    def add_pydantic(self, exc: ValidationError, prefix: FieldPath) -> None:
        self.found.extend(_pydantic_issues(exc, self.doc, self.label, prefix))


def _validate_document(
    doc: Document, package: str | None
) -> tuple[Resource | None, list[ConfigIssue]]:
    data = doc.data
    if not isinstance(data, dict):
        return None, [_not_a_mapping(doc, data)]
    kind = data.get("kind")
    metadata_raw = data.get("metadata")
    name = metadata_raw.get("name") if isinstance(metadata_raw, dict) else None
    label = f"{kind}/{name}" if isinstance(kind, str) and isinstance(name, str) else None
    issues = _DocumentIssues(doc, label, [])
    _check_envelope(data, kind, issues)
    metadata = _validated_metadata(metadata_raw, kind, issues)
    spec = _validated_spec(data, kind, issues)
    if issues.found or metadata is None or spec is None or not isinstance(kind, str):
        return None, issues.found
    return Resource(
        kind=kind,
        name=metadata.name,
        package=package,
        metadata=metadata,
        spec=spec,
        file=doc.file,
        line=doc.line,
        document=doc,
    ), []


def _not_a_mapping(doc: Document, data: object) -> ConfigIssue:
    return ConfigIssue(
        code=E.E_SCHEMA_INVALID,
        message=f"document {doc.index + 1} is a {type(data).__name__}, not a mapping "
        "with apiVersion, kind, metadata and spec",
        suggestion="each document must be one resource: apiVersion, kind, metadata, spec",
        file=doc.file,
        line=doc.line,
    )


def _check_envelope(data: Mapping[str, Any], kind: object, issues: _DocumentIssues) -> None:
    """``apiVersion``, ``kind`` and no top-level field besides those, metadata and spec."""
    api_version = data.get("apiVersion")
    if api_version != API_VERSION:
        issues.add(
            E.E_UNSUPPORTED_API_VERSION,
            "apiVersion is missing"
            if api_version is None
            else f"apiVersion is {api_version!r}; expected {API_VERSION!r}",
            ("apiVersion",),
            f"set `apiVersion: {API_VERSION}`",
        )
    if not isinstance(kind, str) or kind not in KINDS:
        issues.add(
            E.E_UNKNOWN_KIND,
            f"unknown kind {kind!r}",
            ("kind",),
            f"use one of: {', '.join(KINDS)}",
        )
    unknown = sorted(set(data) - {"apiVersion", "kind", "metadata", "spec"})
    for key in unknown:
        issues.add(E.E_SCHEMA_INVALID, f"unknown top-level field {key!r}", (key,), "remove it")


def _validated_metadata(
    metadata_raw: object, kind: object, issues: _DocumentIssues
) -> Metadata | None:
    try:
        metadata = Metadata.model_validate(metadata_raw if metadata_raw is not None else {})
    except ValidationError as exc:
        issues.add_pydantic(exc, ("metadata",))
        return None
    if isinstance(kind, str):
        _check_name(metadata.name, kind, issues)
    return metadata


def _check_name(name: str, kind: str, issues: _DocumentIssues) -> None:
    """``metadata.name`` of a ``kind``: not blank, no ``__``, not too long, the kind's pattern."""
    path = ("metadata", "name")
    if not name.strip():
        issues.add(E.E_INVALID_NAME, "metadata.name must not be blank", path)
    elif "__" in name:
        issues.add(
            E.E_SCHEMA_INVALID if kind == "Tool" else E.E_INVALID_NAME,
            f"name {name!r} must not contain '__' (it separates tool and export names)",
            path,
            "use a single '_' or '-'",
        )
    elif kind != "Package" and len(name) > MAX_RESOURCE_NAME_LENGTH:
        issues.add(
            E.E_INVALID_NAME,
            f"name of {len(name)} characters; the limit is "
            f"{MAX_RESOURCE_NAME_LENGTH} (it names directories and processes)",
            path,
            "use a shorter name",
        )
    elif not _name_pattern(kind).match(name):
        allowed = (
            "lowercase letters, digits, '-' and '_'"
            if kind == "Tool"
            else "lowercase letters, digits, '-', '_' and '.'"
        )
        issues.add(
            E.E_INVALID_NAME,
            f"name {name!r} is not valid for a {kind}",
            path,
            f"use {allowed}, starting and ending with a letter or digit",
        )


def _name_pattern(kind: str) -> re.Pattern[str]:
    return PACKAGE_NAME if kind == "Package" else TOOL_NAME if kind == "Tool" else RESOURCE_NAME


def _validated_spec(
    data: Mapping[str, Any], kind: object, issues: _DocumentIssues
) -> BaseModel | None:
    """The kind's spec model, or ``None`` (with an issue) when there is none or it is invalid."""
    if not isinstance(kind, str) or kind not in SPEC_MODELS:
        return None
    raw_spec = data.get("spec")
    if raw_spec is None and kind != "Package":
        issues.add(E.E_SCHEMA_INVALID, f"a {kind} needs a `spec`", ("spec",))
        return None
    try:
        return SPEC_MODELS[kind].model_validate(raw_spec if raw_spec is not None else {})
    except ValidationError as exc:
        issues.add_pydantic(exc, ("spec",))
        return None


def _pydantic_issues(
    exc: ValidationError, doc: Document, label: str | None, prefix: FieldPath
) -> list[ConfigIssue]:
    out = []
    for error in exc.errors():
        loc: FieldPath = (*prefix, *(p for p in error["loc"] if not _is_union_tag(p)))
        kind = error["type"]
        code = E.E_INVALID_REF if kind == "invalid_ref" else E.E_SCHEMA_INVALID
        message = error["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            message = f"unknown field {loc[-1]!r}"
        elif kind == "missing":
            message = f"required field {loc[-1]!r} is missing"
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            message = f"expected a mapping (key: value), got {_yaml_type(error.get('input'))}"
        elif kind == "list_type":
            message = f"expected a list, got {_yaml_type(error.get('input'))}"
        out.append(
            ConfigIssue(
                code=code,
                message=message,
                file=doc.file,
                line=doc.line_of(loc),
                resource=label,
                field=format_path(loc),
                suggestion=(
                    field_suggestion(_kind_of(doc), loc) if kind == "extra_forbidden" else None
                )
                or _suggestion_for(kind, loc),
            )
        )
    return out


def _kind_of(doc: Document) -> object:
    return doc.data.get("kind") if isinstance(doc.data, dict) else None


def _yaml_type(value: Any) -> str:
    """How a YAML user would name the type of ``value``."""
    if value is None:
        return "nothing (null)"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}
    for python_type, name in names.items():
        if isinstance(value, python_type):
            return f"{name} {value!r}" if python_type in (str, bool) else name
    return f"a number {value!r}" if isinstance(value, int | float) else type(value).__name__


def _is_union_tag(segment: Any) -> bool:
    # pydantic puts the union member it tried into the loc ("str", "function-before[...]")
    return isinstance(segment, str) and (
        "[" in segment or segment in ("str", "int", "float", "bool")
    )


def _suggestion_for(error_type: str, loc: FieldPath) -> str | None:
    if error_type == "extra_forbidden":
        return "remove it, or check its spelling (field names are camelCase)"
    if error_type == "invalid_ref":
        return 'write "Kind/name" or {kind: ..., name: ..., package: ...}'
    if error_type == "legacy_tool":
        return "declare `exports: [{name, description, parameters}]` and a `handlers` dict"
    if error_type == "missing":
        return f"add `{loc[-1]}`"
    return None


class _Index:
    """(package, kind, name) → Resource."""

    def __init__(self, resources: Iterable[Resource]) -> None:
        self.by_key: dict[tuple[str | None, str, str], Resource] = {}
        for resource in resources:
            self.by_key.setdefault((resource.package, resource.kind, resource.name), resource)

    def get(self, package: str | None, kind: str, name: str) -> Resource | None:
        return self.by_key.get((package, kind, name))

    def packages_with(self, kind: str, name: str) -> list[str]:
        return sorted(p for (p, k, n) in self.by_key if k == kind and n == name and p is not None)


def load_documents(
    path: Path, package: str | None
) -> tuple[list[Resource], list[ConfigIssue], set[FailedKey]]:
    """Read, parse and validate one file's documents (no cross-resource rules)."""
    text, issues = read_file(path)
    if text is None:
        return [], issues, set()
    documents, parse_issues = parse_documents(text, path)
    resources, doc_issues, failed = validate_resources(documents, package)
    return resources, [*parse_issues, *doc_issues], failed


_Loaded = tuple[list[Resource], list[ConfigIssue], set[FailedKey]]
_package_cache: dict[tuple[Path, str], tuple[bytes, _Loaded]] = {}
_package_cache_lock = threading.Lock()


def load_package_documents(manifest: Path, package: str) -> _Loaded:
    """:func:`load_documents` of a package manifest, parsed once per process.

    Every :func:`load_bundle` reads the packages' manifests (``@goondan/base`` is ~25 KB of
    YAML, most of the cost of loading a small bundle). The result is kept per (path, package)
    and reused while the file holds the same bytes (compared in full: a timestamp can miss a
    rewrite within its granularity); each caller gets its own deep copy, so no two bundles
    share an object.
    """
    try:
        content = manifest.read_bytes()
    except OSError:
        return load_documents(manifest, package)  # the load reports it
    key = (manifest, package)
    with _package_cache_lock:
        cached = _package_cache.get(key)
    if cached is None or cached[0] != content:
        loaded = load_documents(manifest, package)
        with contextlib.suppress(OSError):
            if manifest.read_bytes() == content:  # not rewritten while it was parsed
                with _package_cache_lock:
                    _package_cache[key] = (content, loaded)
        return copy.deepcopy(loaded)
    return copy.deepcopy(cached[1])


def index(resources: Iterable[Resource]) -> _Index:
    """An index of ``resources`` by (package, kind, name)."""
    return _Index(resources)


def tool_name_too_long(tool: str, export: str) -> bool:
    """Whether ``tool__export`` is longer than providers accept."""
    return len(tool) + 2 + len(export) > MAX_TOOL_NAME_LENGTH
