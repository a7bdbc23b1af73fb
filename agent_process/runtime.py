"""``ctx.runtime`` inside an AgentProcess: the ``agents`` tool's way to the other agents.

Every call becomes an IPC message to the Orchestrator, which routes it, spawns targets on
demand, enforces timeouts and detects cycles. Requests wait on a correlation table here; the
Orchestrator guarantees each gets exactly one answer (a result or a structured error), and a
local deadline a little past the request's own guards against an Orchestrator that vanished.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, cast

import msgspec

from agent_process.events import current_span
from agent_process.inter_agent import AsyncRequest
from agent_process.link import OrchestratorLink
from agent_process.turn_types import TurnInput
from goondan.defaults import ANSWER_SAFETY_MARGIN_SECONDS
from goondan.errors import DELIVERY, DeliveryCode
from ipc import IpcError, build, events
from ipc import protocol as wire
from ipc.delegation import DelegateAnswer, Handoff
from ipc.payload import EventBody
from ipc.protocol import ORCHESTRATOR, call_node
from ipc.questions import (
    ConfigCheck,
    ConfigCheckResult,
    ListRequest,
    ListResult,
    SpawnRequest,
    SpawnResult,
)
from ipc.runtime_events import EventType
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

AnswerT = TypeVar("AnswerT")


class IpcAgentRuntime:
    """The :class:`~tools_base.AgentToolRuntime` of one Turn of one instance."""

    def __init__(self, link: OrchestratorLink, instance_key: str, turn_input: TurnInput) -> None:
        self.link = link
        self.agent_name = link.agent_name
        self.instance_key = instance_key
        self.turn_input = turn_input
        self.default_timeout_ms = link.default_timeout_ms
        self._send = link.send
        self._correlations = link.correlations

    def pending_status(self, handle: str) -> JsonObject:
        """Where the background work of ``handle`` (a ``pending`` result of this conversation)
        stands: ``{handle, status: running | completed | unknown, result?}``."""
        if self.link.pending_status is None:
            return {"handle": handle, "status": "unknown"}
        return self.link.pending_status(self.instance_key, handle)

    def _chain(self) -> tuple[str, ...]:
        return (*self.turn_input.call_chain, call_node(self.agent_name, self.instance_key))

    def _handoff(self, target: str, asked: AgentEvent, default_type: EventType) -> Handoff:
        """The handoff of what a tool asked (a tool's dict, all of whose keys are optional)."""
        return Handoff(
            target=target,
            input=str(asked.get("input", "")),
            instance_key=asked.get("instanceKey") or self.instance_key,
            caller_instance_key=self.instance_key,
            trace_id=self.turn_input.trace_id,
            parent_span_id=current_span.get(),
            call_chain=self._chain(),
            event_type=asked.get("eventType") or default_type.value,
            metadata=dict(asked.get("metadata") or {}),
            event_id=wire.new_event_id(),
        )

    async def request(
        self, target: str, event: AgentEvent, *, timeout_ms: int | None = None, async_: bool = False
    ) -> AgentRequestResult:
        """Send a ``delegate`` and (unless ``async_``) wait for its ``delegate_result``."""
        timeout = timeout_ms or self.default_timeout_ms
        correlation_id, future = self._correlations.create()
        handoff = self._handoff(target, event, EventType.AGENT_REQUEST)
        turn = self.turn_input
        relayed = turn.stream_id if turn.relay else ""  # only a caller that asked gets it
        handoff = msgspec.structs.replace(
            handoff, timeout_ms=timeout, background=async_, stream_id=relayed, relay=bool(relayed)
        )
        self._send(build.delegate(self.agent_name, target, correlation_id, handoff))
        ids = {"target": target, "eventId": handoff.event_id, "correlationId": correlation_id}
        if async_:
            if self.link.on_async_result is not None:
                callback = self.link.on_async_result
                key = self.instance_key
                asked = AsyncRequest(
                    request_id=correlation_id,
                    event_id=handoff.event_id,
                    event_type=handoff.event_type,
                    from_agent=target,
                    to_agent=self.agent_name,
                    trace_id=handoff.trace_id,
                    metadata=handoff.metadata,
                )
                future.add_done_callback(
                    lambda done: callback(key, asked.response_message(done.result()))
                )
            return {**ids, "accepted": True, "async_": True, "response": None}  # type: ignore[typeddict-item]
        try:
            answer = await self._wait(future, timeout / 1000)
        except TimeoutError:
            raise ToolError(
                f"Agent request to {target!r} got no answer within {timeout} ms",
                code=DeliveryCode.AGENT_REQUEST_TIMEOUT,
                suggestion="Retry later, or raise timeoutMs.",
            ) from None
        finally:
            self._correlations.forget(correlation_id)
        response = _unwrap(answer, target)
        return {**ids, "accepted": True, "async_": False, "response": response}  # type: ignore[typeddict-item]

    async def send(self, target: str, event_: AgentEvent) -> AgentSendResult:
        """Fire-and-forget: the Orchestrator delivers it (spawning the target if needed)."""
        handoff = self._handoff(target, event_, EventType.AGENT_SEND)
        self._send(build.event(self.agent_name, ORCHESTRATOR, events.Send(handoff)))
        return {"target": target, "eventId": handoff.event_id, "accepted": True}

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> AgentSpawnResult:
        """Ask the Orchestrator to prepare an instance of ``target``."""
        request = SpawnRequest(target, instance_key, cwd, self.instance_key)
        answer = await self._ask(request, SpawnResult)
        if answer.error is not None:
            raise ToolError(answer.error.message, code=answer.error.code)
        return {
            "target": answer.target or target,
            "instanceKey": answer.instance_key,
            "spawned": answer.spawned,
            "cwd": answer.cwd,
        }

    async def list(self, *, include_all: bool = False) -> AgentListResult:
        """Instances spawned by this agent instance (or by anyone)."""
        answer = await self._ask(ListRequest(self.instance_key, include_all), ListResult)
        return {"agents": cast(list[SpawnedAgentInfo], answer.agents)}

    async def catalog(self) -> AgentCatalogResult:
        """The Swarm as this agent sees it (no round trip needed)."""
        return {
            "swarmName": self.link.swarm_name,
            "entryAgent": self.link.entry_agent,
            "selfAgent": self.agent_name,
            "availableAgents": sorted(self.link.agents),
            "callableAgents": sorted(a for a in self.link.agents if a != self.agent_name),
        }

    async def check_config(self) -> tuple[str, ...]:
        """The errors of the swarm's configuration on disk as the Orchestrator would load it
        now (none: it loads); ``self-restart`` asks before it promises a restart."""
        answer = await self._ask(ConfigCheck(), ConfigCheckResult)
        return answer.errors

    async def _wait(self, future: asyncio.Future[Any], seconds: float) -> Any:
        """The answer, waiting a little past the Orchestrator's own deadline of ``seconds``."""
        async with asyncio.timeout(seconds + ANSWER_SAFETY_MARGIN_SECONDS):
            return await future

    async def _ask(self, question: EventBody, answer_type: type[AnswerT]) -> AnswerT:
        """Ask the Orchestrator ``question``; its answer, or a ``ToolError`` saying why not."""
        correlation_id, future = self._correlations.create()
        self._send(build.event(self.agent_name, ORCHESTRATOR, question, correlation_id))
        try:
            answer = await self._wait(future, self.default_timeout_ms / 1000)
        except TimeoutError:
            raise ToolError(
                f"the Orchestrator did not answer {question.KIND}",
                code=DeliveryCode.AGENT_REQUEST_TIMEOUT,
            ) from None
        finally:
            self._correlations.forget(correlation_id)
        if isinstance(answer, DelegateAnswer) and answer.error is not None:  # fail_all's
            raise ToolError(answer.error.message, code=answer.error.code)
        if not isinstance(answer, answer_type):
            raise ToolError(f"unexpected answer to {question.KIND}", code=DeliveryCode.E_INTERNAL)
        return answer


def _unwrap(answer: DelegateAnswer, target: str) -> Any:
    """The target's answer text, or a :class:`ToolError` with the failure's code."""
    if answer.ok:
        return answer.output
    error = answer.error or IpcError("the request failed")
    partial = answer.output
    # A Turn that ran out of Steps still wrote something: the caller keeps that work.
    tail = f" Its last text: {partial}" if isinstance(partial, str) and partial else ""
    raise ToolError(
        f"Agent request to {target!r} failed: {error.message}{tail}",
        code=error.code,
        suggestion=DELIVERY.suggestion(error.code),
    )
