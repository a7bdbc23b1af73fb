"""The HTTP connectors refuse a replay even after their process is killed and restarted: the
deliveries they took are on disk in the Connection's state directory, not in the process."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx2
import pytest

from orchestrator.state_dir import list_instances
from tests.support.daemon import Daemon, wait_gone
from tests.support.http_connector import hmac_hex, signed_webhook, webhook_connection

pytestmark = pytest.mark.timeout(120)

SECRET = "replay-test-secret-5d1c"
CONNECTIONS = (
    webhook_connection("REPLAY_TEST_SECRET")
    + """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: repo}
spec:
  connectorRef: {kind: Connector, name: github, package: "@goondan/base"}
  config:
    GITHUB_WEBHOOK_PORT: {value: "0"}
  secrets:
    signingSecret: {valueFrom: {env: REPLAY_TEST_SECRET}}
  ingress:
    rules:
      - route: {agentRef: Agent/beta, instanceKey: repo}
"""
)


def webhook_request(text: str) -> tuple[bytes, dict[str, str]]:
    return signed_webhook(SECRET, text)


def github_request(title: str, delivery: str) -> tuple[bytes, dict[str, str]]:
    payload = {
        "action": "opened",
        "issue": {"number": 1, "title": title},
        "repository": {"full_name": "octo/hello"},
    }
    body = json.dumps(payload).encode()
    return body, {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + hmac_hex(SECRET, body),
        "Content-Type": "application/json",
    }


def post(port: object, body: bytes, headers: dict[str, str]) -> httpx2.Response:
    with httpx2.Client(timeout=30) as client:
        return client.post(f"http://127.0.0.1:{port}/", content=body, headers=headers)


def listening(daemon: Daemon, name: str, run: int) -> dict[str, object]:
    """The ``connector listening`` line of the ``run``-th start (from 1) of ``name``'s
    connector, reading the log until it comes (other lines read meanwhile are kept)."""
    process = f"connector:{name}"
    while True:
        lines = [
            e
            for e in daemon.events
            if e.get("event") == "connector listening" and e.get("process") == process
        ]
        if len(lines) >= run:
            return lines[run - 1]
        daemon.wait_for("connector listening", process=process)


def wait_turns(daemon: Daemon, counts: dict[str, int]) -> None:
    """Read the log until beta has finished ``counts[key]`` Turns of each instance key."""
    while True:
        done = [
            e.get("instance_key")
            for e in daemon.events
            if e.get("event") == "turn finished" and e.get("process") == "agent:beta"
        ]
        if all(done.count(key) >= count for key, count in counts.items()):
            return
        daemon.wait_for("turn finished", process="agent:beta")


def user_messages(state_dir: Path, key: str) -> list[str]:
    """What beta's instance ``key`` was told, each message once (a message is in the events
    file and, once folded, in the base too)."""
    [row] = [r for r in list_instances(state_dir, "beta") if r["instanceKey"] == key]
    told: dict[str, str] = {}
    for path in Path(row["directory"]).glob("conversation/*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            message = record.get("message", record)
            if message.get("role") == "user":
                told[message["id"]] = message["content"]
    return sorted(told.values())


def test_a_replay_after_the_connector_is_killed_is_still_refused(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, extra=CONNECTIONS, env={"REPLAY_TEST_SECRET": SECRET})
    try:
        first = {name: listening(daemon, name, 1) for name in ("hooks", "repo")}
        hook = webhook_request("deploy finished")
        issue = github_request("Crash on start", "guid-1")
        assert post(first["hooks"]["port"], *hook).status_code == 202
        assert post(first["repo"]["port"], *issue).status_code == 202
        wait_turns(daemon, {"hooks": 1, "repo": 1})

        for name in ("hooks", "repo"):
            pid = int(first[name]["pid"])  # type: ignore[call-overload]
            os.kill(pid, signal.SIGKILL)
            assert wait_gone(pid)
        again = {name: listening(daemon, name, 2) for name in ("hooks", "repo")}
        assert again["hooks"]["pid"] != first["hooks"]["pid"]

        replay = post(again["hooks"]["port"], *hook)
        assert (replay.status_code, replay.json()) == (200, {"ok": True, "duplicate": True})
        assert post(again["repo"]["port"], *issue).status_code == 204
        relabelled = github_request("Crash on start", "guid-2")  # a copy with a new id
        assert post(again["repo"]["port"], *relabelled).status_code == 204

        assert post(again["hooks"]["port"], *webhook_request("then this")).status_code == 202
        fresh = github_request("Another one", "guid-3")
        assert post(again["repo"]["port"], *fresh).status_code == 202
        # Each instance runs its Turns in order: a copy taken would have been the second one.
        wait_turns(daemon, {"hooks": 2, "repo": 2})
    finally:
        daemon.stop()
    state = tmp_path / ".goondan"
    assert user_messages(state, "hooks") == ["deploy finished", "then this"]
    assert user_messages(state, "repo") == [
        "issue #1 opened: Another one",
        "issue #1 opened: Crash on start",
    ]
    assert (state / "connections" / "hooks" / "deliveries.json").is_file()
    assert (state / "connections" / "repo" / "deliveries.json").is_file()
