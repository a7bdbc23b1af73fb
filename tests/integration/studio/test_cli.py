"""``python -m orchestrator studio`` as a process: its options, its exits, and its event stream
relayed from a real daemon (no browser: the browser tests are in test_browser.py)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.daemon import Daemon, run_cli
from tests.support.studio import (
    StudioProcess,
    agent_rows,
    example_daemon,
    send,
)


class RawStream:
    """``GET /api/stream`` on a plain socket, read as it comes (a deadline on every read)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.sock.sendall(
            f"GET /api/stream HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        self.seen = b""

    def read_until(self, token: bytes, deadline: float = 30) -> bytes:
        end = time.monotonic() + deadline
        while token not in self.seen:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, end - time.monotonic()))
            chunk = self.sock.recv(65536) if ready else b""
            if not chunk:
                raise AssertionError(f"no {token!r} in the stream: {self.seen.decode()}")
            self.seen += chunk
        return self.seen

    def read_to_end(self, deadline: float = 15) -> bytes:
        end = time.monotonic() + deadline
        while True:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"the stream stayed open: {self.seen.decode()[-400:]}")
            chunk = self.sock.recv(65536)
            if not chunk:
                return self.seen
            self.seen += chunk

    def close(self) -> None:
        self.sock.close()


def events_in(data: bytes) -> list[dict[str, object]]:
    """The wrapped runtime events (``data:`` lines of unnamed events) in ``data``."""
    found = []
    for block in data.decode(errors="replace").split("\n\n"):
        lines = block.splitlines()
        if any(line.startswith("event:") for line in lines):
            continue
        for line in lines:
            if line.startswith("data: {"):
                found.append(json.loads(line.removeprefix("data: ")))
    return found


def test_the_stream_relays_the_daemons_events_then_says_when_it_stops(tmp_path: Path) -> None:
    daemon = example_daemon(tmp_path)
    studio = StudioProcess(cwd=tmp_path)
    stream = RawStream(studio.url)
    try:
        stream.read_until(b'event: mode\ndata: {"live": true}')
        trace = send(tmp_path, "coordinator", "write s.txt streamed")["turn"]["traceId"]
        stream.read_until(b'"type": "turn.completed", "timestamp"')
        seen = [item for item in events_in(stream.seen) if item["event"].get("traceId") == trace]  # type: ignore[attr-defined]
        kinds = [item["event"]["type"] for item in seen]  # type: ignore[index]
        assert kinds[:3] == ["turn.started", "step.started", "tool.called"]
        assert {item["level"] for item in seen} == {"info"}
        assert all(isinstance(item["key"], str) for item in seen)
        assert "text.delta" not in kinds
        os.kill(daemon.process.pid, signal.SIGTERM)
        assert daemon.process.wait(timeout=30) == 0
        tail = stream.read_to_end()
        assert b'event: mode\ndata: {"live": false}' in tail  # then the stream ends
    finally:
        stream.close()
        assert studio.stop() == 0
        daemon.stop()


def test_sigterm_ends_open_streams_and_exits_0(tmp_path: Path) -> None:
    daemon = example_daemon(tmp_path)
    studio = StudioProcess(cwd=tmp_path)
    stream = RawStream(studio.url)
    try:
        stream.read_until(b'data: {"live": true}')
        # stop() waits a bounded time: a studio held open by the stream fails it.
        assert studio.stop(signal.SIGTERM) == 0
        stream.read_to_end()
    finally:
        stream.close()
        daemon.stop()


def test_without_a_daemon_the_stream_says_so_and_ends(tmp_path: Path) -> None:
    (tmp_path / ".goondan").mkdir()
    studio = StudioProcess("--state-dir", ".goondan", cwd=tmp_path)
    stream = RawStream(studio.url)
    try:
        data = stream.read_to_end()
        assert b"retry: 3000" in data
        assert b'event: mode\ndata: {"live": false}' in data
        with urllib.request.urlopen(studio.url + "api/agents", timeout=10) as answer:
            body = json.load(answer)
        assert body == {
            "mode": "offline",
            "swarm": None,
            "pid": None,
            "agents": [],
            "connections": [],
            "cluster": None,
            "pools": None,
            "edges": [],
            "pendingApprovals": 0,
        }
    finally:
        stream.close()
        assert studio.stop(signal.SIGINT) == 0


def test_a_missing_state_directory_or_a_taken_port_exits_1(tmp_path: Path) -> None:
    missing = run_cli("studio", "--state-dir", "nowhere", "--no-open", cwd=tmp_path)
    assert missing.returncode == 1
    assert "no state directory" in missing.stderr
    (tmp_path / ".goondan").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(
            "studio", "--state-dir", ".goondan", "--port", str(port), "--no-open", cwd=tmp_path
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    bad = run_cli("studio", "--state-dir", ".goondan", "--port", "70000", cwd=tmp_path)
    assert bad.returncode == 2


def test_a_host_off_loopback_is_warned_about_and_takes_any_host_name(tmp_path: Path) -> None:
    (tmp_path / ".goondan").mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "studio", "--state-dir", ".goondan", "--host", "0.0.0.0", "--port", "0", "--no-open"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "no URL printed"
        url = process.stdout.readline().decode().strip().removeprefix("studio: ")
        request = urllib.request.Request(url + "api/agents", headers={"Host": "studio.example"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    assert process.stderr is not None
    warning = process.stderr.read().decode()
    assert "warning: serving the studio on 0.0.0.0" in warning
    process.stdout.close()
    process.stderr.close()


def test_a_send_not_yet_done_counts_in_its_agents_queue(tmp_path: Path) -> None:
    """``sendsInFlight`` (daemon and studio alike): an ``agents__send`` stays in its target's
    queue until the target's Turn is done."""
    daemon = Daemon(tmp_path)
    daemon.wait_for("orchestrator started")
    studio = StudioProcess(cwd=tmp_path)
    gate = tmp_path / "gate"
    try:
        told = run_cli("send", "alpha", f"tell beta hold {gate}", cwd=tmp_path)
        assert told.returncode == 0, told.stderr
        row = agent_rows(tmp_path)["beta"]
        assert (row["sendsInFlight"], row["pendingDelegates"]) == (1, 0)
        with urllib.request.urlopen(studio.url + "api/agents", timeout=10) as answer:
            shown = {r["agent"]: r for r in json.load(answer)["agents"]}
        assert shown["beta"]["sendsInFlight"] == 1
        gate.touch()
        end = time.monotonic() + 30
        while agent_rows(tmp_path)["beta"]["sendsInFlight"]:
            assert time.monotonic() < end, "the send was never done"
    finally:
        assert studio.stop() == 0
        daemon.stop()


def test_after_the_fact_the_studio_shows_the_swarm_and_restarts_it_showed_live(
    tmp_path: Path,
) -> None:
    """The daemon's start is in its event log with its swarm's name; an operator's restart
    is counted from the exit and the new start it logged."""
    daemon = example_daemon(tmp_path)
    studio = StudioProcess(cwd=tmp_path)

    def shown() -> dict[str, object]:
        with urllib.request.urlopen(studio.url + "api/agents", timeout=10) as answer:
            body = json.load(answer)
        rows = {row["agent"]: row for row in body["agents"]}
        return {
            "mode": body["mode"],
            "swarm": body["swarm"],
            "restarts": rows["coordinator"]["restarts"],
        }

    try:
        restarted = run_cli("restart", "coordinator", cwd=tmp_path)
        assert restarted.returncode == 0, restarted.stderr
        live = shown()
        assert live == {"mode": "live", "swarm": "default", "restarts": 1}
        os.kill(daemon.process.pid, signal.SIGTERM)
        assert daemon.process.wait(timeout=30) == 0
        assert shown() == {**live, "mode": "offline"}
    finally:
        assert studio.stop() == 0
        daemon.stop()
