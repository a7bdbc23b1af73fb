"""The way from an AgentProcess to its Orchestrator: the send, and the answers waited for.

Built once per process and shared by everything that asks the Orchestrator something (the
``agents`` tool's runtime, the model governor's permits), so it imports none of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ipc import DelegateResultMessage, IpcError, IpcMessage
from ipc import protocol as wire
from ipc.delegation import DelegateAnswer
from ipc.payload import EventBody
from tools_base import JsonObject, Message

Send = Callable[[IpcMessage], None]


class Correlations:
    """Futures waiting for answers (a :class:`DelegateAnswer`, or an answer event's body), by
    correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    def create(self) -> tuple[str, asyncio.Future[Any]]:
        """A fresh correlation id and the future its answer resolves."""
        correlation_id = wire.new_correlation_id()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return correlation_id, future

    def resolve(self, correlation_id: str | None, answer: DelegateAnswer | EventBody) -> bool:
        """Deliver an answer; ``False`` when nobody waits for it (late or unknown)."""
        future = self._waiting.pop(correlation_id or "", None)
        if future is None or future.done():
            return False
        future.set_result(answer)
        return True

    def resolve_answer(self, message: DelegateResultMessage) -> bool:
        """Deliver a ``delegate_result`` (a malformed one as the error it is)."""
        return self.resolve(message.correlation_id, DelegateAnswer.of(message))

    def forget(self, correlation_id: str) -> None:
        """Stop waiting (the caller timed out or was cancelled)."""
        self._waiting.pop(correlation_id, None)

    def fail_all(self, error: IpcError) -> None:
        """Answer everybody with ``error`` (the Orchestrator is gone, or the agent stops)."""
        for future in self._waiting.values():
            if not future.done():
                future.set_result(DelegateAnswer.failure(error))
        self._waiting.clear()

    def __len__(self) -> int:
        return len(self._waiting)


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestratorLink:
    """What every Turn's runtime of one agent shares: who the agent is in its swarm, and the
    way to the Orchestrator (built once per process)."""

    agent_name: str
    swarm_name: str
    entry_agent: str
    agents: list[str]
    default_timeout_ms: int
    send: Send
    """Queue a message to the Orchestrator."""
    correlations: Correlations
    on_async_result: Callable[[str, Message], None] | None = None
    """``(instance_key, message)``: where the answer of a background request goes (the
    message :class:`~agent_process.inter_agent.AsyncRequest` makes of it)."""
    pending_status: Callable[[str, str], JsonObject] | None = None
    """``(instance_key, handle)``: where a background tool call stands."""
