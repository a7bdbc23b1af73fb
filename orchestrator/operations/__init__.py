"""The contract between the daemon and its faces (the HTTP API, its metrics, the CLI, the
studio): what may be asked of a running swarm (:mod:`.protocol`), the typed answers it gives
(:mod:`.answers`), and the live event hub its streams read (:mod:`.live`).

The public names are re-exported here: ``from orchestrator.operations import SwarmOperations``.
"""

from orchestrator.operations.protocol import (
    AgentView,
    ConnectionState,
    DecisionOutcome,
    DeltaSink,
    EventListener,
    OperationRefused,
    SwarmOperations,
    SwarmProcesses,
)

__all__ = [
    "AgentView",
    "ConnectionState",
    "DecisionOutcome",
    "DeltaSink",
    "EventListener",
    "OperationRefused",
    "SwarmOperations",
    "SwarmProcesses",
]
