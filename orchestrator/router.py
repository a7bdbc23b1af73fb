"""Routing between agents, and the pending-request table that guarantees every answer.

Every ``delegate`` gets exactly one ``delegate_result``: the target's, or a structured error
from here when the target is unknown (``AGENT_NOT_FOUND``), would close a cycle
(``CIRCULAR_CALL_DETECTED``), cannot start (``AGENT_UNAVAILABLE``), died under the Turn
``policy.crash.maxTurnAttempts`` times (``AGENT_CRASHED``; a target that dies fewer times is
waited for and the request delivered again, see :mod:`orchestrator.router_carry`), takes
longer than the request's timeout (``AGENT_REQUEST_TIMEOUT``), or the swarm is shutting down
(``SHUTTING_DOWN``). A target's answer that arrives after its caller was already answered is
dropped (and logged).

A fire-and-forget ``send`` is tracked by its ``eventId`` until the target reports its Turn done.
If the target dies with the send still queued (its Turn never started, so it had no effect), the
send is delivered once more to the restarted target; if it dies mid-Turn, the send is carried
like a request; if it refuses or cannot take the send, the sender's instance gets a
``send_failed`` report with the structured error. Nothing is dropped silently.

A request from outside may stream (:meth:`Router.request` with ``on_delta``): its handoff
carries a stream id (its correlation id), the target's Turn sends its model text as
``text_delta`` events tagged with it, and the router hands each to the request's sink while the
request waits. With ``relay`` the target passes the stream on to the agents it asks, so their
text reaches the same sink, each piece marked with the agent that produced it. A delta whose
request is no longer waiting is dropped. Sinks are called on the loop and must not block.

The rows of the pending-request table, and the call cycles they would close, are
:mod:`orchestrator.pending`'s; what ``agents__spawn`` prepared, and ``agents__list`` lists,
:mod:`orchestrator.spawns`'.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from goondan.defaults import (
    AGENT_QUESTION_TIMEOUT_SECONDS,
    MAX_PENDING_PER_CALLER,
    MAX_REQUEST_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    SEND_DELIVERY_ATTEMPTS,
)
from ipc import (
    AgentCrashed,
    AgentUnavailable,
    Cancelled,
    DelegateMessage,
    DelegateResultMessage,
    EmptyInput,
    EventMessage,
    IpcError,
    IpcMessage,
    RequestTimeout,
    ShuttingDown,
    TooManyPending,
    build,
)
from ipc import protocol as wire
from ipc.delegation import DelegateAnswer, Handoff
from ipc.events import Cancel, TextDelta
from ipc.payload import EventBody
from ipc.protocol import EXTERNAL_CALLER, ORCHESTRATOR, EventKind
from ipc.questions import ListRequest, SpawnRequest
from orchestrator.clock import Clock, LoopClock, wait_for
from orchestrator.dispatch import EventHandler
from orchestrator.pending import Pending, chain_cycle, wait_cycle
from orchestrator.remote_agents import RemoteAgents
from orchestrator.router_carry import TurnCarrying
from orchestrator.router_remote import RemoteRouting
from orchestrator.router_sends import DeliveryLost, SendRouting, not_delivered
from orchestrator.router_sends import InFlightSend as InFlightSend
from orchestrator.spawns import SpawnedInstance, SpawnKey, Spawns
from orchestrator.supervisor import Supervisor
from orchestrator.tasks import TaskOwner
from orchestrator.transport import Worker

DeltaSink = Callable[[str, TextDelta], None]
"""``(agent, delta)``: where the text of a streamed request goes (``agent`` produced it)."""


class Router(SendRouting, TurnCarrying, RemoteRouting):
    """Routes requests, sends and questions between agents through the supervisor."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        default_timeout_ms: int = REQUEST_TIMEOUT_MS,
        on_delivery_lost: DeliveryLost | None = None,
        clock: Clock | None = None,
        tasks: TaskOwner | None = None,
        remote: RemoteAgents | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.remote = remote or RemoteAgents()
        """The swarm's RemoteAgents: targets answered over A2A (:mod:`orchestrator.router_remote`)."""
        self._remote_calls = {}
        self.default_timeout_ms = default_timeout_ms
        self.on_delivery_lost = on_delivery_lost
        """Told of every send that could not be delivered (the daemon logs it as an event)."""
        self.clock: Clock = clock or LoopClock()
        self.tasks = tasks or TaskOwner()
        self._owns_tasks = tasks is None
        self.pending: dict[str, Pending] = {}
        self.sends: dict[str, InFlightSend] = {}
        self.spawns = Spawns(supervisor, self.ask)
        self.closing = False
        self._per_caller: Counter[str] = Counter()
        self._sends_per_caller: Counter[str] = Counter()
        self._questions: dict[str, tuple[str, asyncio.Future[EventBody]]] = {}
        """Questions to agents (:meth:`ask`) waiting for their answer, by correlation id."""
        self.streams: dict[str, DeltaSink] = {}
        """The sinks of streamed requests still waiting, by stream id."""
        self.on_text_delta: DeltaSink | None = None
        """Told of every text delta (the daemon's live event stream shows them)."""
        self.log = structlog.get_logger("goondan.router")

    @property
    def spawned(self) -> dict[SpawnKey, SpawnedInstance]:
        """The instances prepared with ``agents__spawn`` (the daemon puts back earlier runs')."""
        return self.spawns.records

    @property
    def event_handlers(self) -> dict[EventKind, EventHandler]:
        """The event kinds the router handles, for the Orchestrator's dispatch table."""
        return {
            EventKind.TEXT_DELTA: self._text_delta,
            EventKind.SEND: self._accept_send,
            EventKind.SEND_STARTED: self._send_started,
            EventKind.SEND_DONE: self._send_done,
            EventKind.SEND_REFUSED: self._send_refused,
            EventKind.SPAWN_REQUEST: self._spawn_request,
            EventKind.LIST_REQUEST: self._list_request,
            EventKind.PREPARE_INSTANCE_RESULT: self._answer_to_question,
            EventKind.DELETE_INSTANCE_RESULT: self._answer_to_question,
            EventKind.RESTART_INSTANCE_RESULT: self._answer_to_question,
            EventKind.APPROVAL_DECISION_RESULT: self._answer_to_question,
        }

    # -- entry points -------------------------------------------------------------------------

    def route_delegate(
        self,
        caller: str,
        message: DelegateMessage,
        future: asyncio.Future[DelegateAnswer] | None = None,
    ) -> None:
        """Admit a request, then forward it at once, or after starting the target; every
        refusal is answered (never blocks the caller's reader)."""
        admitted = self._admit(caller, message, future)
        if admitted is None:
            return
        pending = admitted
        if pending.target in self.remote:
            self._route_remote(pending)
            return
        handle = self.supervisor.handle(pending.target)
        if handle is not None and handle.ready_now and handle.worker is not None:
            self._forward(pending, message, handle.worker)  # the hot path: no task, no await
        else:
            self._start_task(self._start_and_forward(pending, message), f"forward:{caller}")

    def take_result(self, sender: str, message: DelegateResultMessage) -> None:
        """A target's answer: hand it to its caller (dropped when already answered)."""
        pending = self._take(message.correlation_id)
        if pending is None:
            self.log.info(
                "late or unknown delegate result dropped",
                agent=sender,
                correlation_id=message.correlation_id,
            )
            return
        if pending.future is not None:  # an external caller gets the typed answer
            self._resolve(pending, DelegateAnswer.of(message))
            return
        self._deliver(pending, message)

    async def request(
        self,
        target: str,
        text: str,
        *,
        instance_key: str = wire.DEFAULT_INSTANCE_KEY,
        timeout_ms: int | None = None,
        trace_id: str | None = None,
        on_delta: DeltaSink | None = None,
        relay: bool = False,
        request_id: str = "",
    ) -> DelegateAnswer:
        """A request from outside the swarm, answered like any other.

        With ``on_delta`` the Turn streams: each piece of its model text is handed to
        ``on_delta`` as it arrives, until the answer (with ``relay``, the text of the agents
        it asks too). The sink is removed when this returns or is cancelled. ``request_id``
        names the Turn durably: a request whose Turn the target's conversation holds
        already takes that Turn up (or answers its recorded answer) instead of starting one.
        """
        future: asyncio.Future[DelegateAnswer] = asyncio.get_running_loop().create_future()
        correlation_id = wire.new_correlation_id()
        stream_id = correlation_id if on_delta is not None else ""
        handoff = Handoff(
            target=target,
            input=text,
            instance_key=instance_key,
            timeout_ms=timeout_ms or self.default_timeout_ms,
            trace_id=trace_id or wire.new_trace_id(),
            event_type="user.input",
            stream_id=stream_id,
            relay=relay and on_delta is not None,
            request_id=request_id,
        )
        message = build.delegate(EXTERNAL_CALLER, target, correlation_id, handoff)
        if on_delta is not None:
            self.streams[stream_id] = on_delta
        try:
            self.route_delegate(EXTERNAL_CALLER, message, future)
            return await future
        finally:
            if on_delta is not None:
                del self.streams[stream_id]

    def cancel(
        self, request_or_trace_id: str, reason: str = "cancelled by an operator"
    ) -> list[str]:
        """Cancel a running request, named by its request id or its trace id: every request
        and send of that trace is answered ``CANCELLED`` now, and every running agent is told
        to stop the trace's Turns at their next safe point. Returns the traces cancelled
        (none when nothing of that id runs)."""
        traces = {
            p.trace_id
            for p in self.pending.values()
            if request_or_trace_id in (p.correlation_id, p.trace_id) and p.trace_id
        }
        traces |= {
            s.handoff.trace_id
            for s in self.sends.values()
            if request_or_trace_id in (s.event_id, s.handoff.trace_id) and s.handoff.trace_id
        }
        for trace_id in sorted(traces):
            self.log.info("request cancelled", trace_id=trace_id, reason=reason)
            # Agents hear of it before any CANCELLED answer reaches them (one pipe, in order),
            # so a Turn whose delegate is answered CANCELLED stops instead of carrying on.
            for handle in self.supervisor.handles():
                if handle.worker is not None:
                    self._send_to(
                        handle.name,
                        build.event(ORCHESTRATOR, handle.name, Cancel(trace_id, reason)),
                    )
            for pending in [p for p in self.pending.values() if p.trace_id == trace_id]:
                self._fail(pending, Cancelled(f"the request was cancelled: {reason}"))
            self._cancel_remote_sends(trace_id, reason)
        return sorted(traces)

    def on_agent_exit(self, name: str) -> None:
        """Carry every request the dead agent owed over its restart (see
        :mod:`orchestrator.router_carry`); forget the ones it was waiting on; redeliver or
        carry the sends it had not finished; fail the questions it owed."""
        for agent, answer in list(self._questions.values()):
            if agent == name and not answer.done():
                answer.set_exception(AgentCrashed(f"agent {name!r} exited before answering"))
        for pending in list(self.pending.values()):
            if pending.target == name:
                self._carry(pending, name)
            elif pending.caller == name:
                self._take(pending.correlation_id)
        for send in [s for s in self.sends.values() if s.target == name]:
            if self.closing or self.supervisor.stopping:
                self._send_lost(send, ShuttingDown(f"agent {name!r} stopped with the swarm"))
            elif send.started:
                refusal = self._carry_send(send, name)
                if refusal is not None:
                    self._send_lost(send, refusal)
                else:
                    self._start_task(self._deliver_send(send), f"carry:{send.event_id}")
            elif send.attempts < SEND_DELIVERY_ATTEMPTS:
                self.log.info(
                    "send redelivered after its target exited before starting it",
                    caller=send.sender,
                    target=name,
                    event_id=send.event_id,
                )
                self._start_task(self._deliver_send(send), f"redeliver:{send.event_id}")
            else:
                self._send_lost(
                    send, AgentCrashed(f"agent {name!r} exited twice before starting it")
                )

    async def close(self) -> None:
        """Answer every pending request with ``SHUTTING_DOWN``; stop routing (and cancel the
        router's tasks if it owns them)."""
        self.closing = True
        for pending in list(self.pending.values()):
            self._fail(pending, ShuttingDown("the swarm is shutting down"))
        if self._owns_tasks:
            await self.tasks.aclose()
        await self.remote.aclose()

    # -- delegate / result ---------------------------------------------------------------------

    def _admit(
        self,
        caller: str,
        message: DelegateMessage,
        future: asyncio.Future[DelegateAnswer] | None,
    ) -> Pending | None:
        """Register the request and refuse it now if it cannot be served; arm its timeout."""
        correlation_id = message.correlation_id
        if correlation_id in self.pending:
            self.log.warning(
                "duplicate correlation id dropped", caller=caller, correlation_id=correlation_id
            )
            return None
        pending = Pending(correlation_id, caller, message.to, future=future, message=message)
        pending.started_at = time.time()
        self.pending[correlation_id] = pending
        self._per_caller[caller] += 1
        refusal, handoff = self._refusal(caller, message, pending)
        if refusal is not None or handoff is None:
            self._fail(pending, refusal or IpcError("refused"))
            return None
        timeout_ms = handoff.timeout_ms
        if timeout_ms is None or timeout_ms <= 0:
            timeout_ms = self.default_timeout_ms
        timeout_ms = min(timeout_ms, MAX_REQUEST_TIMEOUT_MS)
        pending.timer = self.clock.call_later(
            timeout_ms / 1000, self._timeout, correlation_id, timeout_ms
        )
        return pending

    def _refusal(
        self, caller: str, message: DelegateMessage, pending: Pending
    ) -> tuple[IpcError | None, Handoff | None]:
        """Why the request cannot be served (and its handoff when it can)."""
        if self.closing:
            return ShuttingDown("the swarm is shutting down"), None
        if self._per_caller[caller] > MAX_PENDING_PER_CALLER:
            limit = MAX_PENDING_PER_CALLER
            return TooManyPending(f"{caller!r} already waits on {limit} requests"), None
        try:
            handoff = Handoff.from_wire(message.payload)
        except IpcError as exc:
            return exc, None
        pending.trace_id, pending.instance_key = handoff.trace_id, handoff.instance_key
        pending.handoff = handoff
        pending.attempt = handoff.attempt
        if message.to == ORCHESTRATOR:  # a request that names its target only in the payload
            pending.target = handoff.target
        if not handoff.input.strip():
            return EmptyInput(f"the request to {pending.target!r} has no text"), None
        node = wire.call_node(pending.target, handoff.instance_key)
        chain = handoff.call_chain
        if node in chain:
            return chain_cycle(chain, node), None
        pending.awaited = node
        if chain and not handoff.background:
            pending.waiter = chain[-1]
            # Across requests: does the target (transitively) wait for the caller already?
            cycle = wait_cycle(node, chain[-1], self.pending.values())
            if cycle is not None:
                return cycle, None
        return None, handoff

    async def _running_worker(self, target: str) -> Worker | IpcError:
        """The target's worker once it is ready (starting it if needed), or why it is not."""
        try:
            handle = await self.supervisor.ensure_running(target)
        except IpcError as exc:
            return exc
        except TimeoutError:
            return AgentCrashed(f"agent {target!r} did not become ready")
        if handle.worker is None:
            return AgentCrashed(f"agent {target!r} exited while starting")
        return handle.worker

    async def _start_and_forward(self, pending: Pending, message: DelegateMessage) -> None:
        worker = await self._worker_for(pending)
        if isinstance(worker, IpcError):
            if pending.carrier is not None and not pending.carrier.done():
                return  # it died while starting: its exit carries the request to its restart
            self._fail(pending, worker)  # a no-op if it was answered meanwhile
        elif pending.correlation_id in self.pending:  # not timed out while the target started
            self._forward(pending, message, worker)

    def _forward(self, pending: Pending, message: DelegateMessage, worker: Worker) -> None:
        forwarded = message if message.to == pending.target else message.readdressed(pending.target)
        try:
            worker.send(forwarded)
        except Exception as exc:
            error = not_delivered(pending.target, "request", exc)
            if isinstance(error, AgentCrashed) and pending.handoff is not None:
                # The worker is dying and its exit not seen yet: that exit carries the request.
                self.log.info("request waits for its target's exit", target=pending.target)
                return
            self._fail(pending, error)

    def _take(self, correlation_id: str) -> Pending | None:
        """Remove a pending request (it is being answered or forgotten) and its timer."""
        pending = self.pending.pop(correlation_id, None)
        if pending is not None:
            self._stop_remote_call(correlation_id)
            self._per_caller[pending.caller] -= 1
            if pending.timer is not None:
                pending.timer.cancel()
        return pending

    def _resolve(self, pending: Pending, answer: DelegateAnswer) -> None:
        if pending.future is not None:
            if not pending.future.done():
                pending.future.set_result(answer)
            return
        self._deliver(
            pending,
            build.delegate_result(
                pending.target or ORCHESTRATOR,  # a request naming no target
                pending.caller,
                pending.correlation_id,
                answer,
            ),
        )

    def _deliver(self, pending: Pending, message: DelegateResultMessage) -> None:
        """Hand an answer to a calling agent (the target's own message is forwarded as is)."""
        if message.to != pending.caller:
            message = message.readdressed(pending.caller)
        if not self._send_to(pending.caller, message):
            self.log.info(
                "caller gone; result dropped", caller=pending.caller, target=pending.target
            )

    def _fail(self, pending: Pending, error: IpcError) -> None:
        if self._take(pending.correlation_id) is None:
            return
        self.log.info(
            "request failed",
            caller=pending.caller,
            target=pending.target,
            code=error.code,
            error=error.message,
        )
        self._resolve(pending, DelegateAnswer.failure(error))

    def _timeout(self, correlation_id: str, timeout_ms: int) -> None:
        pending = self.pending.get(correlation_id)
        if pending is not None:
            text = f"Agent request to {pending.target!r} timed out after {timeout_ms}ms"
            self._fail(pending, RequestTimeout(text))

    def _text_delta(self, sender: str, message: EventMessage, body: TextDelta) -> None:
        sink = self.streams.get(body.stream_id)
        if sink is not None:
            sink(sender, body)
        if self.on_text_delta is not None:
            self.on_text_delta(sender, body)

    # -- spawn, list, questions --------------------------------------------------------------------

    def _spawn_request(self, sender: str, message: EventMessage, body: SpawnRequest) -> None:
        self._start_task(self._spawn(sender, message, body), f"spawn:{sender}")

    async def _spawn(self, sender: str, message: EventMessage, body: SpawnRequest) -> None:
        self._reply(sender, message, await self.spawns.spawn(sender, body))

    def _list_request(self, sender: str, message: EventMessage, body: ListRequest) -> None:
        self._reply(sender, message, self.spawns.listed(sender, body))

    async def ask(self, agent: str, question: EventBody) -> EventBody:
        """Send the running ``agent`` a question and wait for its answer (the body of the kind
        :data:`~ipc.protocol.QUESTION_ANSWERS` names).

        Raises ``AgentUnavailable`` when it is not running, ``AgentCrashed`` when it exits
        first, ``RequestTimeout`` after ``AGENT_QUESTION_TIMEOUT_SECONDS``.
        """
        handle = self.supervisor.handle(agent)
        if handle is None or handle.worker is None:
            raise AgentUnavailable(f"agent {agent!r} is not running")
        correlation_id = wire.new_correlation_id()
        answer: asyncio.Future[EventBody] = asyncio.get_running_loop().create_future()
        self._questions[correlation_id] = (agent, answer)
        try:
            handle.worker.send(build.event(ORCHESTRATOR, agent, question, correlation_id))
            return await wait_for(
                self.clock, asyncio.shield(answer), AGENT_QUESTION_TIMEOUT_SECONDS
            )
        except TimeoutError:
            limit = AGENT_QUESTION_TIMEOUT_SECONDS
            text = f"agent {agent!r} did not answer {question.KIND} within {limit:g} s"
            raise RequestTimeout(text) from None
        finally:
            self._questions.pop(correlation_id, None)

    def _answer_to_question(self, sender: str, message: EventMessage, body: EventBody) -> None:
        asked = self._questions.get(message.correlation_id or "")
        if asked is None or asked[0] != sender:
            self.log.info("unexpected answer dropped", agent=sender, kind=body.KIND)
            return
        if not asked[1].done():
            asked[1].set_result(body)

    # -- helpers ------------------------------------------------------------------------------------

    def answer(self, agent: str, correlation_id: str, body: EventBody) -> None:
        """Send ``agent`` the answer ``body`` to its question ``correlation_id`` (dropped when
        the agent is gone: its question went with it)."""
        reply = build.event(ORCHESTRATOR, agent, body, correlation_id)
        if not self._send_to(agent, reply):
            self.log.info("answer not delivered", agent=agent, kind=body.KIND)

    def _reply(self, sender: str, message: EventMessage, body: EventBody) -> None:
        reply = build.event(ORCHESTRATOR, sender, body, message.correlation_id)
        if not self._send_to(sender, reply):
            self.log.info("reply not delivered", agent=sender, kind=body.KIND)

    def _send_to(self, agent: str, message: IpcMessage) -> bool:
        """Queue ``message`` to ``agent``'s running worker; ``False`` when it has none."""
        handle = self.supervisor.handle(agent)
        if handle is None or handle.worker is None:
            return False
        try:
            handle.worker.send(message)
        except Exception as exc:
            self.log.info("message not delivered", agent=agent, error=str(exc))
            return False
        return True

    def _start_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[Any]:
        return self.tasks.start_soon(coro, name)
