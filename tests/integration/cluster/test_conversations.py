"""A conversation moves with its agent: node A is killed outright, the agent is started on
node B, and its next Turn sees every earlier message.

A real NATS server, a leader and two nodes, each its own process; the agent's Model is the
``openai`` provider pointed at a local Chat Completions server, which answers with the user
messages it was sent, so each answer shows what the agent remembered.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, descendants, running_cluster
from tests.support.daemon import run_cli
from tests.support.model_server import ModelServer, text_reply
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(180)

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: echo}}
spec:
  provider: openai
  model: echo-history
  baseUrl: {url}
  apiKey: {{value: sk-local}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: front}}
spec:
  modelConfig: {{modelRef: Model/echo}}
  prompt: {{system: You are front.}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: keeper}}
spec:
  modelConfig: {{modelRef: Model/echo}}
  prompt: {{system: You are keeper.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: memory}}
spec:
  entryAgent: Agent/front
  agents: [Agent/front, Agent/keeper]
  placement:
    keeper: {{nodes: [node-a, node-b]}}
"""


def remembered(agent: str, body: dict[str, Any]) -> Reply:
    """The user messages of the call, in order: what the agent's conversation holds."""
    said = [m["content"] for m in body["messages"] if m.get("role") == "user"]
    return text_reply(json.dumps(said))


def wait_instances(cluster: Cluster, agent: str, expected: list[str]) -> None:
    """Until the leader's status lists ``expected`` as ``agent``'s instances: a bounded poll of
    the leader's own view (it learns of a stored conversation from a JetStream watch)."""
    end = time.monotonic() + 30
    while (shown := cluster.agent(agent)["instances"]) != expected:
        assert time.monotonic() < end, f"{agent}'s instances stayed {shown}, not {expected}"
        time.sleep(0.05)


def test_a_conversation_continues_on_another_node_after_its_node_is_killed(
    tmp_path: Path,
) -> None:
    with ModelServer(remembered) as model:
        bundle = tmp_path / "bundle" / "goondan.yaml"
        bundle.parent.mkdir()
        bundle.write_text(SWARM.format(url=model.url))
        with running_cluster(tmp_path, bundle) as cluster:
            cluster.start_leader()
            node_a = cluster.join("node-a")
            cluster.join("node-b")

            for text, expected in (("one", ["one"]), ("two", ["one", "two"])):
                code, answer = cluster.request("keeper", text)
                assert code == 200, answer
                assert json.loads(answer["output"]) == expected
            first = cluster.agent("keeper")
            assert first["node"] == "node-a"
            assert first["pid"] in descendants(node_a.pid)
            # Nothing of the conversation is on node A's disk, to be lost with it.
            assert not list((tmp_path / "node-node-a" / "state").rglob("events.jsonl"))
            # Nor on the leader's: its status counts the instance where it is, in JetStream.
            assert not (cluster.root / "leader" / ".goondan" / "agents" / "keeper").exists()
            wait_instances(cluster, "keeper", ["default"])
            table = run_cli("status", cwd=cluster.root / "leader")
            assert table.returncode == 0, table.stderr
            [keeper] = [line.split() for line in table.stdout.splitlines() if " keeper " in line]
            assert keeper[:2] == ["node-a", "keeper"]
            assert keeper[4] == "1", table.stdout  # INST: the conversation in JetStream

            assert cluster.leader is not None
            mark = cluster.leader.log.mark
            node_a.stop()  # SIGKILL to its whole process group: node, fork server, agent
            cluster.leader.log.wait_for("node lost", node="node-a", since=mark)

            code, answer = cluster.request("keeper", "three")
            assert code == 200, answer
            assert json.loads(answer["output"]) == ["one", "two", "three"]
            assert cluster.agent("keeper")["node"] == "node-b"
            # The earlier answers came along too, not only the inputs.
            last = model.calls[-1].body["messages"]
            assistant = [m["content"] for m in last if m.get("role") == "assistant"]
            assert assistant == ['["one"]', '["one", "two"]']
