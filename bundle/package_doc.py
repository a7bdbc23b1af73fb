"""Reading and editing the Package document of a goondan.yaml (its first document).

Edits are surgical: the YAML is composed (not loaded) so every node knows where it lies in the
text, and only the characters of the value that changes are replaced, or whole lines inserted
after the last one of the list they extend. Comments, order, quoting and blank lines of
everything else stay as the user wrote them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Set
from dataclasses import dataclass
from pathlib import Path

import yaml

from bundle.errors import BundleError, ConfigIssue
from bundle.spec_base import PACKAGE_NAME
from bundle.spec_package import PackageSpec
from goondan.files import write_atomic


class PackageDocumentError(ValueError):
    """The goondan.yaml cannot be edited as asked (its message says why)."""


@dataclass(frozen=True, slots=True)
class PackageDocument:
    """The Package document of a goondan.yaml: its name and spec (``None``: it has none)."""

    path: Path
    name: str | None
    spec: PackageSpec


def read_package(path: Path) -> PackageDocument:
    """The Package document of the goondan.yaml at ``path`` (an empty spec when it has none
    or the file does not exist); :class:`BundleError` if the file or the document is
    invalid."""
    from bundle.loader import load_documents

    if not path.exists():
        return PackageDocument(path, None, PackageSpec())
    resources, issues, failed = load_documents(path, None)
    _refuse_invalid(issues, failed)
    package = next((r for r in resources if r.kind == "Package"), None)
    if package is None:
        return PackageDocument(path, None, PackageSpec())
    return PackageDocument(path, package.name, package.spec)


def _refuse_invalid(issues: list[ConfigIssue], failed: Set[tuple[str | None, str, str]]) -> None:
    """:class:`BundleError` when the file, or its Package document, is invalid (what is wrong
    with the other documents is not the Package reader's to report)."""
    problems = [i for i in issues if i.resource is None or i.resource.startswith("Package/")]
    if problems or any(kind == "Package" for _, kind, _ in failed):
        raise BundleError(problems or issues)


def set_dependency(path: Path, name: str, version: str, distribution: str | None = None) -> None:
    """Record dependency ``name`` at ``version`` (and ``distribution`` when given) in the
    Package document of ``path``: its entry changed in place if there is one, else appended;
    a Package document is added at the top when the file has none (the file created when it
    does not exist)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    newline = "\r\n" if "\r\n" in text else "\n"
    edited = _edited(text.replace("\r\n", "\n"), name, version, distribution, path)
    spec = read_package_text(edited, path)
    entry = next((d for d in spec.dependencies if d.name == name), None)
    if entry is None or entry.version != version:  # pragma: no cover - a bug of the editor
        raise PackageDocumentError(f"editing {path} did not record {name} {version}")
    write_atomic(path, edited.replace("\n", newline).encode())


def read_package_text(text: str, path: Path) -> PackageSpec:
    """The Package spec in ``text`` (the first document), validated."""
    from bundle.loader import validate_resources
    from bundle.source import parse_documents

    documents, issues = parse_documents(text, path)
    resources, doc_issues, _ = validate_resources(documents, None)
    package = next((r for r in resources if r.kind == "Package"), None)
    problems = [*issues, *(i for i in doc_issues if (i.resource or "").startswith("Package/"))]
    if package is None or problems:
        raise PackageDocumentError(
            "the edited file does not validate: " + "; ".join(i.message for i in problems)
        )
    spec: PackageSpec = package.spec
    return spec


def _q(value: str) -> str:
    """A YAML scalar that reads back as ``value`` whatever it holds (``^``, ``>=``, ``@``)."""
    return json.dumps(value, ensure_ascii=False)


def _entry_lines(indent: str, name: str, version: str, distribution: str | None) -> str:
    lines = f"{indent}- name: {_q(name)}\n{indent}  version: {_q(version)}\n"
    if distribution is not None:
        lines += f"{indent}  distribution: {_q(distribution)}\n"
    return lines


def _first_document(text: str) -> yaml.Node | None:
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None and not (
                isinstance(node, yaml.ScalarNode) and node.value.strip() == ""
            ):
                return node
    finally:
        loader.dispose()
    return None


def _get(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for k, v in mapping.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


def _end(node: yaml.Node) -> int:
    """Where ``node``'s own text ends: a block collection ends at its last leaf, not at the
    token that closes it (which may lie past comments that belong to what follows)."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _end(node.value[-1])
    end: int = node.end_mark.index
    return end


def _line_after(text: str, index: int) -> int:
    """The start of the line after the one holding the character before ``index``."""
    if index > 0 and text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def _insert_lines(text: str, node: yaml.Node, lines: str) -> str:
    at = _line_after(text, _end(node))
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    return text[:at] + prefix + lines + text[at:]


def _replace(text: str, node: yaml.Node, value: str) -> str:
    return text[: node.start_mark.index] + value + text[node.end_mark.index :]


def _is_empty(node: yaml.Node) -> bool:
    """``~``, ``null``, nothing, or ``{}``: a value to be replaced by lines below its key."""
    if isinstance(node, yaml.MappingNode):
        return node.flow_style is True and not node.value
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")


def _blank(text: str, node: yaml.Node) -> str:
    """``text`` without ``node``'s characters (``null``, ``{}``), keeping every offset before
    it."""
    return _replace(text, node, "")


def _edited(text: str, name: str, version: str, distribution: str | None, path: Path) -> str:
    try:
        root = _first_document(text)
    except yaml.YAMLError as exc:
        raise PackageDocumentError(f"{path} is not YAML: {exc}") from None
    kind = _get(root, "kind") if isinstance(root, yaml.MappingNode) else None
    if root is None or kind is None or kind[1].value != "Package":
        return _new_document(path, name, version, distribution) + ("---\n" + text if text else "")
    assert isinstance(root, yaml.MappingNode)
    spec = _get(root, "spec")
    if spec is None:
        column = root.value[0][0].start_mark.column
        block = _entry_lines(" " * (column + 4), name, version, distribution)
        return _insert_lines(
            text, root, f"{' ' * column}spec:\n{' ' * (column + 2)}dependencies:\n{block}"
        )
    return _edit_spec(text, *spec, name, version, distribution, path)


def _edit_spec(
    text: str,
    key: yaml.Node,
    value: yaml.Node,
    name: str,
    version: str,
    distribution: str | None,
    path: Path,
) -> str:
    """``text`` with the entry recorded under the ``spec:`` at ``key``."""
    if _is_empty(value):
        column = key.start_mark.column + 2
        block = _entry_lines(" " * (column + 2), name, version, distribution)
        return _insert_lines(_blank(text, value), key, f"{' ' * column}dependencies:\n{block}")
    if not isinstance(value, yaml.MappingNode) or value.flow_style:
        raise PackageDocumentError(
            f"{path}: the Package's spec is not a block mapping; write it as one (spec: then "
            "one field per line) and run the command again"
        )
    dependencies = _get(value, "dependencies")
    if dependencies is None:
        column = value.value[0][0].start_mark.column
        block = _entry_lines(" " * (column + 2), name, version, distribution)
        return _insert_lines(text, value, f"{' ' * column}dependencies:\n{block}")
    return _edit_dependencies(text, *dependencies, name, version, distribution, path)


def _edit_dependencies(
    text: str,
    deps_key: yaml.Node,
    items: yaml.Node,
    name: str,
    version: str,
    distribution: str | None,
    path: Path,
) -> str:
    """``text`` with the entry recorded in the ``dependencies:`` under ``deps_key``."""
    if _is_empty(items) or (isinstance(items, yaml.SequenceNode) and not items.value):
        column = deps_key.start_mark.column + 2
        block = _entry_lines(" " * column, name, version, distribution)
        if _is_empty(items):
            return _insert_lines(_blank(text, items), deps_key, block)
        cut = text[: deps_key.end_mark.index] + ":\n"
        rest = text[_line_after(text, items.end_mark.index) :]
        return cut + block + rest
    if not isinstance(items, yaml.SequenceNode) or items.flow_style:
        raise PackageDocumentError(
            f"{path}: spec.dependencies is not a block list; write it as one (- name: ...) "
            "and run the command again"
        )
    return _edit_list(text, items, name, version, distribution, path)


def _edit_list(
    text: str,
    items: yaml.SequenceNode,
    name: str,
    version: str,
    distribution: str | None,
    path: Path,
) -> str:
    item = next((i for i in items.value if _names(i, name)), None)
    if item is None:
        indent = " " * items.start_mark.column
        return _insert_lines(text, items, _entry_lines(indent, name, version, distribution))
    assert isinstance(item, yaml.MappingNode)
    if item.flow_style:
        fields = {"name": name, "version": version}
        old = _get(item, "distribution")
        if distribution is not None:
            fields["distribution"] = distribution
        elif old is not None:
            fields["distribution"] = str(old[1].value)
        return _replace(text, item, json.dumps(fields, ensure_ascii=False))
    return _edit_block_item(text, item, name, version, distribution, path)


def _names(item: yaml.Node, name: str) -> bool:
    """Whether ``item`` is a mapping whose ``name`` is ``name``."""
    found = _get(item, "name") if isinstance(item, yaml.MappingNode) else None
    return found is not None and found[1].value == name


def _edit_block_item(
    text: str,
    item: yaml.MappingNode,
    name: str,
    version: str,
    distribution: str | None,
    path: Path,
) -> str:
    # replace the later field first, so the earlier one's offsets still hold
    edits: list[tuple[yaml.Node, str]] = []
    old_version = _get(item, "version")
    old_distribution = _get(item, "distribution")
    if distribution is not None and old_distribution is not None:
        edits.append((old_distribution[1], _q(distribution)))
    if old_version is not None:
        edits.append((old_version[1], _q(version)))
    for node, value in sorted(edits, key=lambda e: -e[0].start_mark.index):
        text = _replace(text, node, value)
    extra = []
    column = " " * item.value[0][0].start_mark.column
    if old_version is None:
        extra.append(f"{column}version: {_q(version)}\n")
    if distribution is not None and old_distribution is None:
        extra.append(f"{column}distribution: {_q(distribution)}\n")
    if extra:
        # the item's end moved by the replacements above: compose the result again
        return _set_missing_fields(text, name, "".join(extra), path)
    return text


def _set_missing_fields(text: str, name: str, lines: str, path: Path) -> str:
    root = _first_document(text)
    assert isinstance(root, yaml.MappingNode)
    spec = _get(root, "spec")
    assert spec is not None
    assert isinstance(spec[1], yaml.MappingNode)
    deps = _get(spec[1], "dependencies")
    assert deps is not None
    assert isinstance(deps[1], yaml.SequenceNode)
    for item in deps[1].value:
        found = _get(item, "name") if isinstance(item, yaml.MappingNode) else None
        if found is not None and found[1].value == name:
            return _insert_lines(text, item, lines)
    raise PackageDocumentError(f"{path}: dependency {name} vanished while editing")


def _new_document(path: Path, name: str, version: str, distribution: str | None) -> str:
    package = re.sub(r"[^a-z0-9._-]+", "-", path.resolve().parent.name.lower()).strip("-._")
    if not PACKAGE_NAME.match(package):
        package = "swarm"
    return (
        "apiVersion: goondan.ai/v1\n"
        "kind: Package\n"
        "metadata:\n"
        f"  name: {package}\n"
        "spec:\n"
        "  dependencies:\n" + _entry_lines("    ", name, version, distribution)
    )
