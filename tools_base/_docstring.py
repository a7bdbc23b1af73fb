"""What a tool handler's docstring says about the tool and each of its parameters.

Three common styles are read, with no dependency beyond the standard library:

- Google: an ``Args:`` (or ``Arguments:``, ``Parameters:``, ``Keyword Args:``...) section whose
  entries are ``name: text`` or ``name (type): text``, continued on more-indented lines;
- NumPy: a ``Parameters`` heading underlined with dashes, entries ``name : type`` with the text
  indented below;
- Sphinx: ``:param name: text`` (or ``:param type name: text``) fields.

The description is the text before the first section or field.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_PARAMS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "other parameters",
    }
)
_GOOGLE_HEADER = re.compile(r"^(?P<title>[A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<names>\w+(?:\s*,\s*\w+)*)\s*(?::.*)?$")
_SPHINX_FIELD = re.compile(r"^:(?P<kind>\w+)(?P<args>[^:]*):\s*(?P<text>.*)$")
_SPHINX_PARAM_KINDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})
_SECTION_TITLES = frozenset(
    {
        *_GOOGLE_PARAMS,
        "returns",
        "return",
        "yields",
        "raises",
        "examples",
        "example",
        "notes",
        "note",
        "see also",
        "warnings",
        "warning",
        "references",
        "attributes",
        "todo",
    }
)


@dataclass(frozen=True, slots=True)
class Docstring:
    """A docstring split into the tool's description and its parameters' descriptions."""

    description: str
    """The text before the first section, paragraphs kept, lines of a paragraph joined."""
    parameters: dict[str, str] = field(default_factory=dict)
    """Parameter name to its description, one line each."""


def parse_docstring(text: str | None) -> Docstring:
    """Split ``text`` (a raw ``__doc__``) as the module docstring describes."""
    if not text:
        return Docstring("")
    lines = inspect.cleandoc(text).splitlines()
    parameters: dict[str, str] = {}
    body_end = len(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        next_line = lines[i + 1] if i + 1 < len(lines) else ""
        title = stripped.lower()
        if _NUMPY_RULE.match(next_line.strip()) and title in _SECTION_TITLES:
            body_end = min(body_end, i)
            end = _block_end(lines, i + 2, indent, numpy=True)
            if title in _GOOGLE_PARAMS:
                parameters.update(_numpy_entries(lines[i + 2 : end]))
            i = end
            continue
        header = _GOOGLE_HEADER.match(stripped)
        if header and header["title"].lower() in _SECTION_TITLES:
            body_end = min(body_end, i)
            end = _block_end(lines, i + 1, indent, numpy=False)
            if header["title"].lower() in _GOOGLE_PARAMS:
                parameters.update(_google_entries(lines[i + 1 : end]))
            i = end
            continue
        sphinx = _SPHINX_FIELD.match(stripped)
        if sphinx:
            body_end = min(body_end, i)
            end = _block_end(lines, i + 1, indent, numpy=False)
            words = sphinx["args"].split()
            if sphinx["kind"] in _SPHINX_PARAM_KINDS and words:
                rest = [sphinx["text"], *(x.strip() for x in lines[i + 1 : end])]
                parameters[words[-1]] = _join(rest)
            i = end
            continue
        i += 1
    return Docstring(_paragraphs(lines[:body_end]), parameters)


def _block_end(lines: list[str], start: int, indent: int, *, numpy: bool) -> int:
    """Where the section that begins at ``start`` ends: at the next line as little indented as
    its header that is not blank (a NumPy section's entries sit at the header's own indent, so
    there it ends at the next heading, which is underlined)."""
    for j in range(start, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        here = len(line) - len(line.lstrip())
        if numpy:
            following = lines[j + 1].strip() if j + 1 < len(lines) else ""
            if here <= indent and _NUMPY_RULE.match(following):
                return j
        elif here <= indent:
            return j
    return len(lines)


def _google_entries(lines: list[str]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: list[str] | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        match = _GOOGLE_ENTRY.match(line.strip()) if indent == entry_indent else None
        if match:
            current = found.setdefault(match["name"], [])
            current.append(match["text"])
        elif current is not None:
            current.append(line.strip())
    return {name: _join(text) for name, text in found.items()}


def _numpy_entries(lines: list[str]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: list[list[str]] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        match = _NUMPY_ENTRY.match(line.strip()) if indent == entry_indent else None
        if match:
            names = [n.strip() for n in match["names"].split(",")]
            current = [found.setdefault(name, []) for name in names]
        else:
            for text in current:
                text.append(line.strip())
    return {name: _join(text) for name, text in found.items()}


def _join(parts: list[str]) -> str:
    return " ".join(p for p in parts if p).strip()


def _paragraphs(lines: list[str]) -> str:
    """Lines of one paragraph joined by spaces, paragraphs by a blank line."""
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join(" ".join(p) for p in paragraphs if p)
