"""Conversations that move with their agent: the plan a node starts an agent with.

On one host an agent keeps its conversations in files under the state directory. A node's
agents keep them in the cluster's JetStream instead (see ``agent_process.jetstream_store``),
so the agent started on another node after this one is lost continues every conversation.
The node tells its agents where JetStream is through their plan, the way every other setting
reaches an agent process; credentials never travel in it: the password or token variable is
named in the plan's environment (its value is the node's own, handed over when the process
starts, and the agent takes it out of its environment before any tool runs), and ``.creds``,
nkey and TLS files are paths on the node.
"""

from __future__ import annotations

from bundle.plan import AgentPlan, ClusterStoragePlan
from goondan.secret_env import NATS_CREDENTIAL_ENVS
from orchestrator.cluster.settings import ClusterSettings, cluster_token


def _path(value: object) -> str | None:
    return None if value is None else str(value)


def storage_plan(settings: ClusterSettings, replicas: int = 1) -> ClusterStoragePlan:
    """Where the agents of the cluster ``settings`` name keep their conversations."""
    return ClusterStoragePlan(
        url=settings.url,
        cluster=cluster_token(settings.name),
        creds_file=_path(settings.creds_file),
        nkey_seed_file=_path(settings.nkey_seed_file),
        tls_ca_file=_path(settings.tls_ca_file),
        tls_cert_file=_path(settings.tls_cert_file),
        tls_key_file=_path(settings.tls_key_file),
        replicas=replicas,
    )


def with_cluster_storage(plan: AgentPlan, settings: ClusterSettings) -> AgentPlan:
    """``plan`` with its conversations in the cluster's JetStream (and the NATS credential
    variables among those its process gets)."""
    environment = sorted({*plan.environment, *NATS_CREDENTIAL_ENVS})
    return plan.model_copy(
        update={"cluster_storage": storage_plan(settings), "environment": environment}
    )
