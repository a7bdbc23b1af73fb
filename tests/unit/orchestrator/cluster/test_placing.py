"""Where the leader starts a placed agent (:func:`choose_node`), above all when a node that is
still a member did not take a start a moment ago (``silent``): its key outlives it by up to an
expiry, and a request must not be refused for that while another place could run the agent."""

from __future__ import annotations

import pytest

from bundle.spec_swarm import AgentPlacement
from ipc import AgentUnavailable, NodeAbsent
from orchestrator.cluster.membership import Member
from orchestrator.cluster.placing import NodeSilent, choose_node

FINGERPRINT = "f" * 64


def members(*names: str, labels: dict[str, str] | None = None) -> dict[str, Member]:
    value = {"fingerprint": FINGERPRINT, "ready": True, "labels": labels or {}}
    return {name: Member(name, dict(value)) for name in names}


def choose(
    rule: AgentPlacement, nodes: dict[str, Member], silent: set[str] | None = None
) -> Member | None:
    return choose_node("a", rule, nodes, set(nodes), FINGERPRINT, lambda node: 0, silent or set())


def test_the_first_named_node_is_chosen_and_a_silent_one_passed_over() -> None:
    rule = AgentPlacement(nodes=["node-a", "node-b"])
    nodes = members("node-a", "node-b")
    first = choose(rule, nodes)
    assert first is not None
    assert first.name == "node-a"
    other = choose(rule, nodes, {"node-a"})
    assert other is not None
    assert other.name == "node-b"


def test_every_node_silent_runs_the_agent_on_the_leader_where_it_may() -> None:
    rule = AgentPlacement(labels={"pool": "x"}, allow_leader=True)
    assert (
        choose(rule, members("node-a", "node-c", labels={"pool": "x"}), {"node-a", "node-c"})
        is None
    )


@pytest.mark.parametrize(
    "rule", [AgentPlacement(node="node-a"), AgentPlacement(nodes=["node-a", "node-b"])]
)
def test_every_node_silent_and_no_leader_is_a_refusal_a_request_waits_out(
    rule: AgentPlacement,
) -> None:
    with pytest.raises(NodeAbsent) as refused:  # the router asks again for a while
        choose(rule, members("node-a", "node-b"), {"node-a", "node-b"})
    assert "'node-a' is not listening" in refused.value.message


def test_a_node_refusing_for_good_beside_a_silent_one_is_no_wait() -> None:
    rule = AgentPlacement(nodes=["node-a", "node-b"])
    nodes = members("node-a", "node-b")
    nodes["node-b"].value["fingerprint"] = "0" * 64  # another bundle: not a matter of time
    with pytest.raises(AgentUnavailable) as refused:
        choose(rule, nodes, {"node-a"})
    assert not isinstance(refused.value, NodeAbsent)
    assert "different bundle" in refused.value.message
    assert issubclass(NodeSilent, NodeAbsent)
