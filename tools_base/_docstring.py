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
from collections.abc import Iterator
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
        section = _section_at(lines, i)
        if section is None:
            i += 1
            continue
        body_end = min(body_end, i)
        i, entries = section
        parameters.update(entries)
    return Docstring(_paragraphs(lines[:body_end]), parameters)


_Section = tuple[int, dict[str, str]]
"""Where a section ends, and the parameters it describes."""


def _section_at(lines: list[str], i: int) -> _Section | None:
    """The section (NumPy, Google) or Sphinx field starting at line ``i``, or ``None`` when
    none starts there."""
    for reader in (_numpy_section, _google_section, _sphinx_field):
        found = reader(lines, i)
        if found is not None:
            return found
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _numpy_section(lines: list[str], i: int) -> _Section | None:
    next_line = lines[i + 1] if i + 1 < len(lines) else ""
    title = lines[i].strip().lower()
    if not _NUMPY_RULE.match(next_line.strip()) or title not in _SECTION_TITLES:
        return None
    end = _block_end(lines, i + 2, _indent(lines[i]), numpy=True)
    return end, _numpy_entries(lines[i + 2 : end]) if title in _GOOGLE_PARAMS else {}


def _google_section(lines: list[str], i: int) -> _Section | None:
    header = _GOOGLE_HEADER.match(lines[i].strip())
    if not header or header["title"].lower() not in _SECTION_TITLES:
        return None
    end = _block_end(lines, i + 1, _indent(lines[i]), numpy=False)
    wanted = header["title"].lower() in _GOOGLE_PARAMS
    return end, _google_entries(lines[i + 1 : end]) if wanted else {}


def _sphinx_field(lines: list[str], i: int) -> _Section | None:
    sphinx = _SPHINX_FIELD.match(lines[i].strip())
    if not sphinx:
        return None
    end = _block_end(lines, i + 1, _indent(lines[i]), numpy=False)
    words = sphinx["args"].split()
    if sphinx["kind"] not in _SPHINX_PARAM_KINDS or not words:
        return end, {}
    rest = [sphinx["text"], *(x.strip() for x in lines[i + 1 : end])]
    return end, {words[-1]: _join(rest)}


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
    current: list[str] | None = None
    for line, at_entry in _entry_lines(lines):
        match = _GOOGLE_ENTRY.match(line) if at_entry else None
        if match:
            current = found.setdefault(match["name"], [])
            current.append(match["text"])
        elif current is not None:
            current.append(line)
    return {name: _join(text) for name, text in found.items()}


def _numpy_entries(lines: list[str]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[list[str]] = []
    for line, at_entry in _entry_lines(lines):
        match = _NUMPY_ENTRY.match(line) if at_entry else None
        if match:
            names = [n.strip() for n in match["names"].split(",")]
            current = [found.setdefault(name, []) for name in names]
        else:
            for text in current:
                text.append(line)
    return {name: _join(text) for name, text in found.items()}


def _entry_lines(lines: list[str]) -> Iterator[tuple[str, bool]]:
    """A section's lines but blank ones, stripped, each with whether it sits at the indent
    of the first (where an entry may begin)."""
    entry_indent: int | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        yield line.strip(), indent == entry_indent


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
