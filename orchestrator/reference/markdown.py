"""Small pieces of Markdown the reference pages share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(text: object) -> str:
    """``text`` fit for one table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table (empty string for no rows)."""
    lines = [f"| {' | '.join(rows_cell for rows_cell in map(cell, row))} |" for row in rows]
    if not lines:
        return ""
    top = f"| {' | '.join(head)} |\n|{'---|' * len(head)}\n"
    return top + "\n".join(lines) + "\n"


def anchor(text: str) -> str:
    """The anchor MkDocs' table of contents gives a heading of ``text``."""
    kept = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return "-".join(kept.split())
