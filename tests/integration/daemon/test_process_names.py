"""Every process of a running swarm is named in ``ps`` and ``top``: read from ``/proc`` of the
real daemon, its agent and its connector."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.connections import connection_yaml
from tests.support.daemon import Daemon

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def names(pid: int) -> tuple[str, str]:
    """``(ps's command line, top's short name)`` of ``pid``."""
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    args = " ".join(part.decode() for part in cmdline.split(b"\0") if part)
    return args, Path(f"/proc/{pid}/comm").read_text().strip()


def ready(daemon: Daemon, agent: str) -> int:
    """The pid of ``agent`` (or a connection) once the daemon says it is ready."""
    while True:
        record = daemon.wait_for("agent ready")
        if record.get("agent") == agent:
            return int(str(record["pid"]))


def test_the_daemon_its_agents_and_connectors_are_named(tmp_path: Path) -> None:
    feed = tmp_path / "feed.fifo"
    os.mkfifo(feed)
    daemon = Daemon(tmp_path, extra=connection_yaml(tmp_path, feed))
    try:
        agent = ready(daemon, "alpha")
        connector = ready(daemon, "line")
        assert names(daemon.process.pid) == ("goondan daemon default", "daemon:default")
        assert names(agent) == ("goondan agent alpha", "agent:alpha")
        assert names(connector) == ("goondan connector line", "connector:line")
    finally:
        daemon.stop()
