"""Tables of the command line: plain columns for pipes, terminal-wide tables for people.

Scripts read the listings of ``status``, ``usage``, ``instances``, ``requests`` and ``approvals``
through pipes, so piped output stays what it always was: fixed-width, space-separated
columns, the last one free. On a terminal a table of that kind wraps each long row into
garbage at 80 columns; there :mod:`rich` (imported only then) lays the same rows out to the
terminal's width, cutting long cells short with an ellipsis and never wrapping a row.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import IO, Literal


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its header, its plain width (``None``: as wide as its text) and alignment,
    the text that separates it from the column before it in plain output, and whether a
    terminal too narrow may cut its cells (not ids, which are there to be copied)."""

    header: str
    width: int | None = None
    align: Literal["<", ">"] = "<"
    gap: str = " "
    cut: bool = True


@dataclass(slots=True)
class Table:
    """Rows under headers, printed plain or for a terminal (see the module's text)."""

    columns: tuple[Column, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add_row(self, *cells: object) -> None:
        """One row; each cell is shown as its ``str``."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(tuple(str(cell) for cell in cells))

    def print(self, out: IO[str] | None = None) -> None:
        """Print the table to ``out`` (stdout): for a terminal when it is one."""
        stream = out if out is not None else sys.stdout
        if _is_terminal(stream):
            self._print_rich(stream)
            return
        for cells in [tuple(c.header for c in self.columns), *self.rows]:
            print(self.plain_line(cells), file=stream)

    def plain_line(self, cells: tuple[str, ...]) -> str:
        """``cells`` as one line of plain, fixed-width columns."""
        parts = []
        for index, (column, cell) in enumerate(zip(self.columns, cells, strict=True)):
            gap = column.gap if index else ""
            shown = format(cell, f"{column.align}{column.width}") if column.width else cell
            parts.append(gap + shown)
        return "".join(parts)

    def _print_rich(self, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.table import Table as RichTable

        console = Console(file=stream, soft_wrap=False, highlight=False, markup=False, emoji=False)
        plain = bool(os.environ.get("NO_COLOR"))  # the convention: no styling at all
        table = RichTable(
            box=None, padding=(0, 1), pad_edge=False, header_style="" if plain else "bold"
        )
        widths = self.fit(console.width)
        for column, width in zip(self.columns, widths, strict=True):
            table.add_column(
                column.header,
                justify="right" if column.align == ">" else "left",
                width=width,
                no_wrap=True,
                overflow="ellipsis",
            )
        for cells in self.rows:
            table.add_row(*cells)
        console.print(table)

    def fit(self, width: int) -> list[int]:
        """Each column's width on a terminal ``width`` columns wide: what its cells need, and
        when the row is too long, the free column gives way first (down to a few characters),
        then the widest of the others, one character at a time."""
        headed = [tuple(c.header for c in self.columns), *self.rows]
        widths = [max(len(row[i]) for row in headed) for i in range(len(self.columns))]
        floors = [
            widths[i]
            if not c.cut
            else min(widths[i], FREE_FLOOR if c.width is None else max(len(c.header), 3))
            for i, c in enumerate(self.columns)
        ]
        over = sum(widths) + 2 * (len(widths) - 1) - width
        for i, column in enumerate(self.columns):
            if column.width is None and over > 0:
                cut = min(over, widths[i] - floors[i])
                widths[i] -= cut
                over -= cut
        while over > 0:
            shrinkable = [i for i in range(len(widths)) if widths[i] > floors[i]]
            if not shrinkable:
                break  # narrower than the headers: rich cuts what is left
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            over -= 1
        return widths


FREE_FLOOR = 12
"""Characters a free column (arguments, reasons) keeps on a narrow terminal."""


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False
