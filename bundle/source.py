"""Reading goondan.yaml: documents as plain data, with the line of every field.

PyYAML's composer keeps a mark on every node; walking the node tree beside the constructed
data gives a map from field path to line, so an error deep in ``spec.exports[1].parameters``
still names its line. The walk also refuses what would hurt later stages: duplicate keys
(YAML keeps the last silently), and alias "bombs" whose expansion explodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bundle.errors import (
    E_FILE_NOT_FOUND,
    E_FILE_TOO_LARGE,
    E_PARSE_ERROR,
    E_SCHEMA_INVALID,
    E_TOO_MANY_DOCUMENTS,
    ConfigIssue,
)

MAX_FILE_BYTES = 1024 * 1024
"""A goondan.yaml larger than this is refused (upstream's limit)."""
MAX_DOCUMENTS = 100
MAX_EXPANDED_NODES = 200_000
"""Nodes a document may hold once aliases are expanded; protects validation from alias bombs."""
MAX_DEPTH = 64

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document of a file."""

    file: Path
    index: int
    """0-based position among the file's non-empty documents."""
    line: int
    """1-based line where the document starts."""
    data: Any
    lines: dict[FieldPath, int] = field(default_factory=dict)

    def line_of(self, path: FieldPath) -> int:
        """Line of ``path``, or of its nearest ancestor that has one."""
        while path:
            found = self.lines.get(path)
            if found is not None:
                return found
            path = path[:-1]
        return self.line


def read_file(path: Path) -> tuple[str | None, list[ConfigIssue]]:
    """The text of ``path``, or the issue that prevents reading it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None, [
            ConfigIssue(
                code=E_FILE_NOT_FOUND,
                message=f"file not found: {path}",
                file=path,
                suggestion="check the path, or create it (see goondan.yaml.example)",
            )
        ]
    except OSError as exc:
        return None, [
            ConfigIssue(code=E_FILE_NOT_FOUND, message=f"cannot read {path}: {exc}", file=path)
        ]
    if size > MAX_FILE_BYTES:
        return None, [
            ConfigIssue(
                code=E_FILE_TOO_LARGE,
                message=f"file is {size} bytes; the limit is {MAX_FILE_BYTES} bytes (1 MiB)",
                file=path,
                suggestion="split the resources across smaller files",
            )
        ]
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [
            ConfigIssue(code=E_FILE_NOT_FOUND, message=f"cannot read {path}: {exc}", file=path)
        ]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        guess = (
            " (it looks like UTF-16)"
            if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:200]
            else ""
        )
        return None, [
            ConfigIssue(
                code=E_PARSE_ERROR,
                message=f"the file is not UTF-8{guess}: invalid byte at offset {exc.start}",
                file=path,
                line=line,
                suggestion="save the file as UTF-8",
            )
        ]
    return text.lstrip("\ufeff").replace("\r\n", "\n"), []


def parse_documents(text: str, file: Path) -> tuple[list[Document], list[ConfigIssue]]:
    """Split multi-document YAML into :class:`Document` s; empty documents are skipped."""
    documents: list[Document] = []
    issues: list[ConfigIssue] = []
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None or _is_blank(node):
                continue
            if len(documents) >= MAX_DOCUMENTS:
                issues.append(
                    ConfigIssue(
                        code=E_TOO_MANY_DOCUMENTS,
                        message=f"more than {MAX_DOCUMENTS} documents in one file",
                        file=file,
                        line=node.start_mark.line + 1,
                        suggestion="split the resources across several files",
                    )
                )
                break
            document = _document(loader, node, file, len(documents), issues)
            if document is not None:
                documents.append(document)
    except yaml.MarkedYAMLError as exc:
        issues.append(_syntax_issue(exc, file))
    except yaml.YAMLError as exc:
        issues.append(ConfigIssue(code=E_PARSE_ERROR, message=f"invalid YAML: {exc}", file=file))
    except RecursionError:
        issues.append(
            ConfigIssue(
                code=E_PARSE_ERROR,
                message=f"YAML nesting deeper than {MAX_DEPTH} levels",
                file=file,
                line=_too_deep_line(text),
                suggestion="flatten the structure",
            )
        )
    finally:
        loader.dispose()
    return documents, issues


def _huge_number_line(node: yaml.Node) -> int | None:
    """Line of the first integer scalar too long to convert (Python's 4300-digit limit)."""
    pending: list[yaml.Node] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, yaml.ScalarNode):
            if current.tag == "tag:yaml.org,2002:int" and len(current.value) > 4000:
                return current.start_mark.line + 1
        elif isinstance(current, yaml.SequenceNode):
            pending.extend(reversed(current.value))
        elif isinstance(current, yaml.MappingNode):
            for key, value in reversed(current.value):
                pending.extend((value, key))
    return None


def _syntax_issue(exc: yaml.MarkedYAMLError, file: Path) -> ConfigIssue:
    """A YAML syntax error, at its position when it has one."""
    mark = exc.problem_mark or exc.context_mark
    return ConfigIssue(
        code=E_PARSE_ERROR,
        message=f"invalid YAML: {exc.problem or exc.context}",
        file=file,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        suggestion="fix the YAML syntax at this position (indentation, quotes, colons)",
    )


def _document(
    loader: yaml.SafeLoader, node: yaml.Node, file: Path, index: int, issues: list[ConfigIssue]
) -> Document | None:
    """The document ``node`` holds, or ``None`` when it cannot be read (said in ``issues``,
    as its duplicate keys are)."""
    line = node.start_mark.line + 1
    problem = _complexity_problem(node, file)
    if problem is not None:
        issues.append(problem)
        return None
    try:
        data = loader.construct_document(node)
    except ValueError as exc:  # an integer of thousands of digits, say
        issues.append(
            ConfigIssue(
                code=E_PARSE_ERROR,
                message=f"a value cannot be read: {exc}",
                file=file,
                line=_huge_number_line(node) or line,
                suggestion="use a number of ordinary size",
            )
        )
        return None
    lines: dict[FieldPath, int] = {}
    duplicates: list[ConfigIssue] = []
    _walk(node, (), lines, duplicates, file)
    issues.extend(duplicates)
    return Document(file=file, index=index, line=line, data=data, lines=lines)


def _is_blank(node: yaml.Node) -> bool:
    """An empty document (``---`` followed by nothing): skipped, as upstream does."""
    return (
        isinstance(node, yaml.ScalarNode)
        and node.tag == "tag:yaml.org,2002:null"
        and node.value == ""
    )


def _too_deep_line(text: str) -> int | None:
    """Line where nesting first exceeds :data:`MAX_DEPTH`, found without recursion."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    return mark.line + 1 if mark is not None else None
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None
    return None


def _complexity_problem(root: yaml.Node, file: Path) -> ConfigIssue | None:
    """Refuse documents that are too deep or whose alias expansion is too large.

    Sizes are memoised per node, so a shared (aliased) node costs one visit however often it
    is referenced: the check itself cannot be made to explode.
    """
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise _TooComplex(
                f"YAML nesting deeper than {MAX_DEPTH} levels", node, "flatten the structure"
            )
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                total += size(key, depth + 1) + size(value, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item, depth + 1)
        if total > MAX_EXPANDED_NODES:
            raise _TooComplex(
                f"document expands to more than {MAX_EXPANDED_NODES} nodes "
                "(too many aliases or too much data)",
                root,
                "write the data out instead of nesting aliases",
            )
        sizes[id(node)] = total
        return total

    try:
        size(root, 0)
    except _TooComplex as exc:
        return ConfigIssue(
            code=E_PARSE_ERROR,
            message=exc.message,
            file=file,
            line=exc.node.start_mark.line + 1,
            suggestion=exc.suggestion,
        )
    return None


class _TooComplex(Exception):
    def __init__(self, message: str, node: yaml.Node, suggestion: str) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.suggestion = suggestion


def _walk(
    node: yaml.Node,
    path: FieldPath,
    lines: dict[FieldPath, int],
    issues: list[ConfigIssue],
    file: Path,
    key_line: int | None = None,
) -> None:
    if path in lines:
        return  # a duplicate key, reported by the caller
    # A mapping value's own mark is where its content starts (the line after `spec:` for a
    # block), but "spec is missing entry" should point at `spec:` itself: use the key's line.
    lines[path] = key_line if key_line is not None else node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            if key in seen:
                issues.append(
                    ConfigIssue(
                        code=E_SCHEMA_INVALID,
                        message=f"duplicate key {key!r}",
                        file=file,
                        line=key_node.start_mark.line + 1,
                        field=format_path((*path, key)),
                        suggestion="remove one of the two entries",
                    )
                )
            seen.add(key)
            _walk(value_node, (*path, key), lines, issues, file, key_node.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, issues, file)


def format_path(path: FieldPath) -> str:
    """``("spec", "exports", 1, "name")`` → ``spec.exports[1].name``."""
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else str(segment)
    return out
