"""The router's answer to a target that dies mid-Turn: a crash is a delay, not an error.

A request (``delegate``) whose target exits before answering keeps its pending row: once the
supervisor has the agent back, the same request is delivered again with ``attempt + 1`` and
its request id (the caller's, else its correlation id, which the agent recorded on the Turn's
user message the first time). The agent takes the Turn up where it stopped (see
``agent_process.turn_resume``), so the caller keeps waiting and gets the Turn's one answer.
A send whose Turn had started is carried the same way. The request's timeout still bounds the
whole wait. The agent answers ``AGENT_CRASHED`` for a Turn under which it died
``policy.crash.maxTurnAttempts`` times (default 3), so a poison Turn cannot keep its agent
crash-looping for the other conversations; deaths while the request only waited in the
agent's queue do not count there, and the router gives up after
``maxTurnAttempts + EXTRA_DELIVERIES`` deliveries whatever the cause.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Coroutine
from typing import Any

import msgspec

from goondan.defaults import MAX_TURN_ATTEMPTS, SEND_DELIVERY_ATTEMPTS
from ipc import (
    AgentCrashed,
    AgentUnavailable,
    DelegateMessage,
    IpcError,
    NodeAbsent,
    ShuttingDown,
)
from orchestrator.clock import Clock
from orchestrator.pending import Pending
from orchestrator.router_sends import InFlightSend
from orchestrator.supervisor import Supervisor
from orchestrator.transport import Worker

RETRY_SECONDS = 0.2
"""How soon a carried request asks again for an agent that is not back yet (and names no
backoff of its own): the request's timeout bounds the waiting."""
NODE_ABSENT_WAIT_SECONDS = 10.0
"""How long a request waits for a cluster node able to run its agent (:class:`NodeAbsent`:
none is in the cluster or ready) before it is answered ``AGENT_UNAVAILABLE``: a node lost a
moment ago is usually back by then, one down for good is named soon enough."""


EXTRA_DELIVERIES = SEND_DELIVERY_ATTEMPTS
"""Deliveries of one request beyond ``maxTurnAttempts``: the agent counts the attempts that
ran the Turn (and answers ``AGENT_CRASHED`` past them); these cover deaths while the request
was only queued there."""


def crashed_too_often(name: str, deliveries: int, limit: int) -> AgentCrashed:
    """The answer of a request whose target ``name`` died ``deliveries`` times with it."""
    return AgentCrashed(
        f"agent {name!r} exited before answering: it died {deliveries} times while this "
        f"request was delivered to it (policy.crash.maxTurnAttempts: {limit})",
        details={"attempts": deliveries, "maxTurnAttempts": limit},
    )


class TurnCarrying:
    """The carrying half of a :class:`~orchestrator.router.Router`."""

    supervisor: Supervisor
    pending: dict[str, Pending]
    closing: bool
    clock: Clock
    log: Any

    @abstractmethod
    async def _running_worker(self, target: str) -> Worker | IpcError:
        """``target``'s worker, started if need be, or why there is none."""

    @abstractmethod
    def _forward(self, pending: Pending, message: DelegateMessage, worker: Worker) -> None:
        """Hand ``message`` to ``worker`` (or answer why it could not be)."""

    @abstractmethod
    def _fail(self, pending: Pending, error: IpcError) -> None:
        """Answer ``pending`` with ``error`` (a no-op when it was answered already)."""

    @abstractmethod
    def _start_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[Any] | None:
        """Run ``coro`` in the background."""

    def max_turn_attempts(self, agent: str) -> int:
        """``policy.crash.maxTurnAttempts`` of ``agent``."""
        handle = self.supervisor.handle(agent)
        limit = getattr(handle.plan, "max_turn_attempts", None) if handle is not None else None
        return limit if isinstance(limit, int) and limit > 0 else MAX_TURN_ATTEMPTS

    def _carry(self, pending: Pending, name: str) -> None:
        """``pending``'s target ``name`` exited before answering: deliver it again once the
        agent is back, unless it died under this Turn too often already."""
        if pending.carrier is not None and not pending.carrier.done():
            return  # died again before the request reached it: no attempt of the Turn
        if self.closing or self.supervisor.stopping:
            self._fail(pending, ShuttingDown(f"agent {name!r} stopped with the swarm"))
            return
        if pending.message is None or pending.handoff is None:
            self._fail(pending, AgentCrashed(f"agent {name!r} exited before answering"))
            return
        limit = self.max_turn_attempts(name)
        if pending.attempt >= limit + EXTRA_DELIVERIES:
            self._fail(pending, crashed_too_often(name, pending.attempt, limit))
            return
        pending.attempt += 1
        self.log.info(
            "request carried over its target's restart",
            caller=pending.caller,
            target=name,
            correlation_id=pending.correlation_id,
            attempt=pending.attempt,
        )
        pending.carrier = self._start_task(
            self._deliver_again(pending), f"carry:{pending.correlation_id}"
        )

    async def _deliver_again(self, pending: Pending) -> None:
        """Wait for the target to be back (through any backoff), then deliver the request as
        attempt ``pending.attempt``; until the request is answered or times out."""
        message = _next_attempt(pending)
        while pending.correlation_id in self.pending:
            worker = await self._worker_for(pending)
            delay = self._deliver_or_wait(pending, message, worker)
            if delay is None:
                return
            await pause(self.clock, delay)

    async def _worker_for(self, pending: Pending) -> Worker | IpcError:
        """The target's worker once it is ready (starting it if needed), or why it is not.
        While no cluster node able to run it is up (:class:`NodeAbsent`), it is asked again
        for up to :data:`NODE_ABSENT_WAIT_SECONDS`: a node lost a moment ago is usually back."""
        worker = await self._running_worker(pending.target)
        deadline = self.clock.now() + NODE_ABSENT_WAIT_SECONDS
        while (
            isinstance(worker, NodeAbsent)
            and pending.correlation_id in self.pending
            and not (self.closing or self.supervisor.stopping)
            and self.clock.now() < deadline
        ):
            await pause(self.clock, RETRY_SECONDS)
            worker = await self._running_worker(pending.target)
        return worker

    def _deliver_or_wait(
        self, pending: Pending, message: DelegateMessage, worker: Worker | IpcError
    ) -> float | None:
        """Deliver ``message`` to ``worker``, or answer why it cannot be; returns how soon to
        ask for the agent again (``None``: done with)."""
        if pending.correlation_id not in self.pending:
            return None
        if not isinstance(worker, IpcError):
            pending.carrier = None
            self._forward(pending, message, worker)
            return None
        stopping = self.closing or self.supervisor.stopping
        delay = None if stopping else _retry_delay(worker)
        if isinstance(worker, AgentCrashed):  # it died while starting, the request not with it
            pending.start_deaths += 1
            if pending.start_deaths > self.max_turn_attempts(pending.target) + EXTRA_DELIVERIES:
                delay = None  # it dies at every start: say so, rather than wait for the timeout
        if delay is None:
            self._fail(pending, ShuttingDown("the swarm is shutting down") if stopping else worker)
        return delay

    def _carry_send(self, send: InFlightSend, name: str) -> IpcError | None:
        """A send whose Turn had started lost its target ``name``: deliver it again as the
        next attempt at that Turn; returns why not when it died under it too often."""
        limit = self.max_turn_attempts(name)
        attempt = send.handoff.attempt
        if attempt >= limit + EXTRA_DELIVERIES:
            return crashed_too_often(name, attempt, limit)
        send.handoff = msgspec.structs.replace(
            send.handoff,
            request_id=send.handoff.request_id or send.event_id,
            attempt=attempt + 1,
        )
        self.log.info(
            "send carried over its target's restart",
            caller=send.sender,
            target=name,
            event_id=send.event_id,
            attempt=attempt + 1,
        )
        return None


def _next_attempt(pending: Pending) -> DelegateMessage:
    """``pending``'s request as its next attempt: the same, named by its request id (the
    caller's, else its correlation id), with ``attempt`` counted up."""
    assert pending.message is not None
    assert pending.handoff is not None
    handoff = msgspec.structs.replace(
        pending.handoff,
        request_id=pending.handoff.request_id or pending.correlation_id,
        attempt=pending.attempt,
    )
    return msgspec.structs.replace(pending.message, to=pending.target, payload=handoff.to_wire())


def _retry_delay(error: IpcError) -> float | None:
    """How soon to ask again for an agent that is not back (``error`` says why); ``None``
    when it will not come back by itself (unknown, or unavailable for another reason than a
    crash-loop backoff)."""
    retry = error.details.get("retryInSeconds")
    if isinstance(error, AgentUnavailable):
        return float(retry) if isinstance(retry, int | float) else None
    return RETRY_SECONDS if isinstance(error, AgentCrashed) else None


async def pause(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock`` (the router's, which tests may drive)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    timer = clock.call_later(seconds, _wake, done)
    try:
        await done
    finally:
        timer.cancel()


def _wake(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
