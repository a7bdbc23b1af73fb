"""``validate --fix``: repair in place what needs no judgement, and say what was changed.

Three repairs: a resource name invalid only by its case is lower-cased (with the refs to it in
every file of the bundle), a document with a ``kind`` but no ``apiVersion`` gets
``apiVersion: goondan.ai/v1``, and trailing whitespace is removed (except inside block scalars,
where it is content). The YAML text is edited at the characters concerned, so comments, order,
quoting and layout stay as they were. A rewrite is kept only when the rewritten file parses to
exactly the data the repairs intend; otherwise, or when a file does not parse, the file is left
untouched and the reason reported.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bundle import errors as E
from bundle.scan import source_files
from bundle.source import parse_documents, read_file
from bundle.spec_base import (
    API_VERSION,
    MAX_RESOURCE_NAME_LENGTH,
    PACKAGE_NAME,
    RESOURCE_NAME,
    TOOL_NAME,
)
from bundle.spec_kinds import KINDS

_UNPARSABLE = {E.E_PARSE_ERROR, E.E_TOO_MANY_DOCUMENTS, E.E_FILE_TOO_LARGE}
_STR = "tag:yaml.org,2002:str"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True, slots=True)
class Change:
    """One repair: where (the line before the rewrite) and what."""

    file: Path
    line: int
    what: str

    def format(self) -> str:
        """``agents.yaml:3: <what>``."""
        return f"{_shown(self.file)}:{self.line}: {self.what}"

    def to_json(self) -> dict[str, Any]:
        """``{file, line, change}``."""
        return {"file": str(self.file), "line": self.line, "change": self.what}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A file left untouched, and why."""

    file: Path
    reason: str

    def format(self) -> str:
        """``goondan.yaml: not fixed: <reason>``."""
        return f"{_shown(self.file)}: not fixed: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """``{file, reason}``."""
        return {"file": str(self.file), "reason": self.reason}


@dataclass
class FixReport:
    """Every change written, and every file that could not be fixed."""

    changes: list[Change] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class _Source:
    file: Path
    raw: bytes
    text: str
    """Without a BOM, newlines as ``\\n``."""
    roots: list[yaml.Node]
    data: list[Any]


@dataclass(frozen=True, slots=True)
class _Rename:
    kind: str
    old: str
    new: str
    file: Path


_Edit = tuple[int, int, str]
"""(start, end, replacement): characters ``text[start:end]`` become the replacement."""


def fix_bundle(path: Path) -> FixReport:
    """Repair the files :func:`bundle.loading.load_bundle` reads for ``path``, in place."""
    report = FixReport()
    sources: list[_Source] = []
    for file in source_files(path):
        source = _read(file)
        if isinstance(source, Refusal):
            report.refused.append(source)
        else:
            sources.append(source)
    renames = _renames(sources)
    if renames and report.refused:
        # A rename rewrites the refs to the resource in every file; one that cannot be read
        # might hold refs that would be left pointing at the old name.
        report.refused.append(
            Refusal(
                report.refused[0].file,
                "names are not lower-cased while a file of the bundle cannot be read",
            )
        )
        renames = []
    rewrites = _settled_rewrites(sources, renames)
    for source in sources:
        _write_one(source, rewrites[source.file], report)
    return report


def _settled_rewrites(
    sources: list[_Source], renames: list[_Rename]
) -> dict[Path, tuple[str, list[Change]] | Refusal]:
    """Each file's rewrite, once no rename is left whose file cannot be rewritten."""
    while True:
        rewrites = {s.file: _rewrite(s, renames) for s in sources}
        failed = {file for file, done in rewrites.items() if isinstance(done, Refusal)}
        kept = [r for r in renames if r.file not in failed]
        if len(kept) == len(renames):
            return rewrites
        renames = kept  # a file that cannot be rewritten keeps its names, so do their refs


def _write_one(
    source: _Source, done: tuple[str, list[Change]] | Refusal, report: FixReport
) -> None:
    if isinstance(done, Refusal):
        report.refused.append(done)
        return
    text, changes = done
    if not changes:
        return
    refusal = _write(source, text)
    if refusal is not None:
        report.refused.append(refusal)
    else:
        report.changes.extend(changes)


def _read(file: Path) -> _Source | Refusal:
    text, issues = read_file(file)
    if text is None:
        return Refusal(file, issues[0].message if issues else "cannot read it")
    return _parsed(file, text)


def _parsed(file: Path, text: str) -> _Source | Refusal:
    """The file's documents, as data and as nodes, when the two can be told apart."""
    documents, issues = parse_documents(text, file)
    unparsable = next((i for i in issues if i.code in _UNPARSABLE), None)
    if unparsable is not None:
        where = f" (line {unparsable.line})" if unparsable.line else ""
        return Refusal(file, f"cannot parse it: {unparsable.message}{where}")
    try:
        roots = [r for r in yaml.compose_all(text, Loader=yaml.SafeLoader) if not _blank(r)]
        raw = file.read_bytes()
    except (yaml.YAMLError, RecursionError, OSError) as exc:
        return Refusal(file, f"cannot parse it: {exc}")
    if len(roots) != len(documents):
        return Refusal(file, "cannot parse it: its documents cannot be told apart")
    return _Source(file, raw, text, roots, [d.data for d in documents])


def _blank(node: yaml.Node | None) -> bool:
    return node is None or (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:null"
        and node.value == ""
    )


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                found: yaml.Node = value
                return found
    return None


def _case_fix(kind: str, name: str) -> str | None:
    """The lower-cased name when only its case makes ``name`` invalid for a ``kind``."""
    pattern = PACKAGE_NAME if kind == "Package" else TOOL_NAME if kind == "Tool" else RESOURCE_NAME
    lowered = name.lower()
    if lowered == name or pattern.match(name) or not pattern.match(lowered) or "__" in name:
        return None
    if kind != "Package" and len(name) > MAX_RESOURCE_NAME_LENGTH:
        return None
    return lowered


def _identity(data: Any) -> tuple[str, str] | None:
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    kind, name = data.get("kind"), data["metadata"].get("name")
    if isinstance(kind, str) and kind in KINDS and isinstance(name, str):
        return kind, name
    return None


def _renames(sources: list[_Source]) -> list[_Rename]:
    names = {ident for s in sources for d in s.data if (ident := _identity(d)) is not None}
    found = [r for s in sources for d in s.data if (r := _rename_of(d, s.file)) is not None]
    # Lower-casing onto a name already taken, or two names onto one, would only trade one
    # error for another.
    return [r for r in found if (r.kind, r.new) not in names and _alone(r, found)]


def _alone(rename: _Rename, found: list[_Rename]) -> bool:
    """Whether no other name is lower-cased onto ``rename``'s new one."""
    target = (rename.kind, rename.new)
    return len({o.old for o in found if (o.kind, o.new) == target}) == 1


def _rename_of(data: Any, file: Path) -> _Rename | None:
    ident = _identity(data)
    new = _case_fix(*ident) if ident is not None else None
    if ident is None or new is None:
        return None
    return _Rename(ident[0], ident[1], new, file)


def _rewrite(source: _Source, renames: list[_Rename]) -> tuple[str, list[Change]] | Refusal:
    """The repaired text and its changes, or why the file is left alone."""
    by_key = {(r.kind, r.old): r.new for r in renames}
    edits: list[_Edit] = []
    changes: list[Change] = []
    expected = copy.deepcopy(source.data)
    for root, data in zip(source.roots, expected, strict=True):
        renamed = _rename_resource(source, root, data, by_key, edits)
        if isinstance(renamed, Refusal):
            return renamed
        changes += renamed
        changes += _rename_refs(source, root, data, by_key, edits)
        change = _add_api_version(source, root, data, edits)
        if change is not None:
            changes.append(change)
    changes.extend(_strip_trailing(source, edits))
    return _checked(source, _apply(source.text, edits), expected, changes)


def _rename_resource(
    source: _Source,
    root: yaml.Node,
    data: Any,
    by_key: dict[tuple[str, str], str],
    edits: list[_Edit],
) -> list[Change] | Refusal:
    """Lower-case the document's own name, if it is renamed."""
    ident = _identity(data)
    if ident is None or ident not in by_key:
        return []
    metadata = _child(root, "metadata")
    name_node = _child(metadata, "name") if metadata is not None else None
    new = by_key[ident]
    if not isinstance(name_node, yaml.ScalarNode) or not _replace(
        source.text, name_node, new, edits
    ):
        return Refusal(source.file, f"the name {ident[1]!r} is not written plainly")
    data["metadata"]["name"] = new
    line = name_node.start_mark.line + 1
    what = f"{ident[0]} name {ident[1]!r} → {new!r} (names are lower-case)"
    return [Change(source.file, line, what)]


def _rename_refs(
    source: _Source,
    root: yaml.Node,
    data: Any,
    by_key: dict[tuple[str, str], str],
    edits: list[_Edit],
) -> list[Change]:
    """Point the refs of the document's spec at the renamed resources."""
    spec = _child(root, "spec")
    if spec is None or not isinstance(data, dict) or not by_key:
        return []
    changes = [
        Change(source.file, node.start_mark.line + 1, f"ref {old} → {new}")
        for node, old, new, value in _refs(spec, by_key)
        if _replace(source.text, node, value, edits)
    ]
    data["spec"] = _renamed_refs(data.get("spec"), by_key)
    return changes


def _checked(
    source: _Source, new_text: str | None, expected: list[Any], changes: list[Change]
) -> tuple[str, list[Change]] | Refusal:
    """The rewrite, when it parses to exactly what was intended."""
    if new_text is None:
        return Refusal(source.file, "two repairs would overlap; fix it by hand")
    if new_text == source.text:
        return source.text, []
    documents, issues = parse_documents(new_text, source.file)
    if any(i.code in _UNPARSABLE for i in issues) or [d.data for d in documents] != expected:
        return Refusal(
            source.file,
            "a repair would change more than intended (an alias, an escape or an unusual "
            "layout is in the way); fix it by hand",
        )
    return new_text, sorted(changes, key=lambda c: c.line)


def _replace(text: str, node: yaml.ScalarNode, new: str, edits: list[_Edit]) -> bool:
    """Edit the scalar ``node`` to ``new`` in its own quoting; ``False`` when its text is not
    simply its value (escapes, a multi-line scalar)."""
    start, end = node.start_mark.index, node.end_mark.index
    quote = node.style if node.style in ("'", '"') else ""
    if text[start:end] != f"{quote}{node.value}{quote}":
        return False
    edits.append((start, end, f"{quote}{new}{quote}"))
    return True


def _refs(
    node: yaml.Node, renames: dict[tuple[str, str], str]
) -> Iterator[tuple[Any, str, str, str]]:
    """``(scalar node, old ref, new ref, the scalar's new value)`` for each ref to a renamed
    resource under ``node``: ``"Kind/name"`` strings, and ``{kind, name}`` mappings that name
    no package."""
    seen: set[int] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        if id(current) in seen:  # an alias: its anchor is edited once
            continue
        seen.add(id(current))
        if isinstance(current, yaml.ScalarNode) and current.tag == _STR:
            new = _renamed_refs(current.value, renames)
            if new != current.value:
                yield current, current.value, new, new
        elif isinstance(current, yaml.MappingNode):
            found = _mapping_ref(current, renames)
            if found is not None:
                yield found
                seen.add(id(found[0]))
            pending.extend(value for _, value in reversed(current.value))
        elif isinstance(current, yaml.SequenceNode):
            pending.extend(reversed(current.value))


def _mapping_ref(
    node: yaml.MappingNode, renames: dict[tuple[str, str], str]
) -> tuple[Any, str, str, str] | None:
    """A ``{kind, name}`` ref (no package) to a renamed resource, as :func:`_refs` gives it."""
    kind_node, name_node = _child(node, "kind"), _child(node, "name")
    if not (
        isinstance(kind_node, yaml.ScalarNode)
        and isinstance(name_node, yaml.ScalarNode)
        and _child(node, "package") is None
        and (kind_node.value, name_node.value) in renames
    ):
        return None
    kind, name = kind_node.value, name_node.value
    return name_node, f"{kind}/{name}", f"{kind}/{renames[kind, name]}", renames[kind, name]


def _renamed_refs(data: Any, renames: dict[tuple[str, str], str]) -> Any:
    """``data`` as :func:`_refs` rewrites it (what the rewritten file must parse to)."""
    if isinstance(data, str):
        kind, slash, name = data.partition("/")
        return f"{kind}/{renames[kind, name]}" if slash and (kind, name) in renames else data
    if isinstance(data, list):
        return [_renamed_refs(item, renames) for item in data]
    if isinstance(data, dict):
        return _renamed_mapping(data, renames)
    return data


def _renamed_mapping(data: dict[str, Any], renames: dict[tuple[str, str], str]) -> Any:
    out = {key: _renamed_refs(value, renames) for key, value in data.items()}
    ref_kind, ref_name = data.get("kind"), data.get("name")
    if "package" not in data and isinstance(ref_kind, str) and isinstance(ref_name, str):
        out["name"] = renames.get((ref_kind, ref_name), out["name"])
    return out


def _add_api_version(
    source: _Source, root: yaml.Node, data: Any, edits: list[_Edit]
) -> Change | None:
    """Insert ``apiVersion`` above the first key of a block mapping that has a ``kind``."""
    if (
        not isinstance(root, yaml.MappingNode)
        or root.flow_style
        or not root.value
        or not isinstance(data, dict)
        or "apiVersion" in data
        or "kind" not in data
    ):
        return None
    first = root.value[0][0].start_mark
    line_start = source.text.rfind("\n", 0, first.index) + 1
    indent = source.text[line_start : first.index]
    if indent.strip():  # `--- kind: ...`: no line of its own to put it above
        return None
    edits.append((line_start, line_start, f"{indent}apiVersion: {API_VERSION}\n"))
    data["apiVersion"] = API_VERSION
    what = f"added `apiVersion: {API_VERSION}`"
    ident = _identity(data)
    return Change(
        source.file, first.line + 1, what + (f" ({ident[0]}/{ident[1]})" if ident else "")
    )


def _protected_lines(roots: list[yaml.Node]) -> set[int]:
    """0-based lines whose trailing whitespace may be content: inside block scalars, and
    inside multi-line quoted scalars (where an escaped space may end a line)."""
    lines: set[int] = set()
    pending = list(roots)
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            lines.update(_scalar_lines(node))
        elif isinstance(node, yaml.MappingNode):
            pending.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
    return lines


def _scalar_lines(node: yaml.ScalarNode) -> range:
    """The lines of a block scalar's body, or of a multi-line quoted scalar but its last."""
    start, end = node.start_mark, node.end_mark
    if node.style in ("|", ">"):
        last = end.line if end.column else end.line - 1
        return range(start.line + 1, last + 1)
    if node.style in ("'", '"') and end.line > start.line:
        return range(start.line, end.line)
    return range(0)


def _strip_trailing(source: _Source, edits: list[_Edit]) -> list[Change]:
    protected = _protected_lines(source.roots)
    changes = []
    offset = 0
    for number, line in enumerate(source.text.split("\n")):
        stripped = line.rstrip(" \t")
        if stripped != line and number not in protected:
            start = offset + len(stripped)
            edits.append((start, offset + len(line), ""))
            changes.append(Change(source.file, number + 1, "removed trailing whitespace"))
        offset += len(line) + 1
    return changes


def _apply(text: str, edits: list[_Edit]) -> str | None:
    """``text`` with ``edits`` made, or ``None`` when two of them touch the same characters."""
    ordered = sorted(edits)
    for (start, end, _), (after, _, _) in itertools.pairwise(ordered):
        if end > after or start == after:
            return None
    out = text
    for start, end, replacement in reversed(ordered):
        out = out[:start] + replacement + out[end:]
    return out


def _write(source: _Source, text: str) -> Refusal | None:
    raw = source.raw
    crlf = b"\r\n" in raw
    if crlf and raw.count(b"\r\n") != raw.count(b"\n"):
        return Refusal(source.file, "it mixes line endings (\\n and \\r\\n); make them one kind")
    data = text.replace("\n", "\r\n") if crlf else text
    encoded = ("\ufeff" if raw.startswith(b"\xef\xbb\xbf") else "") + data
    try:
        if source.file.read_bytes() != raw:
            return Refusal(source.file, "it changed while it was being fixed; run --fix again")
        # Written in place, not renamed over: the file keeps its mode, owner and any symlink.
        source.file.write_bytes(encoded.encode("utf-8"))
    except OSError as exc:
        return Refusal(source.file, f"cannot write it: {exc}")
    return None
