"""Agents on several hosts over NATS, behind the transport seam (DESIGN.md "Past one machine").

- :mod:`~orchestrator.cluster.settings`: the server address, credentials, TLS and names.
- :mod:`~orchestrator.cluster.membership`: leases and heartbeats in a JetStream KV bucket.
- :mod:`~orchestrator.cluster.relay`: a subject as an ordered byte stream of IPC frames.
- :mod:`~orchestrator.cluster.leader`: the leader's transport (``run --cluster``), or its
  standby's.
- :mod:`~orchestrator.cluster.remote`: an agent process on a node, as the leader sees it.
- :mod:`~orchestrator.cluster.node`: a node (``orchestrator node``).

Needs the optional extra ``cluster`` (``nats-py``); nothing here is imported on one host.
"""
