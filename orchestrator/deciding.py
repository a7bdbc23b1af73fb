"""Operators' decisions on parked tool calls, carried out through the agents that own them.

A call parked for approval lives in its agent's process and in its record on disk; the
decision goes to the agent (started first if need be: it takes up its parked Turns when it
boots), and with ``wait`` the answer waits for the Turn's end on the live events.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ipc import AgentUnavailable, IpcError
from ipc import protocol as wire
from ipc.questions import ApprovalDecision, ApprovalDecisionResult
from ipc.runtime_events import TurnCompletedEvent, TurnFailedEvent, given, read_event
from orchestrator.approvals import find_approval, list_approvals, outcome_of
from orchestrator.approvals import unavailable as approval_unavailable
from orchestrator.operations import DecisionOutcome, SwarmProcesses
from orchestrator.operations.answers import ApprovalAnswer, ApprovalRow, TurnEnd, TurnError
from orchestrator.operations.live import END_OF_STREAM, EventHub
from orchestrator.router import Router
from orchestrator.supervisor import Supervisor

StartSoon = Callable[[Coroutine[Any, Any, Any], str], None]
"""Runs a coroutine in the background under a name (the Orchestrator's helpers)."""


@dataclass(eq=False)
class ApprovalDesk:
    """Where approvals are decided, and who may not decide them."""

    state_dir: Path
    agents: Supervisor
    connectors: Supervisor
    router: Router
    live: EventHub
    turn_timeout: float
    """How long ``wait`` waits for the Turn's end (the swarm's request timeout), seconds."""
    log: structlog.typing.FilteringBoundLogger

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        """Carry out an operator's decision on a parked tool call.

        404 for an unknown id, 409 when it was decided already or expired, 400 for edited
        arguments that do not fit the tool, 503 when the agent cannot be reached. With
        ``wait``, a 200 also carries the Turn's answer (``turn``: ``{status, output, error?}``)
        once the Turn ends, or ``null`` if it does not end within :attr:`turn_timeout`.
        """
        record = find_approval(self.state_dir, decision.approval_id)
        if record is None:
            return DecisionOutcome.refused(
                404, wire.APPROVAL_NOT_FOUND, f"no approval {decision.approval_id!r}"
            )
        if record.status != "pending":
            return DecisionOutcome.refused(
                409,
                wire.APPROVAL_ALREADY_DECIDED,
                f"approval {decision.approval_id!r} is {record.status} already",
            )
        agent = record.agent_name
        log = self.log.bind(
            agent=agent,
            instance_key=record.instance_key,
            trace_id=record.trace_id or None,
            approval_id=decision.approval_id,
        )
        # Subscribed before the decision goes out, so the Turn's end cannot slip past.
        async with self.live.subscribe() as subscription:
            try:
                await self.agents.ensure_running(agent)
                answer = await self.router.ask(agent, decision)
            except TimeoutError:
                exc = AgentUnavailable(f"agent {agent!r} did not become ready")
                log.warning("approval decision not delivered", code=exc.code, error=exc.message)
                return approval_unavailable(exc)
            except IpcError as exc:
                log.warning("approval decision not delivered", code=exc.code, error=exc.message)
                return approval_unavailable(exc)
            assert isinstance(answer, ApprovalDecisionResult)
            outcome = outcome_of(answer)
            log.info("approval decision", decision=decision.decision, status=outcome.status)
            if wait and isinstance(outcome.body, ApprovalAnswer):
                outcome.body.turn = await self._turn_end(subscription.queue, record)
        return outcome

    async def _turn_end(
        self, queue: asyncio.Queue[dict[str, Any]], record: ApprovalRow
    ) -> TurnEnd | None:
        """The answer of the Turn parked on ``record`` (its ``turn.completed`` or
        ``turn.failed``), or ``None`` past :attr:`turn_timeout`."""
        identity = (record.agent_name, record.instance_key, record.trace_id or None)
        try:
            async with asyncio.timeout(self.turn_timeout):
                while True:
                    data = await queue.get()
                    if data is END_OF_STREAM:
                        return None
                    event = read_event(data)
                    if not isinstance(event, TurnCompletedEvent | TurnFailedEvent):
                        continue
                    if (
                        event.agent_name,
                        given(event.instance_key),
                        given(event.trace_id),
                    ) == identity:
                        break
        except TimeoutError:
            return None
        turn = TurnEnd(
            status="ok" if isinstance(event, TurnCompletedEvent) else "error",
            output=given(event.output),
            turn_id=given(event.turn_id),
        )
        code = given(event.error_code)
        if code is not None:
            turn.error = TurnError(code=code, message=given(event.error_message))
        return turn

    def resume(self, start_soon: StartSoon) -> None:
        """Start the agents that have calls parked for approval: each takes up its parked
        Turns at boot, so their deadlines are kept even if nothing else starts them."""
        parked = {row.agent_name for row in list_approvals(self.state_dir)}
        for agent in sorted(parked & set(self.agents.names())):
            self.log.info("agent has calls waiting for approval; starting it", agent=agent)
            start_soon(self._start_quietly(agent), f"approvals:{agent}")

    async def _start_quietly(self, agent: str) -> None:
        try:
            await self.agents.ensure_running(agent)
        except (IpcError, TimeoutError) as exc:  # it backs off; reconciling and use retry
            self.log.warning("agent not started", agent=agent, error=str(exc))

    def processes(self) -> SwarmProcesses:
        """The agent and connector processes running on this host right now: none of them
        may decide (:mod:`orchestrator.http.approvers`)."""
        pids: dict[int, str] = {}
        scopes: dict[str, str] = {}
        for kind, supervisor in (("agent", self.agents), ("connection", self.connectors)):
            for handle in supervisor.handles():
                label = f"{kind} {handle.name!r}"
                if handle.worker is not None and handle.worker.node is None and handle.pid:
                    pids[handle.pid] = label
                if handle.scope:
                    scopes[handle.scope] = label
        return SwarmProcesses(pids, scopes, os.getpid(), os.geteuid())
