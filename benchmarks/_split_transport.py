"""A transport for benchmarks: some agents run a benchmark's own entry, the rest are real
AgentProcesses started as the daemon starts them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bundle.plan import Plan
from ipc import IpcMessage
from orchestrator.transport import MultiprocessingTransport, ProcessWorker


class SplitTransport:
    """Starts each agent named in ``entries`` with its entry (``module:function``, no spare
    processes kept), and every other agent as an AgentProcess."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.agents = MultiprocessingTransport()
        self.own = {
            name: MultiprocessingTransport(entry=entry, spares=0) for name, entry in entries.items()
        }

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> ProcessWorker:
        """Start ``name`` with its own entry or as an AgentProcess."""
        return await self.own.get(name, self.agents).start(name, plan, on_message)

    async def close(self) -> None:
        """End the transports' spare processes."""
        for transport in (self.agents, *self.own.values()):
            await transport.close()
