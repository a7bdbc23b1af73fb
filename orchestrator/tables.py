"""Tables of the command line: plain columns for pipes, terminal-wide tables for people.

Scripts read the listings of ``status``, ``usage``, ``instances``, ``requests`` and ``approvals``
through pipes, so piped output stays what it always was: fixed-width, space-separated
columns, the last one free. On a terminal a table of that kind wraps each long row into
garbage at 80 columns; there the same rows are laid out to the terminal's width, long cells cut
short with an ellipsis, a row never wrapped, the header bold (unless ``NO_COLOR`` is set), and
control characters of a cell (a tool's arguments, a reason) never reach the terminal.
"""

from __future__ import annotations

import os
import sys
import unicodedata
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
            self._print_for_terminal(stream)
            return
        template = self._plain_template()
        # A line at a time, as the stream buffers them: a reader that leaves early (`| head`)
        # meets the next flush, and the command stops as `git log | head` does.
        print(template.format(*(c.header for c in self.columns)), file=stream)
        for cells in self.rows:
            print(template.format(*cells), file=stream)

    def _plain_template(self) -> str:
        """One line of plain, fixed-width columns as a format template (a field per cell)."""
        fields = []
        for index, column in enumerate(self.columns):
            gap = column.gap.replace("{", "{{").replace("}", "}}") if index else ""
            spec = f":{column.align}{column.width}" if column.width else ""
            fields.append(f"{gap}{{{spec}}}")
        return "".join(fields)

    def _print_for_terminal(self, stream: IO[str]) -> None:
        width = terminal_width(stream)
        widths = self.fit(width)
        header = self.terminal_line(tuple(c.header for c in self.columns), widths, width)
        plain = bool(os.environ.get("NO_COLOR"))  # the convention: no styling at all
        print(header if plain else f"{BOLD}{header}{RESET}", file=stream)
        for cells in self.rows:
            print(self.terminal_line(cells, widths, width), file=stream)

    def terminal_line(self, cells: tuple[str, ...], widths: list[int], width: int) -> str:
        """``cells`` in columns ``widths`` wide, two spaces apart, each cut short with an
        ellipsis when longer; the line itself cut at ``width`` (never wrapped)."""
        parts = []
        for column, cell, room in zip(self.columns, cells, widths, strict=True):
            shown = cut(printable(cell), room)
            pad = " " * (room - display_width(shown))
            parts.append(pad + shown if column.align == ">" else shown + pad)
        return cut("  ".join(parts).rstrip(), width)

    def fit(self, width: int) -> list[int]:
        """Each column's width on a terminal ``width`` columns wide: what its cells need, and
        when the row is too long, the free column gives way first (down to a few characters),
        then the widest of the others, one character at a time."""
        headed = [tuple(c.header for c in self.columns), *self.rows]
        widths = [
            max(display_width(printable(row[i])) for row in headed)
            for i in range(len(self.columns))
        ]
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
                break  # narrower than the headers: the line is cut at the terminal's edge
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


BOLD = "\x1b[1m"
RESET = "\x1b[0m"
ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"
DEFAULT_WIDTH = 80
"""The width of a terminal that does not say its own."""


def terminal_width(stream: IO[str]) -> int:
    """Columns of the terminal ``stream`` writes to: ``COLUMNS`` when set, else what the
    terminal says, else :data:`DEFAULT_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (AttributeError, ValueError, OSError):  # no descriptor, or not a terminal after all
        return DEFAULT_WIDTH


def printable(text: str) -> str:
    """``text`` without what would move the cursor or style the terminal: a line break or a
    tab becomes a space, any other control character the replacement character."""
    if text.isprintable():
        return text
    return "".join(
        " "
        if char in "\t\n\r"
        else "\N{REPLACEMENT CHARACTER}"
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")
        else char
        for char in text
    )


def char_width(char: str) -> int:
    """Terminal columns ``char`` takes: 2 for a wide East Asian one, 0 for a combining mark."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes."""
    return sum(char_width(char) for char in text)


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns: cut short with an ellipsis when it is longer."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept, used = [], 0
    for char in text:
        size = char_width(char)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + ELLIPSIS
