"""``Type=notify``: the daemon tells systemd when it serves and when it begins to stop."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from orchestrator.http.client import DaemonApi
from orchestrator.systemd import notify
from tests.support.daemon import Daemon

ROOT = Path(__file__).resolve().parents[3]


def receive(sock: socket.socket, deadline: float = 60) -> dict[str, str]:
    sock.settimeout(deadline)
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines())


def test_ready_once_the_entry_agent_serves_and_stopping_at_sigterm(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text((ROOT / "goondan.yaml.example").read_text())
    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        daemon = Daemon(tmp_path, bundle="goondan.yaml", env={"NOTIFY_SOCKET": address})
        try:
            ready = receive(sock)
            assert ready["READY"] == "1"
            assert ready["STATUS"] == "serving swarm default"
            # Ready means ready: the entry agent already answers.
            code, body = DaemonApi(tmp_path / ".goondan").call("GET", "/v1/agents")
            assert code == 200
            rows = {row["agent"]: row for row in body["agents"]}
            assert rows["coordinator"]["status"] == "idle"

            daemon.process.send_signal(signal.SIGTERM)
            stopping = receive(sock)
            assert stopping["STOPPING"] == "1"
            assert daemon.process.wait(timeout=60) == 0
        finally:
            daemon.stop()


def test_abstract_sockets_and_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"goondan-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1", "STATUS=x") is True
        assert receive(sock, 5) == {"READY": "1", "STATUS": "x"}
    monkeypatch.setenv("NOTIFY_SOCKET", "@nobody-listens-here")
    assert notify("READY=1") is False  # logged, not raised
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert notify("READY=1") is False
