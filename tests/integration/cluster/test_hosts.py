"""A swarm across hosts: a real NATS server, a leader and two nodes, each its own process and
state directory (examples/cluster: ``front`` on the leader, ``middle`` on node-a, ``back`` on
node-b)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    EXPIRY,
    Cluster,
    Member,
    descendants,
    make_tls,
    running_cluster,
)
from tests.support.daemon import wait_gone

pytestmark = pytest.mark.timeout(240)  # members may take STARTUP_DEADLINE to start


def start_all(cluster: Cluster) -> tuple[Member, Member, Member]:
    leader = cluster.start_leader()
    return leader, cluster.join("node-a"), cluster.join("node-b")


def wait_status(
    cluster: Cluster, agent: str, status: str, deadline: float = 30, **fields: object
) -> dict[str, Any]:
    """Until the leader's status shows ``agent`` in ``status`` (and with ``fields``): a
    bounded poll of its table."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        row = cluster.agent(agent)
        if row["status"] == status and all(row.get(k) == v for k, v in fields.items()):
            return row
        time.sleep(0.02)
    raise AssertionError(f"{agent} never {status} {fields}: {cluster.agent(agent)}")


def test_a_handoff_crosses_both_nodes_under_one_trace_and_status_names_each_node(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path) as cluster:
        _, node_a, node_b = start_all(cluster)

        code, answer = cluster.request("front", "relay hello")

        assert code == 200, answer
        assert answer["output"] == "front: middle: back got hello"
        rows = {row["agent"]: row for row in cluster.status()["agents"]}
        assert rows["front"]["node"] is None
        assert rows["middle"]["node"] == "node-a"
        assert rows["back"]["node"] == "node-b"
        # Each remote agent is a process of its own node, on this machine.
        assert rows["middle"]["pid"] in descendants(node_a.pid)
        assert rows["back"]["pid"] in descendants(node_b.pid)
        trace = answer["turn"]["traceId"]
        finished = {
            e["agentName"]
            for e in cluster.events()
            if e.get("type") == "turn.completed" and e.get("traceId") == trace
        }
        assert finished == {"front", "middle", "back"}
        spawned = {
            e["agentName"]: e.get("node")
            for e in cluster.events()
            if e.get("type") == "process.spawned"
        }
        assert spawned == {"front": None, "middle": "node-a", "back": "node-b"}
        nodes = {n["node"]: n for n in cluster.status()["cluster"]["nodes"]}
        assert nodes["node-a"]["up"]
        assert nodes["node-a"]["sameBundle"]
        assert nodes["node-b"]["agents"] == ["back"]

        table = subprocess.run(
            [sys.executable, "-m", "orchestrator", "status", "-c", "goondan.yaml"],
            cwd=tmp_path / "leader",
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        lines = {line.split()[1]: line.split()[0] for line in table.splitlines() if "idle" in line}
        assert lines == {"front": "(leader)", "middle": "node-a", "back": "node-b"}


def test_an_agent_killed_on_its_node_is_restarted_on_that_node(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        _, _, node_b = start_all(cluster)
        code, answer = cluster.request("back", "relay one")
        assert code == 200, answer
        first = cluster.agent("back")
        mark = node_b.log.mark

        os.kill(first["pid"], signal.SIGKILL)

        node_b.log.wait_for("agent process exited", agent="back", exitcode=-9, since=mark)
        restarted = node_b.log.wait_for("agent process started", agent="back", since=mark)
        row = wait_status(cluster, "back", "idle", pid=restarted["pid"])
        assert row["pid"] != first["pid"]
        assert row["node"] == "node-b"
        assert row["crashes"] == 1
        assert row["lastExit"]["signal"] == "SIGKILL"
        assert row["pid"] in descendants(node_b.pid)
        code, answer = cluster.request("back", "relay two")
        assert (code, answer["output"]) == (200, "back got two")


def test_a_killed_node_fails_its_callers_at_once_then_refuses_until_it_is_back(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path) as cluster:
        start_all(cluster)
        with ThreadPoolExecutor(1) as pool:
            parked = pool.submit(cluster.request, "back", "slow please")
            wait_status(cluster, "back", "processing")
            node_b = next(m for m in cluster.members if "node-b" in m.args)

            node_b.stop()  # the whole host's share: node, fork server and agent, SIGKILL
            code, answer = parked.result(timeout=EXPIRY + 30)

        # Failed by the node's loss, not by a request timeout: the request is carried over the
        # agent's restart, which no node can do now (unavailable, naming the node).
        assert code == 502, answer
        assert answer["error"]["code"] == "AGENT_UNAVAILABLE"
        assert "node-b" in answer["error"]["message"]
        row = cluster.agent("back")
        assert row["lastExit"]["reason"] == "exit code 69 (its cluster node was lost)"

        # Refused outright (unavailable, naming the node), not left to time out.
        code, answer = cluster.request("back", "relay anyone")
        assert code == 502, answer
        assert answer["error"]["code"] == "AGENT_UNAVAILABLE"
        assert "node-b" in answer["error"]["message"]
        cluster.wait_node("node-b", up=False)

        cluster.join("node-b")
        code, answer = cluster.request("back", "relay again")
        assert (code, answer["output"]) == (200, "back got again")
        assert cluster.agent("back")["node"] == "node-b"


def test_a_node_with_another_bundle_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        cluster.start_leader()
        cluster.join("node-a")
        skewed = cluster.bundle_text.replace("back got {text}", "back v2 got {text}")
        node_b = cluster.join("node-b", bundle_text=skewed)
        node_b.log.wait_for("the leader runs a different bundle; this node will refuse its agents")

        nodes = {n["node"]: n for n in cluster.status()["cluster"]["nodes"]}
        assert nodes["node-b"]["up"] is True
        assert nodes["node-b"]["sameBundle"] is False
        code, answer = cluster.request("back", "relay hello")
        assert code == 502, answer
        assert answer["error"]["code"] == "AGENT_UNAVAILABLE"
        assert "different bundle" in answer["error"]["message"]
        code, answer = cluster.request("front", "relay hello")
        assert code == 200
        assert "failed" in answer["output"]
        assert "different bundle" in answer["output"]
        assert cluster.agent("back")["pid"] is None

        # The node refuses on its own too, whoever asks.
        refusal = _ask_node(cluster, "node-b", {"agent": "back", "worker": "w1"})
        assert refusal["ok"] is False
        assert "different bundle" in refusal["message"]


def _ask_node(cluster: Cluster, node: str, request: dict[str, object]) -> dict[str, object]:
    """Ask ``node`` to start an agent, as another user of the cluster's NATS account."""
    import asyncio

    import nats

    async def ask() -> dict[str, object]:
        password = cluster.passwords["stranger"]
        client = await nats.connect(cluster.nats.url, user="stranger", password=password)
        try:
            body = {"fingerprint": "0" * 64, "leader": "someone", **request}
            reply = await client.request(
                f"goondan.relay.node.{node}.start", json.dumps(body).encode(), timeout=10
            )
            result: dict[str, object] = json.loads(reply.data)
            return result
        finally:
            await client.close()

    return asyncio.run(ask())


def test_sigterm_of_the_leader_stops_every_remote_agent(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        leader, node_a, node_b = start_all(cluster)
        assert cluster.request("front", "relay hello")[0] == 200
        remote = {cluster.agent("middle")["pid"], cluster.agent("back")["pid"]}
        assert remote <= descendants(node_a.pid) | descendants(node_b.pid)

        leader.signal(signal.SIGTERM)

        assert leader.wait(60) == 0  # bounded; a loaded machine drains slowly
        for pid in remote:
            assert wait_gone(pid, 15), f"agent {pid} outlived the leader"
        for node in (node_a, node_b):
            assert node.process.poll() is None  # nodes stay, ready for the next leader
            assert not remote & descendants(node.pid)
        # Each drained at the leader's request and exited cleanly.
        assert node_a.log.wait_for("agent process exited", agent="middle")["exitcode"] == 0
        assert node_b.log.wait_for("agent process exited", agent="back")["exitcode"] == 0


def test_a_second_leader_waits_as_standby_and_serves_nothing_meanwhile(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        cluster.start_leader()
        second = Member(
            ["run", "goondan.yaml", *cluster.cluster_args()],
            cluster.directory("second"),
            cluster.member_env("second"),
        )
        cluster.members.append(second)
        second.log.wait_for("standby: the cluster has a leader; taking over if it goes", 60)
        assert second.process.poll() is None
        assert not (cluster.root / "second" / ".goondan" / "api.sock").exists()
        code, answer = cluster.request("front", "hello")  # the leader still leads
        assert (code, answer["output"]) == (200, "front here. Try: relay hello")


def test_credentials_are_required_and_never_shown(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        cluster.start_leader()
        secret = cluster.passwords["node-a"]
        wrong = "wrong-Pass-17"
        refused = cluster.start_node("node-a", env={"GOONDAN_NATS_PASSWORD": wrong})
        assert refused.wait(30) == 6  # a credential refused
        said = refused.log.drain()
        assert b"Authorization Violation" in said
        assert wrong.encode() not in said
        assert secret.encode() not in said

        cluster.join("node-a")
        cluster.join("node-b")
        code, answer = cluster.request("front", "relay hello")
        assert (code, answer["output"]) == (200, "front: middle: back got hello")
        for member in cluster.members:
            for hidden in [*cluster.passwords.values(), cluster.cluster_key]:
                assert hidden.encode() not in member.log.data


def test_frames_larger_than_the_servers_max_payload_cross_whole(tmp_path: Path) -> None:
    with running_cluster(tmp_path, nats_config="max_payload: 65536\n") as cluster:
        start_all(cluster)
        text = "".join(f"{i:07d}," for i in range(40_000))  # 320 kB: five messages a frame

        code, answer = cluster.request("front", f"relay {text}")

        assert code == 200, str(answer)[:300]
        assert answer["output"] == f"front: middle: back got {text}"


def test_the_cluster_outlives_a_restart_of_its_nats_server(tmp_path: Path) -> None:
    # A slower heartbeat (expiry 6 s): the quick restart must fit within it on a busy machine.
    with running_cluster(tmp_path, heartbeat=2.0) as cluster:
        leader, node_a, _ = start_all(cluster)
        assert cluster.request("front", "relay one")[0] == 200
        before = {name: cluster.agent(name)["pid"] for name in ("middle", "back")}

        # Back before the heartbeat expiry: nothing is lost, no agent restarts.
        mark = node_a.log.mark
        cluster.nats.stop()
        cluster.nats.start()
        node_a.log.wait_for("cluster membership resumed", since=mark)
        code, answer = cluster.request("front", "relay two")
        assert (code, answer["output"]) == (200, "front: middle: back got two")
        assert {name: cluster.agent(name)["pid"] for name in before} == before

        # Away past the expiry: the nodes count as lost and drop their agents; once the
        # server is back, the members join again and the agents start again.
        mark = leader.log.mark
        cluster.nats.stop()
        leader.log.wait_for("node lost", node="node-a", since=mark)
        leader.log.wait_for("node lost", node="node-b", since=mark)
        cluster.nats.start()
        leader.log.wait_for("cluster membership resumed", since=mark)
        cluster.wait_node("node-a", up=True)
        cluster.wait_node("node-b", up=True)
        code, answer = cluster.request("front", "relay three")
        assert (code, answer["output"]) == (200, "front: middle: back got three")
        assert cluster.agent("back")["pid"] != before["back"]


def test_a_cluster_over_tls_refuses_a_member_that_cannot_verify_the_server(
    tmp_path: Path,
) -> None:
    ca, cert, key = make_tls(tmp_path / "tls")
    tls = f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
    with running_cluster(
        tmp_path, nats_config=tls, scheme="tls", member_args=["--cluster-tls-ca", str(ca)]
    ) as cluster:
        cluster.start_leader()
        cluster.join("node-a")
        cluster.join("node-b")
        code, answer = cluster.request("front", "relay hello")
        assert (code, answer["output"]) == (200, "front: middle: back got hello")

        cluster.member_args = []  # no CA: the server's certificate cannot be verified
        stranger = cluster.start_node("node-c")
        assert stranger.wait(30) == 6  # the server's certificate is not trusted
        assert b"CERTIFICATE_VERIFY_FAILED" in stranger.log.drain()


def test_an_edited_placement_moves_the_agent_once_its_node_runs_the_new_bundle(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader("--watch")
        node_a, node_b = cluster.join("node-a"), cluster.join("node-b")
        code, answer = cluster.request("back", "relay one")
        assert code == 200, answer
        assert cluster.agent("back")["node"] == "node-b"

        moved = cluster.bundle_text.replace("back: { node: node-b }", "back: { node: node-a }")
        assert moved != cluster.bundle_text
        mark = leader.log.mark
        (tmp_path / "leader" / "goondan.yaml").write_text(moved)
        applied = leader.log.wait_for("configuration change applied", since=mark)
        assert "back" in applied["restarted"]
        # node-a still runs the old bundle: the leader refuses to place anything there.
        code, answer = cluster.request("back", "relay two")
        assert code == 502
        assert "different bundle" in answer["error"]["message"]

        node_a.stop()
        node_b.stop()
        cluster.join("node-a", bundle_text=moved)
        code, answer = cluster.request("back", "relay three")
        assert (code, answer["output"]) == (200, "back got three")
        assert cluster.agent("back")["node"] == "node-a"
