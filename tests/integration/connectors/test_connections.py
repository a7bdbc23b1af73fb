"""Connections for real: a connector process, its events routed by ingress into agents' Turns,
crashes restarted with backoff, boot failures named in status, the end of its source."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.state_dir import list_instances
from orchestrator.status import ProcessStatus
from tests.support.connections import connection_yaml
from tests.support.daemon import Daemon, wait_gone
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def feed(tmp_path: Path) -> Path:
    path = tmp_path / "feed.fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
async def swarm(tmp_path: Path, feed: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path, extra=connection_yaml(tmp_path, feed)) as orchestrator:
        yield orchestrator


async def writer(feed: Path) -> Any:
    """The write end of the FIFO (opening waits for the connector to open its end)."""
    return await asyncio.to_thread(open, feed, "w", buffering=1)


async def next_event(subscription: Any, wanted: str, **fields: Any) -> dict[str, Any]:
    """The next live event of type ``wanted`` whose fields match."""
    async with asyncio.timeout(30):
        while True:
            event = await subscription.queue.get()
            if event.get("type") == wanted and all(event.get(k) == v for k, v in fields.items()):
                return dict(event)


async def test_events_are_routed_by_ingress_into_turns(swarm: Orchestrator, feed: Path) -> None:
    async with swarm.live.subscribe() as subscription:
        lines = await writer(feed)
        try:
            lines.write(
                json.dumps({"name": "to_beta", "text": "hello", "properties": {"chat": "7"}})
            )
            lines.write("\n")
            routed = await next_event(subscription, "connector.event", connection="line")
            assert (routed["agentName"], routed["instanceKey"], routed["rule"]) == (
                "beta",
                "chat:7",
                0,
            )
            done = await next_event(subscription, "turn.completed", agentName="beta")
            assert done["instanceKey"] == "chat:7"
            # No rule matches: the entry agent, under the event's own key.
            lines.write(json.dumps({"name": "chatter", "text": "psst", "key": "k1"}) + "\n")
            other = await next_event(subscription, "connector.event", event="chatter")
            assert (other["agentName"], other["instanceKey"], other["rule"]) == (
                "alpha",
                "k1",
                None,
            )
            await next_event(subscription, "turn.completed", agentName="alpha")
        finally:
            lines.close()
    text = conversation_text(swarm.state_dir, "beta", "chat:7")
    assert "beta got: hello" in text
    assert '"connection_name":"line"' in text  # the Turn knows where it came from
    assert '"sourceKind":"connector"' in text
    rows = {row["connection"]: row for row in swarm.connections.status()}
    assert rows["line"]["connector"] == "feed"


async def test_a_connector_crash_is_restarted_with_backoff(swarm: Orchestrator, feed: Path) -> None:
    handle = swarm.connections.supervisor.handle("line")
    first_pid = handle.pid
    async with swarm.live.subscribe() as subscription:
        lines = await writer(feed)
        lines.write(json.dumps({"crash": True}) + "\n")
        lines.close()
        exited = await next_event(subscription, "process.exited", agentName="connection:line")
        assert exited["expected"] is False
        await next_event(subscription, "process.ready", agentName="connection:line")
    assert handle.crashes == 1
    assert handle.restarts == 1
    assert handle.pid != first_pid
    assert handle.status is ProcessStatus.IDLE


async def test_a_connector_that_cannot_start_is_named_in_status(
    tmp_path: Path, feed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEED_TOKEN_UNSET", raising=False)
    extra = connection_yaml(tmp_path, feed).replace(
        "  config:\n", "  secrets:\n    token: {valueFrom: {env: FEED_TOKEN_UNSET}}\n  config:\n"
    )
    async with running_swarm(tmp_path, extra=extra) as swarm:
        supervisor = swarm.connections.supervisor
        async with asyncio.timeout(30):
            await supervisor.wait_until(
                lambda: supervisor.handle("line").status is ProcessStatus.CRASH_LOOP_BACK_OFF
            )
        [row] = swarm.connections.status()
        assert "FEED_TOKEN_UNSET is not set" in row["bootError"]
        assert row["nextStartInSeconds"] > 0
        # The agents are unaffected.
        assert (await swarm.request("hi")).output == "alpha got: hi"


def conversation_text(state_dir: Path, agent: str, key: str) -> str:
    [row] = [r for r in list_instances(state_dir, agent) if r["instanceKey"] == key]
    return "".join(p.read_text() for p in Path(row["directory"]).glob("conversation/*.jsonl"))


def connector_pids(daemon: Daemon) -> set[int]:
    return {
        int(e["pid"])  # type: ignore[call-overload]
        for e in daemon.events
        if e.get("event") == "agent process spawned" and str(e.get("agent")) == "line"
    }


def test_the_end_of_its_source_stops_the_swarm_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    feed = tmp_path / "feed.fifo"
    os.mkfifo(feed)
    daemon = Daemon(tmp_path, extra=connection_yaml(tmp_path, feed))
    try:
        daemon.wait_for("agent ready")
        with open(feed, "w") as lines:  # opens once the connector has opened its end
            lines.write(json.dumps({"name": "to_beta", "text": "last words"}) + "\n")
        # End of input: the event in flight is answered, then the daemon stops by itself.
        assert daemon.process.wait(timeout=60) == 0
        daemon.wait_for("orchestrator stopped")
    finally:
        daemon.stop()
    pids = connector_pids(daemon)
    assert pids
    assert all(wait_gone(pid) for pid in pids)
    text = conversation_text(tmp_path / ".goondan", "beta", "feed:default")
    assert "beta got: last words" in text


CLI_CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: console}
spec:
  connectorRef: {kind: Connector, name: cli, package: "@goondan/base"}
  ingress:
    rules:
      - route: {agentRef: Agent/beta, instanceKey: console}
"""


def test_the_cli_connector_reads_the_daemons_standard_input(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.swarm import write_swarm

    write_swarm(tmp_path, extra=CLI_CONNECTION)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # Two lines, then the end of input: both answered, then the swarm stops by itself.
        _, stderr = daemon.communicate('first line\n\n{"text": "second line"}\n', timeout=60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 0, stderr[-2000:]
    text = conversation_text(tmp_path / ".goondan", "beta", "console")
    assert "beta got: first line" in text
    assert "beta got: second line" in text


async def test_watch_adds_reroutes_refuses_and_removes_a_connection(
    tmp_path: Path, feed: Path
) -> None:
    from orchestrator.watch import Watcher
    from tests.support.swarm import write_swarm

    path = write_swarm(tmp_path)
    connection = connection_yaml(tmp_path, feed)
    async with running_swarm(tmp_path) as swarm:
        watcher = Watcher(swarm, interval=0.1)
        swarm.start_soon(watcher.run(), "watch")

        async def edited(text: str) -> dict[str, Any]:
            path.write_text(text)
            async with asyncio.timeout(60):
                return await watcher.outcomes.get()

        base = path.read_text()
        added = await edited(base + "---\n" + connection)
        assert added == {"valid": True, "errors": [], "restarted": ["connection:line"]}
        async with swarm.live.subscribe() as subscription:
            lines = await writer(feed)
            lines.write(json.dumps({"name": "to_beta", "text": "one"}) + "\n")
            lines.flush()
            routed = await next_event(subscription, "connector.event", connection="line")
            assert routed["agentName"] == "beta"
            # Only the routing changes: the connector keeps running, events go to alpha now.
            pid = swarm.connections.supervisor.handle("line").pid
            rerouted = await edited(
                base + "---\n" + connection.replace("Agent/beta", "Agent/alpha")
            )
            assert rerouted == {"valid": True, "errors": [], "restarted": []}
            assert swarm.connections.supervisor.handle("line").pid == pid
            lines.write(json.dumps({"name": "to_beta", "text": "two"}) + "\n")
            lines.flush()
            routed = await next_event(subscription, "connector.event", connection="line")
            assert routed["agentName"] == "alpha"
        refused = await edited(base + "---\n" + connection.replace("Agent/beta", "Agent/ghost"))
        assert refused["valid"] is False
        # Removed while it still reads its open feed: stopped, not finished.
        removed = await edited(base)
        assert removed["valid"] is True
        assert "line" not in swarm.connections.supervisor.names()
        assert pid is not None
        assert wait_gone(pid)
        lines.close()
        assert not swarm.operations.stopping
