"""``instance``: a terminal view of the running daemon's agents and conversation instances.

One table, an agent's row followed by the rows of its instances, refreshed every
:data:`REFRESH_SECONDS`. ↑/↓ move the selection, ``r`` restarts the selected agent (or the agent
of the selected instance), Delete (or ``d``) deletes the selected instance after a
confirmation, ``g`` refreshes now, ``q``/Esc quit. It asks the daemon through
:class:`~orchestrator.http.client.DaemonApi`, as every other command does, from a worker thread
so the screen never waits on the daemon. Needs the ``tui`` extra (Textual).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from msgspec import UnsetType
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Header, Static

from goondan.errors import DaemonError
from orchestrator.http.client import DaemonApi, error_text, path_segment
from orchestrator.operations.answers import (
    Answer,
    ErrorBody,
    InstanceDeleted,
    InstanceRow,
    Instances,
    Restarted,
    SwarmStatus,
)
from orchestrator.operations.encoding import plain

_A = TypeVar("_A")
T = TypeVar("T")


def _or(value: T | UnsetType, missing: T) -> T:
    """``value``, or ``missing`` for a field the body left out."""
    return missing if isinstance(value, UnsetType) else value


REFRESH_SECONDS = 2.0
"""How often the table is read again from the daemon."""


@dataclass(frozen=True)
class Row:
    """What one table row stands for: an agent, or one of its instances."""

    agent: str
    instance: str | None = None

    @property
    def key(self) -> str:
        """The row's key in the table (kept across refreshes, so the selection stays)."""
        return (
            f"agent:{self.agent}"
            if self.instance is None
            else f"instance:{self.agent}/{self.instance}"
        )


class ConfirmDelete(ModalScreen[bool]):
    """Asks before an instance is deleted: ``y`` deletes, ``n`` or Esc keeps it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Delete"),
        Binding("n,escape", "answer(False)", "Keep"),
    ]

    def __init__(self, row: Row) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        """The question and its two buttons."""
        with Vertical(id="confirm"):
            yield Static(
                f"Delete instance {self.row.instance!r} of agent {self.row.agent!r}? "
                "Its conversation is gone for good. (y/n)",
                id="question",
            )
            with Horizontal():
                yield Button("Delete", id="yes", variant="error")
                yield Button("Keep", id="no")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button answers as its key does."""
        self.dismiss(event.button.id == "yes")


class InstanceView(App[int]):
    """The agents and instances of one daemon, with restart and delete."""

    TITLE = "goondan instances"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "restart", "Restart agent"),
        Binding("delete,d", "delete", "Delete instance"),
        Binding("g", "refresh", "Refresh"),
        Binding("q,escape", "quit_view", "Quit"),
    ]
    CSS = """
    #message { height: 1; padding: 0 1; }
    ConfirmDelete { align: center middle; }
    #confirm { width: 70; height: auto; border: thick $error; padding: 1 2; background: $surface; }
    """

    def __init__(self, api: DaemonApi, refresh_seconds: float = REFRESH_SECONDS) -> None:
        super().__init__()
        self.api = api
        self.refresh_seconds = refresh_seconds
        self.rows: dict[str, Row] = {}
        """The table's rows by key, as last read."""

    def compose(self) -> ComposeResult:
        """Header, the table, a line of messages, the key bindings."""
        yield Header()
        yield DataTable(id="rows", cursor_type="row", zebra_stripes=True)
        yield Static("", id="message")
        yield Footer()

    def on_mount(self) -> None:
        """Columns, the first read, and the refresh timer."""
        table = self.query_one(DataTable)
        table.add_columns("AGENT", "INSTANCE", "STATUS", "PID", "RESTARTS", "TOKENS", "UPDATED")
        table.focus()
        self.action_refresh()
        self.set_interval(self.refresh_seconds, self.action_refresh)

    def say(self, text: str) -> None:
        """Show ``text`` on the message line."""
        self.query_one("#message", Static).update(text)

    @property
    def selected(self) -> Row | None:
        """The row under the cursor, if any."""
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.rows.get(key or "")

    async def _call(self, method: str, path: str, kind: type[_A]) -> _A | str:
        """The answer of ``kind``, or what went wrong in words."""
        try:
            status, answer = await asyncio.to_thread(self.api.answer, method, path, kind)
        except DaemonError as exc:
            return str(exc)
        if isinstance(answer, ErrorBody) or status >= 300:
            return error_text(plain(answer)) if isinstance(answer, Answer) else str(status)
        return answer

    def action_refresh(self) -> None:
        """Read agents and instances again."""
        self.run_worker(self._refresh(), group="api")

    async def _refresh(self) -> None:
        status = await self._call("GET", "/v1/agents", SwarmStatus)
        if isinstance(status, str):
            self.say(f"error: {status}")
            return
        listed = await self._call("GET", "/v1/instances", Instances)
        instances = listed.instances if not isinstance(listed, str) else []
        by_agent: dict[str, list[InstanceRow]] = {}
        for row in instances:
            by_agent.setdefault(str(_or(row.agent_name, None)), []).append(row)
        table = self.query_one(DataTable)
        chosen = self.selected
        table.clear()
        self.rows.clear()
        for agent in status.agents:
            name = agent.agent
            tokens = agent.usage.total_tokens if agent.usage is not None else 0
            self._add(
                table,
                Row(name),
                name,
                "",
                agent.status,
                agent.pid or "-",
                agent.restarts,
                tokens,
                "",
            )
            for row in by_agent.get(name, []):
                key = str(_or(row.instance_key, None))
                used = row.usage.total_tokens if not isinstance(row.usage, UnsetType) else 0
                self._add(
                    table,
                    Row(name, key),
                    "",
                    key,
                    _or(row.status, "?"),
                    "",
                    "",
                    used,
                    _or(row.updated_at, ""),
                )
        if chosen is not None and chosen.key in self.rows:
            table.move_cursor(row=table.get_row_index(chosen.key))

    def _add(self, table: DataTable[Any], row: Row, *cells: Any) -> None:
        self.rows[row.key] = row
        table.add_row(*(str(cell) for cell in cells), key=row.key)

    def action_restart(self) -> None:
        """Restart the selected agent (the agent of a selected instance)."""
        row = self.selected
        if row is None:
            return
        self.say(f"restarting {row.agent} ...")
        self.run_worker(self._restart(row.agent), group="api")

    async def _restart(self, agent: str) -> None:
        answer = await self._call("POST", f"/v1/agents/{path_segment(agent)}/restart", Restarted)
        if isinstance(answer, str):
            self.say(f"error: {answer}")
        else:
            self.say(f"{agent}: restarted (pid {answer.pid})")
        await self._refresh()

    def action_delete(self) -> None:
        """Delete the selected instance, once confirmed."""
        row = self.selected
        if row is None or row.instance is None:
            self.say("select an instance to delete (an agent's rows below it)")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._delete(row), group="api")
            else:
                self.say("kept")

        self.push_screen(ConfirmDelete(row), confirmed)

    async def _delete(self, row: Row) -> None:
        assert row.instance is not None
        path = f"/v1/agents/{path_segment(row.agent)}/instances/{path_segment(row.instance)}"
        answer = await self._call("DELETE", path, InstanceDeleted)
        if isinstance(answer, str):
            self.say(f"error: {answer}")
        else:
            gone = "deleted" if answer.deleted else "not found"
            self.say(f"{row.agent}/{row.instance}: {gone}")
        await self._refresh()

    def action_quit_view(self) -> None:
        """Leave, with exit status 0."""
        self.exit(0)
