"""The contract between the daemon and its faces (the HTTP API, its metrics, the CLI, the
studio): what may be asked of a running swarm (:mod:`.protocol`), the typed answers it gives
(:mod:`.answers`), and the live event hub its streams read (:mod:`.live`).

The public names are re-exported here: ``from orchestrator.operations import SwarmOperations``.
"""

from typing import TYPE_CHECKING

from goondan.lazy_names import lazy_getattr

if TYPE_CHECKING:
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

if not TYPE_CHECKING:
    # Importing :mod:`.answers` alone (the CLI reads the daemon's answers with it) does not
    # import the protocol, and with it the runtime events and the IPC stack.
    __getattr__ = lazy_getattr(__name__, dict.fromkeys(__all__, f"{__name__}.protocol"))
