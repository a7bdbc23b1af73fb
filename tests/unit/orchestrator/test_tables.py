"""The command line's tables on a terminal: laid out to its width, cells cut with an ellipsis,
never a row wrapped, and no control character of a cell reaching the terminal."""

from __future__ import annotations

import io

import pytest

from orchestrator.tables import Column, Table, cut, display_width, printable


class Terminal(io.StringIO):
    """What a table prints to a terminal (its width comes from ``COLUMNS``)."""

    def isatty(self) -> bool:
        return True


def approvals_table() -> Table:
    table = Table(
        (
            Column("ID", 12, cut=False),
            Column("AGENT", 14),
            Column("TOOL", 10),
            Column("ARGUMENTS", None),
        )
    )
    table.add_row("apr_0123456789", "worker@default", "bash__exec", '{"command": "' + "x" * 300)
    return table


def on_terminal(table: Table, columns: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    table.print(out)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("columns", [40, 60, 200])
def test_rows_fit_the_terminal_and_long_cells_end_in_an_ellipsis(
    monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    header, row = on_terminal(approvals_table(), columns, monkeypatch)
    assert all(display_width(line) <= columns for line in (header, row))
    assert header.split()[:2] == ["ID", "AGENT"]
    assert row.startswith("apr_0123456789  ")  # an id is never cut
    assert row.endswith("…")


def test_a_short_table_keeps_every_cell_whole_two_spaces_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = Table((Column("AGENT"), Column("TOKENS", 9, ">")))
    table.add_row("worker", 42)
    assert on_terminal(table, 80, monkeypatch) == ["AGENT   TOKENS", "worker      42"]


def test_the_header_is_bold_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Terminal()
    approvals_table().print(out)
    header, row = out.getvalue().splitlines()
    assert header.startswith("\x1b[1mID")
    assert header.endswith("\x1b[0m")
    assert "\x1b[" not in row


def test_control_characters_of_a_cell_never_reach_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = Table((Column("ID", 4), Column("REASON")))
    table.add_row("a1", "line one\nline two\x1b[2J\x07\u202eevil")
    _, row = on_terminal(table, 80, monkeypatch)
    assert not {"\x1b", "\x07", "\u202e"} & set(row)
    assert "line one line two" in row


def test_piped_output_is_unchanged_plain_columns() -> None:
    table = Table((Column("AGENT", 8), Column("NOTE")))
    table.add_row("worker", "x" * 200)
    out = io.StringIO()
    table.print(out)
    assert out.getvalue().splitlines() == [f"{'AGENT':<8} NOTE", f"{'worker':<8} {'x' * 200}"]


def test_piped_cells_and_gaps_with_braces_are_printed_as_they_are() -> None:
    # Plain lines are laid out by one format template: a brace in a cell (a tool's JSON
    # arguments) or in a column's gap must never be read as a field of it.
    table = Table((Column("ID", 4, align=">"), Column("ARGS", gap=" {0} ")))
    table.add_row("7", '{"path": "{x}"}')
    out = io.StringIO()
    table.print(out)
    assert out.getvalue() == '  ID {0} ARGS\n   7 {0} {"path": "{x}"}\n'


def test_wide_characters_take_two_columns_and_are_cut_whole() -> None:
    assert display_width("漢字") == 4
    assert cut("漢字漢字", 5) == "漢字…"
    assert display_width(cut("漢字漢字", 5)) == 5
    assert cut("short", 10) == "short"
    assert printable("tab\there") == "tab here"
