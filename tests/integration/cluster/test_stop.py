"""Every kind of cluster member stops on SIGTERM, at once and cleanly (exit 0).

``systemctl stop`` sends SIGTERM and waits; a member that ignores it is SIGKILLed after
``TimeoutStopSec``. Each member here is a real process against a real NATS server: the
leader, a standby waiting for it, a node that joined, and a node still waiting for a leader
to make the cluster's bucket. Each is stopped in a state where it waits on the cluster, and
must exit within a bound far shorter than any wait of the cluster's own.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.cluster import Member, running_cluster, start_standby

pytestmark = pytest.mark.timeout(180)

STOP_DEADLINE = 30.0
"""How long a member may take to exit after SIGTERM. Generous for a busy machine; without the
fix a standby never exits by itself (it waits for the leader to go, then leads)."""


def terminate(member: Member, stopped_event: str) -> None:
    """SIGTERM ``member``; it must log ``stopping`` then ``stopped_event`` and exit 0."""
    mark = member.log.mark
    member.signal(signal.SIGTERM)
    member.log.wait_for("stopping", STOP_DEADLINE, since=mark, signal="SIGTERM")
    member.log.wait_for(stopped_event, STOP_DEADLINE, since=mark)
    assert member.wait(STOP_DEADLINE) == 0, member.log.drain()[-3000:]


def test_each_member_stops_on_sigterm(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader()
        node = cluster.join("node-b")
        code, answer = cluster.request("back", "relay one")
        assert (code, answer["output"]) == (200, "back got one")
        standby = start_standby(cluster)

        terminate(standby, "standby stopped before leading")
        standby.log.wait_for("orchestrator stopped", STOP_DEADLINE)
        assert not any(
            r.get("event") == "the cluster's leader is gone; this standby leads now"
            for r in standby.log.records
        )
        # The leader was not disturbed by its standby leaving.
        assert leader.process.poll() is None
        code, answer = cluster.request("back", "relay two")
        assert (code, answer["output"]) == (200, "back got two")

        terminate(node, "node stopped")
        terminate(leader, "orchestrator stopped")


def test_a_node_waiting_for_a_leader_stops_on_sigterm(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        node = cluster.start_node("node-a")
        node.log.wait_for("waiting for the cluster's leader to start", 60)
        terminate(node, "node stopped before joining")
