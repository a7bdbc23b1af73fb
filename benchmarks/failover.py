"""How long a cluster takes to serve again after losing a node, and after losing its leader.

A real ``nats-server -js`` on loopback, a leader, a standby and two nodes, each its own process
group (the ``cluster`` test machinery). ``back`` may run on either node; ``front`` runs on the
leader. Each run:

1. **node loss**: the node running ``back`` is killed outright (SIGKILL to its process group);
   the time until a request to ``back`` is answered again, from the other node, with its
   conversation;
2. **leader loss**: the leader serving is killed the same way; the time until a request to
   ``front`` is answered through the standby (a client naming both leaders, as
   ``--api-url A,B`` does).

Requests are asked one after another, each as soon as the one before ended (a failed one
after a 50 ms pause: the figures' resolution). The killed member is started again before the
next run. The heartbeat is 1 s, the expiry 3 s, so both figures are at least the expiry. Run:
``python benchmarks/failover.py [--runs N] [--json] [--quick]`` (``--quick``: one run, for CI).
Prints the figures and the machine's load (``uptime``) before and after; gates nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._checks import WrongAnswer, expect
from orchestrator.http.client import ApiUrl, DaemonApi, NoAnswer, NoDaemon
from tests.support.cluster import Cluster, Member, Watched, free_port

POLL_SECONDS = 0.05
BOUND_SECONDS = 90.0
"""The most a failover may take before the benchmark gives up (and fails)."""
BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: rules, script: {rules: [{reply: "{agent}: {input}"}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: front}
spec: {modelConfig: {modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: back}
spec: {modelConfig: {modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: failover}
spec:
  entryAgent: Agent/front
  agents: [Agent/front, Agent/back]
  placement: {back: {nodes: [node-a, node-b]}}
  policy: {shutdown: {gracePeriodSeconds: 2}}
"""


class Bench:
    """The cluster, its members by name, and a client naming both leaders."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ports = {"leader-1": free_port(), "leader-2": free_port()}
        self.members: dict[str, Watched] = {}

    def api(self) -> DaemonApi:
        first, second = (ApiUrl("127.0.0.1", port) for port in self.ports.values())
        return DaemonApi(url=first, standby=[second], timeout=60)

    def start(self, name: str) -> Watched:
        cluster = self.cluster
        if name in self.ports:
            args = ["run", "goondan.yaml", *cluster.cluster_args()]
            member = Member(
                [*args, "--listen", f"127.0.0.1:{self.ports[name]}"],
                cluster.directory(name),
                cluster.member_env(name),
            )
            cluster.members.append(member)
        else:
            member = cluster.start_node(name)
        watched = self.members[name] = Watched(name, member)
        return watched

    def started(self, name: str, event: str) -> None:
        expect(self.start(name).wait_logged(event, BOUND_SECONDS), f"{name}: no {event!r}")

    def leader(self) -> Watched:
        serving = [self.members[n] for n in self.ports if self.members[n].serving]
        expect(len(serving) == 1, f"one leader serves, not {[w.name for w in serving]}")
        return serving[0]

    def ask(self, agent: str, text: str) -> str | None:
        """The answer's text, or None for a request that failed (any failure)."""
        try:
            code, body = self.api().call(
                "POST", f"/v1/agents/{agent}/requests", {"input": text, "timeoutMs": 30_000}
            )
        except (NoAnswer, NoDaemon):
            return None
        if code != 200:
            return None
        output: str = body["output"]
        expect(output == f"{agent}: {text}", output)
        return output

    def until_answered(self, agent: str, killed: float) -> float:
        """Seconds from ``killed`` to the first request to ``agent`` answered."""
        for attempt in range(1_000_000):
            if self.ask(agent, f"after {attempt}") is not None:
                return time.monotonic() - killed
            expect(time.monotonic() - killed < BOUND_SECONDS, f"{agent} never answered again")
            time.sleep(POLL_SECONDS)
        raise WrongAnswer("unreachable")

    def node_of(self, agent: str) -> str:
        code, body = self.api().call("GET", "/v1/agents")
        expect(code == 200, body)
        node: str = next(r["node"] for r in body["agents"] if r["agent"] == agent)
        return node

    def wait_nodes_up(self) -> None:
        """Until the leader counts both nodes up (its own view: a bounded poll)."""
        end = time.monotonic() + BOUND_SECONDS
        while time.monotonic() < end:
            code, body = self.api().call("GET", "/v1/agents")
            nodes = body["cluster"]["nodes"] if code == 200 else []
            if len(nodes) == 2 and all(node["up"] for node in nodes):
                return
            time.sleep(POLL_SECONDS)
        raise WrongAnswer("the nodes never came back")

    def node_loss(self) -> float:
        expect(self.ask("back", "before") is not None, "back answers before the kill")
        node = self.node_of("back")
        killed = time.monotonic()
        self.members[node].kill()
        seconds = self.until_answered("back", killed)
        expect(self.node_of("back") != node, "back moved to the other node")
        self.started(node, "node joined the cluster")
        self.wait_nodes_up()
        return seconds

    def leader_loss(self) -> float:
        expect(self.ask("front", "before") is not None, "front answers before the kill")
        leader = self.leader()
        killed = time.monotonic()
        leader.kill()
        seconds = self.until_answered("front", killed)
        self.started(leader.name, "standby: the cluster has a leader; taking over if it goes")
        return seconds


def load() -> list[float]:
    return [round(figure, 2) for figure in os.getloadavg()]


def measure(runs: int) -> dict[str, Any]:
    before = load()
    with tempfile.TemporaryDirectory(prefix="goondan-failover-bench-") as tmp:
        root = Path(tmp)
        (root / "goondan.yaml").write_text(BUNDLE)
        cluster = Cluster(root, root / "goondan.yaml")
        try:
            bench = Bench(cluster)
            bench.started("leader-1", "orchestrator started")
            for node in ("node-a", "node-b"):
                bench.started(node, "node joined the cluster")
            bench.started("leader-2", "standby: the cluster has a leader; taking over if it goes")
            bench.wait_nodes_up()
            node_loss: list[float] = []
            leader_loss: list[float] = []
            for _ in range(runs):
                node_loss.append(round(bench.node_loss(), 3))
                leader_loss.append(round(bench.leader_loss(), 3))
        finally:
            cluster.close()
    return {
        "runs": runs,
        "heartbeat_s": cluster.heartbeat,
        "expiry_s": 3 * cluster.heartbeat,
        "node_loss_to_answer_s": node_loss,
        "leader_loss_to_serving_s": leader_loss,
        "load_before": before,
        "load_after": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="kills of each kind")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="one run, for CI")
    options = parser.parse_args()
    result = measure(1 if options.quick else options.runs)
    if options.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:<28} {value}")


if __name__ == "__main__":
    main()
