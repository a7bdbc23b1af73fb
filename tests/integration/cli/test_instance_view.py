"""``instance``: the terminal view driven with Textual's Pilot against a real daemon, and the
list it falls back to off a terminal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

from orchestrator.cli.instance_view import ConfirmDelete, InstanceView
from orchestrator.http.client import DaemonApi
from tests.support.daemon import Daemon, run_cli

WAIT = 30


async def settled(app: InstanceView) -> None:
    """Every call to the daemon the view started has answered and been shown."""
    async with asyncio.timeout(WAIT):
        await app.workers.wait_for_complete()


def message(app: InstanceView) -> str:
    return str(app.query_one("#message", Static).content)


async def select(app: InstanceView, key: str) -> None:
    table = app.query_one(DataTable)
    table.move_cursor(row=table.get_row_index(key))
    assert app.selected is not None
    assert app.selected.key == key


def columns(table: str) -> set[tuple[str, str]]:
    """The AGENT and INSTANCE of each row of the `instances` table."""
    return {(row.split()[0], row.split()[1]) for row in table.splitlines()[1:]}


def instances(api: DaemonApi) -> set[tuple[str, str]]:
    status, body = api.call("GET", "/v1/instances")
    assert status == 200, body
    return {(row["agentName"], row["instanceKey"]) for row in body["instances"]}


def agent_row(api: DaemonApi, name: str) -> dict[str, Any]:
    status, body = api.call("GET", "/v1/agents")
    assert status == 200, body
    return next(row for row in body["agents"] if row["agent"] == name)


async def test_the_view_restarts_an_agent_and_deletes_an_instance(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        await asyncio.to_thread(daemon.wait_for, "orchestrator started")
        for key in ("u1", "u2"):
            done = await asyncio.to_thread(
                run_cli, "send", "beta", "pid", "--instance", key, cwd=tmp_path
            )
            assert done.returncode == 0, done.stderr
        api = DaemonApi(tmp_path / ".goondan")

        # Off a terminal, bare `instance` prints the list `instances` prints, and says so.
        listed = await asyncio.to_thread(run_cli, "instance", cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert "instance: not a terminal: listing the instances instead" in listed.stderr
        plain = await asyncio.to_thread(run_cli, "instances", cwd=tmp_path)
        # The same table (its times may move on between the two reads: not compared).
        assert listed.stdout.splitlines()[0] == plain.stdout.splitlines()[0]
        assert columns(listed.stdout) == columns(plain.stdout) >= {("beta", "u1"), ("beta", "u2")}

        app = InstanceView(api, refresh_seconds=3600)
        async with app.run_test(size=(140, 30)) as pilot:
            await settled(app)
            assert {"agent:alpha", "agent:beta", "instance:beta/u1", "instance:beta/u2"} <= set(
                app.rows
            )
            table = app.query_one(DataTable)
            # The arrow keys move the selection down the rows, and back.
            start = table.cursor_row
            await pilot.press("down")
            assert table.cursor_row == start + 1
            await pilot.press("up")
            assert table.cursor_row == start

            before = agent_row(api, "beta")["restarts"]
            await select(app, "instance:beta/u1")  # `r` on an instance restarts its agent
            await pilot.press("r")
            await settled(app)
            assert message(app).startswith("beta: restarted (pid ")
            assert agent_row(api, "beta")["restarts"] == before + 1

            # Delete asks first: `n` keeps the instance.
            await select(app, "instance:beta/u2")
            await pilot.press("delete")
            assert isinstance(app.screen, ConfirmDelete)
            await pilot.press("n")
            await settled(app)
            assert message(app) == "kept"
            assert ("beta", "u2") in instances(api)
            # ... and `y` deletes it, through the daemon.
            await pilot.press("delete")
            assert isinstance(app.screen, ConfirmDelete)
            await pilot.press("y")
            await settled(app)
            assert message(app) == "beta/u2: deleted"
            assert ("beta", "u2") not in instances(api)
            assert "instance:beta/u2" not in app.rows

            # An agent's row has no instance to delete.
            await select(app, "agent:alpha")
            await pilot.press("delete")
            assert not isinstance(app.screen, ConfirmDelete)
            assert message(app).startswith("select an instance")
            await pilot.press("q")
        assert app.return_code == 0
    finally:
        daemon.stop()


def test_instance_json_lists_without_a_note(tmp_path: Path) -> None:
    done = run_cli("instance", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert done.stderr == ""
