"""Where the leader starts an agent placed on other hosts: of the nodes its placement admits
that are up with the leader's bundle, the first named, else the least loaded; or why none can.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from bundle.spec_swarm import AgentPlacement
from ipc import AgentUnavailable, NodeAbsent
from orchestrator.cluster.membership import Member


def labels_of(member: Member) -> dict[str, str]:
    """The labels a node declares (``orchestrator node --label``)."""
    labels = member.value.get("labels")
    if not isinstance(labels, dict):
        return {}
    return {str(key): str(value) for key, value in labels.items()}


def different_bundle(member: Member, fingerprint: str) -> AgentUnavailable:
    """Why ``member``, which runs another bundle than the leader's ``fingerprint``, cannot
    start an agent."""
    return AgentUnavailable(
        f"node {member.name!r} runs a different bundle than the leader "
        f"({str(member.value.get('fingerprint'))[:12]} ≠ {fingerprint[:12]}); "
        "deploy the same goondan.yaml to both",
        details={"node": member.name},
    )


class NodeSilent(NodeAbsent):
    """A node that is still a member did not take the start request (nobody listens on its
    subject): it died a moment ago, its key not lapsed yet, and may be back soon."""


def not_listening(node: str) -> NodeSilent:
    """Why ``node``, a member nobody listens for, cannot start an agent now."""
    return NodeSilent(f"node {node!r} is not listening (stopped?)", details={"node": node})


# One parameter per thing the choice reads of the leader's state: it holds none of its own.
def choose_node(
    agent: str,
    rule: AgentPlacement,
    members: Mapping[str, Member],
    ready: Collection[str],
    fingerprint: str,
    load: Callable[[str], int],
    silent: Collection[str] = (),
) -> Member | None:
    """The node to start ``agent`` on: of ``members`` that ``rule`` admits, ``ready`` and
    running ``fingerprint``, the first named, else the one running fewest of our agents
    (``load``). A node in ``silent`` did not take a start a moment ago: it is passed over.
    ``None``: none is, and the agent may run on the leader. Raises ``AgentUnavailable``
    naming why each node cannot."""
    refusals: list[AgentUnavailable] = []
    usable: list[Member] = []
    for member in members.values():
        if not rule.admits(member.name, labels_of(member)):
            continue
        if member.name in silent:
            refusals.append(not_listening(member.name))
        elif member.name not in ready:
            refusals.append(
                NodeAbsent(
                    f"agent {agent!r} runs on node {member.name!r}, which is still starting",
                    details={"node": member.name},
                )
            )
        elif member.value.get("fingerprint") != fingerprint:
            refusals.append(different_bundle(member, fingerprint))
        else:
            usable.append(member)
    if usable:
        order = rule.named_nodes

        def preference(member: Member) -> tuple[int, int, str]:
            rank = order.index(member.name) if member.name in order else 0
            return rank, load(member.name), member.name

        return min(usable, key=preference)
    if rule.allow_leader:
        return None
    absent = [node for node in rule.named_nodes if node not in members]
    if rule.node is not None and not rule.labels:
        if refusals:
            raise refusals[0]
        raise NodeAbsent(
            f"agent {agent!r} runs on node {rule.node!r}, which is not in the cluster",
            details={"node": rule.node},
        )
    reasons = [refusal.message for refusal in refusals]
    reasons += [f"node {node!r} is not in the cluster" for node in absent]
    # No node that could run it is in the cluster or ready yet (rather than one refusing it
    # for good): one lost a moment ago may be back soon.
    transient = all(isinstance(refusal, NodeAbsent) for refusal in refusals)
    unavailable = NodeAbsent if transient else AgentUnavailable
    raise unavailable(
        f"agent {agent!r} runs on {rule.describe()}, and no such node can start it now"
        + (f": {'; '.join(reasons)}" if reasons else " (none is in the cluster)"),
        details={"placement": rule.describe()},
    )
