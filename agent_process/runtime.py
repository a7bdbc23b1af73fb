"""``ctx.runtime`` inside an AgentProcess: the ``agents`` tool's way to the other agents.

Every call becomes an IPC message to the Orchestrator, which routes it, spawns targets on
demand, enforces timeouts and detects cycles. Requests wait on a correlation table here; the
Orchestrator guarantees each gets exactly one answer (a result or a structured error), and a
local deadline a little past the request's own guards against an Orchestrator that vanished.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any, cast

from agent_process.events import current_span
from agent_process.turn import TurnInput
from ipc import ORCHESTRATOR, DelegateMessage, IpcError, IpcMessage, event
from tools_base import (
    AgentCatalogResult,
    AgentEvent,
    AgentListResult,
    AgentRequestResult,
    AgentSendResult,
    AgentSpawnResult,
    JsonObject,
    SpawnedAgentInfo,
    ToolError,
)

SAFETY_MARGIN_SECONDS = 5.0
"""Extra wait beyond a request's timeout before the caller gives up on its own."""

Send = Callable[[IpcMessage], None]


def call_node(agent: str, instance_key: str) -> str:
    """One node of a call chain: ``agent@instanceKey``."""
    return f"{agent}@{instance_key}"


class Correlations:
    """Futures waiting for answers, by correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def create(self) -> tuple[str, asyncio.Future[dict[str, Any]]]:
        """A fresh correlation id and the future its answer resolves."""
        correlation_id = f"corr_{secrets.token_hex(12)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return correlation_id, future

    def resolve(self, correlation_id: str | None, payload: dict[str, Any]) -> bool:
        """Deliver an answer; ``False`` when nobody waits for it (late or unknown)."""
        future = self._waiting.pop(correlation_id or "", None)
        if future is None or future.done():
            return False
        future.set_result(payload)
        return True

    def forget(self, correlation_id: str) -> None:
        """Stop waiting (the caller timed out or was cancelled)."""
        self._waiting.pop(correlation_id, None)

    def fail_all(self, error: IpcError) -> None:
        """Answer everybody with ``error`` (the Orchestrator is gone)."""
        for future in self._waiting.values():
            if not future.done():
                future.set_result({"status": "error", "error": error.to_dict()})
        self._waiting.clear()

    def __len__(self) -> int:
        return len(self._waiting)


class IpcAgentRuntime:
    """The :class:`~tools_base.AgentToolRuntime` of one Turn of one instance."""

    def __init__(
        self,
        *,
        agent_name: str,
        instance_key: str,
        turn_input: TurnInput,
        swarm_name: str,
        entry_agent: str,
        agents: list[str],
        default_timeout_ms: int,
        send: Send,
        correlations: Correlations,
        on_async_result: Callable[[str, dict[str, Any]], None] | None = None,
        pending_status: Callable[[str], JsonObject] | None = None,
    ) -> None:
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_input = turn_input
        self.swarm_name = swarm_name
        self.entry_agent = entry_agent
        self.agents = agents
        self.default_timeout_ms = default_timeout_ms
        self._send = send
        self._correlations = correlations
        self._on_async_result = on_async_result
        self._pending_status = pending_status

    def pending_status(self, handle: str) -> JsonObject:
        """Where the background work of ``handle`` (a ``pending`` result of this conversation)
        stands: ``{handle, status: running | completed | unknown, result?}``."""
        if self._pending_status is None:
            return {"handle": handle, "status": "unknown"}
        return self._pending_status(handle)

    def _chain(self) -> list[str]:
        return [*self.turn_input.call_chain, call_node(self.agent_name, self.instance_key)]

    async def request(
        self, target: str, event: AgentEvent, *, timeout_ms: int | None = None, async_: bool = False
    ) -> AgentRequestResult:
        """Send a ``delegate`` and (unless ``async_``) wait for its ``delegate_result``."""
        timeout = timeout_ms or self.default_timeout_ms
        correlation_id, future = self._correlations.create()
        event_id = f"agent_event_{secrets.token_hex(8)}"
        self._send(
            DelegateMessage(
                sender=self.agent_name,
                to=target,
                correlation_id=correlation_id,
                payload={
                    "eventId": event_id,
                    "target": target,
                    "input": event.get("input", ""),
                    "instanceKey": event.get("instanceKey") or self.instance_key,
                    "callerInstanceKey": self.instance_key,
                    "timeoutMs": timeout,
                    "traceId": self.turn_input.trace_id,
                    "parentSpanId": current_span.get(),
                    "callChain": self._chain(),
                    "eventType": event.get("eventType") or "agent.request",
                    "metadata": dict(event.get("metadata") or {}),
                    "async": async_,
                },
            )
        )
        if async_:
            if self._on_async_result is not None:
                callback = self._on_async_result
                key = self.instance_key
                about = {"from": target, "to": self.agent_name, "eventId": event_id}
                future.add_done_callback(
                    lambda done: callback(
                        key, {**about, "correlationId": correlation_id, **done.result()}
                    )
                )
            return {
                "target": target,
                "eventId": event_id,
                "correlationId": correlation_id,
                "accepted": True,
                "async_": True,
                "response": None,
            }
        try:
            async with asyncio.timeout(timeout / 1000 + SAFETY_MARGIN_SECONDS):
                answer = await future
        except TimeoutError:
            self._correlations.forget(correlation_id)
            raise ToolError(
                f"Agent request to {target!r} got no answer within {timeout} ms",
                code="AGENT_REQUEST_TIMEOUT",
                suggestion="Retry later, or raise timeoutMs.",
            ) from None
        finally:
            self._correlations.forget(correlation_id)
        return {
            "target": target,
            "eventId": event_id,
            "correlationId": correlation_id,
            "accepted": True,
            "async_": False,
            "response": _unwrap(answer, target),
        }

    async def send(self, target: str, event_: AgentEvent) -> AgentSendResult:
        """Fire-and-forget: the Orchestrator delivers it (spawning the target if needed)."""
        event_id = f"agent_event_{secrets.token_hex(8)}"
        self._send(
            event(
                self.agent_name,
                ORCHESTRATOR,
                "send",
                eventId=event_id,
                target=target,
                input=event_.get("input", ""),
                instanceKey=event_.get("instanceKey") or self.instance_key,
                callerInstanceKey=self.instance_key,
                traceId=self.turn_input.trace_id,
                callChain=self._chain(),
                eventType=event_.get("eventType") or "agent.send",
                metadata=dict(event_.get("metadata") or {}),
            )
        )
        return {"target": target, "eventId": event_id, "accepted": True}

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> AgentSpawnResult:
        """Ask the Orchestrator to prepare an instance of ``target``."""
        answer = await self._ask(
            "spawn_request",
            target=target,
            instanceKey=instance_key,
            cwd=cwd,
            ownerInstanceKey=self.instance_key,
        )
        return {
            "target": str(answer.get("target", target)),
            "instanceKey": str(answer.get("instanceKey", "")),
            "spawned": bool(answer.get("spawned")),
            "cwd": got if isinstance(got := answer.get("cwd"), str) else None,
        }

    async def list(self, *, include_all: bool = False) -> AgentListResult:
        """Instances spawned by this agent instance (or by anyone)."""
        answer = await self._ask(
            "list_request", includeAll=include_all, ownerInstanceKey=self.instance_key
        )
        agents = answer.get("agents")
        return {"agents": cast(list[SpawnedAgentInfo], agents) if isinstance(agents, list) else []}

    async def catalog(self) -> AgentCatalogResult:
        """The Swarm as this agent sees it (no round trip needed)."""
        return {
            "swarmName": self.swarm_name,
            "entryAgent": self.entry_agent,
            "selfAgent": self.agent_name,
            "availableAgents": sorted(self.agents),
            "callableAgents": sorted(a for a in self.agents if a != self.agent_name),
        }

    async def _ask(self, kind: str, **fields: Any) -> JsonObject:
        correlation_id, future = self._correlations.create()
        self._send(
            event(self.agent_name, ORCHESTRATOR, kind, correlation_id=correlation_id, **fields)
        )
        try:
            async with asyncio.timeout(self.default_timeout_ms / 1000 + SAFETY_MARGIN_SECONDS):
                answer = await future
        except TimeoutError:
            raise ToolError(
                f"the Orchestrator did not answer {kind}", code="AGENT_REQUEST_TIMEOUT"
            ) from None
        finally:
            self._correlations.forget(correlation_id)
        if answer.get("status") == "error":
            error = IpcError.from_dict(answer.get("error"))
            raise ToolError(error.message, code=error.code)
        return answer


def _unwrap(answer: dict[str, Any], target: str) -> Any:
    """The target's answer text, or a :class:`ToolError` with the failure's code."""
    if answer.get("status") == "ok":
        return answer.get("output")
    error = IpcError.from_dict(answer.get("error"))
    partial = answer.get("output")
    # A Turn that ran out of Steps still wrote something: the caller keeps that work.
    tail = f" Its last text: {partial}" if isinstance(partial, str) and partial else ""
    raise ToolError(
        f"Agent request to {target!r} failed: {error.message}{tail}",
        code=error.code,
        suggestion=_SUGGESTIONS.get(error.code),
    )


_SUGGESTIONS = {
    "AGENT_NOT_FOUND": "Call agents__catalog to see which agents exist.",
    "CIRCULAR_CALL_DETECTED": "Answer the caller yourself instead of calling back up the chain.",
    "AGENT_CRASHED": "The target crashed; it is being restarted. Retry once, then report the failure.",
    "AGENT_UNAVAILABLE": "The target is restarting after repeated crashes; retry later.",
    "AGENT_REQUEST_TIMEOUT": "Retry with a smaller request or a larger timeoutMs.",
}
