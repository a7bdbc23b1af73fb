"""The contract between the daemon and its faces (the HTTP API, its metrics, the CLI, the
studio): what may be asked of a running swarm (:mod:`.protocol`), the typed answers it gives
(:mod:`.answers`), and the live event hub its streams read (:mod:`.live`).

The public names are re-exported here: ``from orchestrator.operations import SwarmOperations``.
"""

from typing import TYPE_CHECKING

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
else:

    def __getattr__(name: str) -> object:
        """A public name of :mod:`.protocol` when first asked for: importing :mod:`.answers`
        alone (the CLI reads the daemon's answers with it) does not import the protocol, and
        with it the runtime events and the IPC stack."""
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from orchestrator.operations import protocol

        value = getattr(protocol, name)
        globals()[name] = value
        return value


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
