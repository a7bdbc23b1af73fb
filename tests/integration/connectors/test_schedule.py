"""The ``schedule`` connector for real: its process fires every-second events that ingress
routes into an agent's Turns; a fire time missed while the daemon was down is caught up once,
and after the connector is killed and restarted it is not caught up again."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.state_dir import list_instances
from tests.support.daemon import Daemon, wait_gone

pytestmark = pytest.mark.timeout(120)

CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: clock}
spec:
  connectorRef: {kind: Connector, name: schedule, package: "@goondan/base"}
  config:
    schedules:
      value: |
        - name: tick
          cron: "* * * * * *"
          text: tick
          instanceKey: ticks
        - name: report
          cron: "MINUTE * * * *"
          timezone: Asia/Seoul
          missed: once
          text: write the report
  ingress:
    rules:
      - match: {event: schedule_fired, properties: {schedule: report}}
        route: {agentRef: Agent/beta}
      - match: {event: schedule_fired}
        route: {agentRef: Agent/alpha}
"""
PROCESS = "connector:clock"


def write_state(state_dir: Path, through: datetime) -> None:
    """The connection's state as the connector writes it: ``report`` last dealt with its fire
    times at ``through``."""
    directory = state_dir / "connections" / "clock"
    directory.mkdir(parents=True)
    entries = {"report": {"through": through.isoformat().replace("+00:00", "Z")}}
    data = {"formatVersion": 1, "savedAt": "2026-01-01T00:00:00Z", "schedules": entries}
    (directory / "schedule-state.json").write_text(json.dumps(data))


def logged(daemon: Daemon, event: str, count: int, **fields: object) -> list[dict[str, object]]:
    """The connector's first ``count`` log lines ``event`` with ``fields``, reading until
    they are there."""
    while True:
        found = [
            e
            for e in daemon.events
            if e.get("event") == event
            and e.get("process") == PROCESS
            and all(e.get(k) == v for k, v in fields.items())
        ]
        if len(found) >= count:
            return found[:count]
        daemon.wait_for(event, process=PROCESS)


def turns(daemon: Daemon, agent: str, key: str, count: int) -> None:
    while True:
        done = [
            e
            for e in daemon.events
            if e.get("event") == "turn finished"
            and e.get("process") == f"agent:{agent}"
            and e.get("instance_key") == key
        ]
        if len(done) >= count:
            return
        daemon.wait_for("turn finished", process=f"agent:{agent}")


def told(state_dir: Path, agent: str, key: str) -> list[str]:
    """What ``agent``'s instance ``key`` was told, each message once."""
    [row] = [r for r in list_instances(state_dir, agent) if r["instanceKey"] == key]
    messages: dict[str, str] = {}
    for path in Path(row["directory"]).glob("conversation/*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            message = record.get("message", record)
            if message.get("role") == "user":
                messages[message["id"]] = message["content"]
    return sorted(messages.values())


def test_fires_route_turns_and_a_missed_fire_is_caught_up_once(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    # An hourly report half an hour away: nothing fires during the test but the catch-up.
    extra = CONNECTION.replace("MINUTE", str((now.minute + 30) % 60))
    state = tmp_path / ".goondan"
    write_state(state, now - timedelta(hours=3, minutes=1))  # down for three fire times
    daemon = Daemon(tmp_path, extra=extra)
    try:
        [caught_up] = logged(daemon, "schedule fired", 1, schedule="report")
        assert caught_up["catch_up"] is True
        turns(daemon, "beta", "schedule:report", 1)
        turns(daemon, "alpha", "ticks", 2)
        [armed] = logged(daemon, "schedule armed", 1, schedule="report")
        first_pid = int(armed["pid"])  # type: ignore[call-overload]

        os.kill(first_pid, signal.SIGKILL)
        assert wait_gone(first_pid)
        _, again = logged(daemon, "schedule armed", 2, schedule="report")
        assert again["pid"] != first_pid
        # The restarted connector read the state the first one wrote: nothing to catch up.
        assert len(logged(daemon, "schedule fired", 1, schedule="report")) == 1
        assert not [
            e
            for e in daemon.events
            if e.get("event") == "schedule fired"
            and e.get("schedule") == "report"
            and e.get("pid") == again["pid"]
        ]
        ticks_before = len(logged(daemon, "schedule fired", 1, schedule="tick", pid=again["pid"]))
        assert ticks_before == 1  # and the every-second schedule goes on
    finally:
        daemon.stop()
    assert told(state, "beta", "schedule:report") == ["write the report"]
    assert set(told(state, "alpha", "ticks")) == {"tick"}
    stored = json.loads((state / "connections" / "clock" / "schedule-state.json").read_text())
    assert set(stored["schedules"]) == {"tick", "report"}
