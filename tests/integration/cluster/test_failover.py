"""A cluster that outlives a host: agents placed by constraint move when their node is lost.

A real NATS server, a leader and three nodes, each its own process (examples/cluster with
its placement rewritten: ``front`` on the leader, ``middle`` and ``back`` on nodes that
qualify). A node is killed outright (its whole process group, SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.http.client import ApiUrl, DaemonApi, NoAnswer
from tests.support.cluster import (
    EXAMPLE,
    Cluster,
    Member,
    descendants,
    free_port,
    running_cluster,
    start_standby,
)

pytestmark = pytest.mark.timeout(180)
STUCK = {"instanceKey": "stuck", "timeoutMs": 150_000}
PLACED = "    middle: { node: node-a }\n    back: { node: node-b }\n"


def placed(placement: str) -> str:
    text = EXAMPLE.read_text()
    assert PLACED in text
    return text.replace(PLACED, placement)


def bundle_with(tmp_path: Path, placement: str) -> Path:
    path = tmp_path / "bundle" / "goondan.yaml"
    path.parent.mkdir()
    path.write_text(placed(placement))
    return path


def kill_and_wait_lost(cluster: Cluster, node: Member, name: str) -> None:
    """SIGKILL node ``name``'s whole share of the host; until the leader counts it lost."""
    assert cluster.leader is not None
    mark = cluster.leader.log.mark
    node.stop()
    cluster.leader.log.wait_for("node lost", node=name, since=mark)


def test_an_agent_moves_to_another_named_node_and_one_with_none_is_unavailable(
    tmp_path: Path,
) -> None:
    bundle = bundle_with(
        tmp_path, "    middle: { node: node-a }\n    back: { nodes: [node-b, node-c] }\n"
    )
    with running_cluster(tmp_path, bundle) as cluster:
        cluster.start_leader()
        node_a, node_b, node_c = (cluster.join(n) for n in ("node-a", "node-b", "node-c"))
        code, answer = cluster.request("front", "relay one")
        assert (code, answer["output"]) == (200, "front: middle: back got one")
        first = cluster.agent("back")
        assert first["node"] == "node-b"  # the first one named, while it is up

        kill_and_wait_lost(cluster, node_b, "node-b")

        code, answer = cluster.request("front", "relay two")
        assert (code, answer["output"]) == (200, "front: middle: back got two")
        moved = cluster.agent("back")
        assert moved["node"] == "node-c"
        assert moved["pid"] in descendants(node_c.pid)

        # middle may run on node-a only: refused outright, naming it, not left to time out.
        kill_and_wait_lost(cluster, node_a, "node-a")
        code, answer = cluster.request("middle", "relay three")
        assert code == 502, answer
        assert answer["error"]["code"] == "AGENT_UNAVAILABLE"
        assert "node 'node-a'" in answer["error"]["message"]
        code, answer = cluster.request("back", "relay four")
        assert (code, answer["output"]) == (200, "back got four")


def test_an_agent_placed_by_labels_moves_and_one_allowed_on_the_leader_runs_there(
    tmp_path: Path,
) -> None:
    bundle = bundle_with(
        tmp_path,
        "    middle: { labels: { zone: a }, allowLeader: true }\n"
        '    back: { labels: { gpu: "true" } }\n',
    )
    with running_cluster(tmp_path, bundle) as cluster:
        leader = cluster.start_leader()
        node_a = cluster.join("node-a", "--label", "zone=a")
        gpus = {name: cluster.join(name, "--label", "gpu=true") for name in ("node-b", "node-c")}
        code, answer = cluster.request("front", "relay one")
        assert (code, answer["output"]) == (200, "front: middle: back got one")
        assert cluster.agent("middle")["node"] == "node-a"
        first = cluster.agent("back")["node"]
        assert first in gpus
        nodes = {n["node"]: n for n in cluster.status()["cluster"]["nodes"]}
        assert nodes[first]["labels"] == {"gpu": "true"}
        assert nodes[first]["agents"] == ["back"]

        kill_and_wait_lost(cluster, gpus[first], first)
        kill_and_wait_lost(cluster, node_a, "node-a")

        code, answer = cluster.request("front", "relay two")
        assert (code, answer["output"]) == (200, "front: middle: back got two")
        [other] = set(gpus) - {first}
        assert cluster.agent("back")["node"] == other
        assert cluster.agent("back")["pid"] in descendants(gpus[other].pid)
        # No node with zone=a is left: middle runs on the leader, as its placement allows.
        middle = cluster.agent("middle")
        assert middle["node"] is None
        assert middle["pid"] in descendants(leader.pid)


def test_a_standby_leader_takes_over_and_keeps_the_nodes_agents_running(tmp_path: Path) -> None:
    first_port, second_port = free_port(), free_port()
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader("--listen", f"127.0.0.1:{first_port}")
        node_a, node_b = cluster.join("node-a"), cluster.join("node-b")
        code, answer = cluster.request("front", "relay one")
        assert (code, answer["output"]) == (200, "front: middle: back got one")
        before = {name: cluster.agent(name)["pid"] for name in ("middle", "back")}
        standby = start_standby(cluster, "--listen", f"127.0.0.1:{second_port}")
        assert standby.process.poll() is None  # waiting, not refused

        mark = node_b.log.mark
        leader.stop()  # kill -9: the leader, its fork server and its own agent (front)
        standby.log.wait_for("the cluster's leader is gone; this standby leads now", 60)
        taken = standby.log.wait_for("agent process taken over", agent="back")
        assert taken["pid"] == before["back"]
        standby.log.wait_for("orchestrator started", 60)

        # A client naming both leaders finds the one that answers.
        urls = f"http://127.0.0.1:{first_port},http://127.0.0.1:{second_port}"
        command = ["send", "middle", "relay two", "--api-url", urls, "--json"]
        sent = subprocess.run(
            [sys.executable, "-m", "orchestrator", *command],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["output"] == "middle: back got two"

        # Answered by the very processes the old leader started: none was restarted.
        api = DaemonApi(
            url=ApiUrl("127.0.0.1", first_port), standby=[ApiUrl("127.0.0.1", second_port)]
        )
        code, body = api.call("GET", "/v1/agents")
        assert code == 200, body
        rows = {row["agent"]: row for row in body["agents"]}
        assert {name: rows[name]["pid"] for name in before} == before
        assert rows["back"]["node"] == "node-b"
        assert before["middle"] in descendants(node_a.pid)
        assert before["back"] in descendants(node_b.pid)
        assert not [
            r for r in node_b.log.records[mark:] if r.get("event") == "agent process started"
        ]
        # The leader's own agent died with it; the new leader starts it again on first use.
        code, answer = api.call(
            "POST", "/v1/agents/front/requests", {"input": "relay three", "timeoutMs": 60_000}
        )
        assert (code, answer["output"]) == (200, "front: middle: back got three")


def test_without_a_standby_a_node_stops_its_agents_after_the_grace(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader()
        node_b = cluster.join("node-b")
        code, answer = cluster.request("back", "relay one")
        assert (code, answer["output"]) == (200, "back got one")
        pid = cluster.agent("back")["pid"]
        mark = node_b.log.mark

        leader.stop()

        kept = node_b.log.wait_for("leader silent; keeping its agents for a new leader", since=mark)
        assert kept["grace_seconds"] == 30  # 10 expiries of the 1 s heartbeat
        assert pid in descendants(node_b.pid)  # still running, for a standby to adopt
        node_b.log.wait_for("leader gone; stopping its agents", 60, since=mark)
        exited = node_b.log.wait_for("agent process exited", 30, agent="back", since=mark)
        assert exited["exitcode"] == 0  # it exited as on one host when its pipe closed
        assert node_b.process.poll() is None  # the node stays, for the next leader


def wait_event(cluster: Cluster, kind: str, deadline: float = 60, **fields: str) -> None:
    """Until the leader's event log holds a ``kind`` event with ``fields``: a bounded poll of
    a file the leader appends to."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        path = cluster.root / "leader" / ".goondan" / "runtime-events.jsonl"
        if path.exists() and any(
            e.get("type") == kind and all(e.get(k) == v for k, v in fields.items())
            for e in cluster.events()
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} {fields} within {deadline} s")


def test_a_delegate_waiting_at_the_dead_leader_is_answered_leader_lost_by_the_next(
    tmp_path: Path,
) -> None:
    second_port = free_port()
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader()
        cluster.join("node-a")
        cluster.join("node-b")
        standby = start_standby(cluster, "--listen", f"127.0.0.1:{second_port}")

        def ask_slow() -> None:
            with contextlib.suppress(NoAnswer):  # its leader dies under it
                cluster.api.call("POST", "/v1/agents/middle/requests", {**STUCK, "input": "slow"})

        # middle (node-a) asks back (node-b), which waits 120 s: middle's delegate waits at
        # the leader, the only one that knows where its answer goes.
        asking = threading.Thread(target=ask_slow, daemon=True)
        asking.start()
        wait_event(cluster, "tool.called", agentName="back")

        leader.stop()
        standby.log.wait_for("agent process taken over", 60, agent="middle")
        standby.log.wait_for("orchestrator started", 60)

        # The conversation's next Turn runs only once the stuck one ended: it ends at once,
        # its delegate answered LEADER_LOST by the new leader, not at its 150 s timeout.
        api = DaemonApi(url=ApiUrl("127.0.0.1", second_port), timeout=90)
        code, answer = api.call(
            "POST", "/v1/agents/middle/requests", {**STUCK, "input": "hello", "timeoutMs": 60_000}
        )
        assert (code, answer.get("output")) == (200, "middle here"), answer
        log = (tmp_path / "standby" / ".goondan" / "runtime-events.jsonl").read_text()
        events = [json.loads(line) for line in log.splitlines() if line.strip()]
        lost = [
            e for e in events if e.get("agentName") == "middle" and "LEADER_LOST" in json.dumps(e)
        ]
        assert lost, "middle's delegate was not answered LEADER_LOST"
        asking.join(30)
