"""Routing between agents, and the pending-request table that guarantees every answer.

Every ``delegate`` gets exactly one ``delegate_result``: the target's, or a structured error
from here when the target is unknown (``AGENT_NOT_FOUND``), would close a cycle
(``CIRCULAR_CALL_DETECTED``), cannot start (``AGENT_UNAVAILABLE``), dies before answering
(``AGENT_CRASHED``), takes longer than the request's timeout (``AGENT_REQUEST_TIMEOUT``), or the
swarm is shutting down (``SHUTTING_DOWN``). A target's answer that arrives after its caller was
already answered is dropped (and logged).

A fire-and-forget ``send`` is tracked by its ``eventId`` until the target reports its Turn done.
If the target dies with the send still queued (its Turn never started, so it had no effect), the
send is delivered once more to the restarted target; if it dies mid-Turn, or refuses or cannot
take the send, the sender's instance gets a ``send_failed`` report with the structured error.
Nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from ipc import (
    ORCHESTRATOR,
    AgentCrashed,
    AgentUnavailable,
    CircularCall,
    DelegateMessage,
    DelegateResultMessage,
    EmptyInput,
    EventMessage,
    IpcError,
    IpcMessage,
    RequestTimeout,
    ShuttingDown,
    TooManyPending,
    event,
)
from orchestrator.supervisor import Supervisor
from orchestrator.transport import Worker

DEFAULT_TIMEOUT_MS = 60_000
AGENT_QUERY_TIMEOUT_SECONDS = 10.0
"""How long the Orchestrator waits for an agent's answer to a question of its own (a spawn's
instance, a delete)."""
MAX_PENDING_PER_CALLER = 1024
MAX_SENDS_IN_FLIGHT_PER_CALLER = 1024
SEND_DELIVERY_ATTEMPTS = 2
"""A send whose target died before starting its Turn is delivered once more, then reported."""
EXTERNAL = "user"
"""The caller name of requests that come from outside the swarm (CLI, control socket)."""


@dataclass(eq=False)
class Pending:
    """A request waiting for its answer."""

    correlation_id: str
    caller: str
    target: str
    timer: asyncio.TimerHandle | None = None
    future: asyncio.Future[dict[str, Any]] | None = None
    """Set for external callers: resolved with the answer payload."""
    waiter: str | None = None
    """The conversation (``agent@instance``) whose Turn is blocked on this answer: the
    caller's, for a synchronous request from an agent; ``None`` otherwise."""
    awaited: str = ""
    """The conversation (``agent@instance``) that must run the Turn answering it."""


@dataclass(eq=False)
class InFlightSend:
    """A fire-and-forget send between delivery and the end of the Turn it started."""

    event_id: str
    sender: str
    sender_instance_key: str
    target: str
    message: EventMessage
    """The ``send`` event as the target receives it (kept for a redelivery)."""
    started: bool = False
    attempts: int = 0


DeliveryLost = Callable[[InFlightSend, IpcError], None]


@dataclass
class SpawnRecord:
    """An instance prepared with ``agents__spawn``."""

    target: str
    instance_key: str
    owner_agent: str
    owner_instance_key: str
    created_at: str
    cwd: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``agents__list`` row."""
        return {
            "target": self.target,
            "instanceKey": self.instance_key,
            "ownerAgent": self.owner_agent,
            "ownerInstanceKey": self.owner_instance_key,
            "createdAt": self.created_at,
            "cwd": self.cwd,
        }


@dataclass
class Router:
    """Routes messages between agents through the supervisor."""

    supervisor: Supervisor
    default_timeout_ms: int = DEFAULT_TIMEOUT_MS
    pending: dict[str, Pending] = field(default_factory=dict)
    spawns: dict[tuple[str, str, str, str], SpawnRecord] = field(default_factory=dict)
    sends: dict[str, InFlightSend] = field(default_factory=dict)
    on_delivery_lost: DeliveryLost | None = None
    """Told of every send that could not be delivered (the daemon logs it as an event)."""
    closing: bool = False
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _per_caller: Counter[str] = field(default_factory=Counter)
    _sends_per_caller: Counter[str] = field(default_factory=Counter)
    _queries: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = field(default_factory=dict)
    """Questions to agents (:meth:`ask`) waiting for their answer, by correlation id."""
    log: Any = field(default_factory=lambda: structlog.get_logger("goondan.router"))

    # -- entry points -------------------------------------------------------------------------

    def on_message(self, sender: str, message: IpcMessage) -> None:
        """Handle one message from agent ``sender`` (never blocks the sender's reader)."""
        if isinstance(message, DelegateMessage):
            self._route_delegate(sender, message)
        elif isinstance(message, DelegateResultMessage):
            self._result(sender, message)
        elif isinstance(message, EventMessage):
            kind = message.kind
            if kind.endswith("_result") and message.correlation_id in self._queries:
                _, answer = self._queries.pop(message.correlation_id)
                if not answer.done():
                    answer.set_result({k: v for k, v in message.fields.items() if k != "kind"})
            elif kind == "send":
                self._accept_send(sender, message)
            elif kind in ("send_started", "send_done", "send_refused"):
                self._send_progress(sender, kind, message.fields)
            elif kind == "spawn_request":
                self._spawn_task(self._spawn_request(sender, message))
            elif kind == "list_request":
                self._list_request(sender, message)
            else:
                self.log.debug("event not routed", agent=sender, kind=kind)
        else:
            self.log.warning("unexpected message from agent", agent=sender, type=message.type)

    async def request(
        self,
        target: str,
        text: str,
        *,
        instance_key: str = "default",
        timeout_ms: int | None = None,
        trace_id: str | None = None,
    ) -> dict[str, Any]:
        """A request from outside the swarm; returns the ``delegate_result`` payload."""
        correlation_id = f"corr_{secrets.token_hex(12)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        payload: dict[str, Any] = {
            "target": target,
            "input": text,
            "instanceKey": instance_key,
            "timeoutMs": timeout_ms or self.default_timeout_ms,
            "traceId": trace_id or secrets.token_hex(16),
            "callChain": [],
            "eventType": "user.input",
        }
        message = DelegateMessage(
            sender=EXTERNAL, to=target, correlation_id=correlation_id, payload=payload
        )
        self._route_delegate(EXTERNAL, message, future)
        return await future

    def on_agent_exit(self, name: str) -> None:
        """Answer every request the dead agent owed; forget the ones it was waiting on;
        redeliver or report the sends it had not finished; fail the questions it owed."""
        for agent, answer in list(self._queries.values()):
            if agent == name and not answer.done():
                answer.set_exception(AgentCrashed(f"agent {name!r} exited before answering"))
        for pending in list(self.pending.values()):
            if pending.target == name:
                self._fail(pending, AgentCrashed(f"agent {name!r} exited before answering"))
            elif pending.caller == name:
                self._forget(pending)
        for send in [s for s in self.sends.values() if s.target == name]:
            if self.closing:
                self._send_lost(send, ShuttingDown(f"agent {name!r} stopped with the swarm"))
            elif not send.started and send.attempts < SEND_DELIVERY_ATTEMPTS:
                self.log.info(
                    "send redelivered after its target exited before starting it",
                    caller=send.sender,
                    target=name,
                    event_id=send.event_id,
                )
                self._spawn_task(self._deliver_send(send))
            else:
                what = "during the Turn it started" if send.started else "twice before starting it"
                self._send_lost(send, AgentCrashed(f"agent {name!r} exited {what}"))

    async def close(self) -> None:
        """Answer every pending request with ``SHUTTING_DOWN``; stop routing."""
        self.closing = True
        for pending in list(self.pending.values()):
            self._fail(pending, ShuttingDown("the swarm is shutting down"))
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- delegate / result ---------------------------------------------------------------------

    def _route_delegate(
        self,
        caller: str,
        message: DelegateMessage,
        future: asyncio.Future[dict[str, Any]] | None = None,
    ) -> None:
        """Admit the request, then forward it at once, or after starting the target."""
        admitted = self._admit(caller, message, future)
        if admitted is None:
            return
        pending, target = admitted
        handle = self.supervisor.handles.get(target)
        if handle is not None and handle.ready_now and handle.worker is not None:
            self._forward(pending, message, handle.worker)  # the hot path: no task, no await
        else:
            self._spawn_task(self._start_and_forward(pending, message, target))

    def _admit(
        self,
        caller: str,
        message: DelegateMessage,
        future: asyncio.Future[dict[str, Any]] | None,
    ) -> tuple[Pending, str] | None:
        """Register the request and refuse it now if it cannot be served; arm its timeout."""
        correlation_id = message.correlation_id
        target = message.to if message.to != ORCHESTRATOR else str(message.fields.get("target", ""))
        if correlation_id in self.pending:
            self.log.warning(
                "duplicate correlation id dropped", caller=caller, correlation_id=correlation_id
            )
            return None
        pending = Pending(
            correlation_id=correlation_id, caller=caller, target=target, future=future
        )
        self.pending[correlation_id] = pending
        if self.closing:
            self._fail(pending, ShuttingDown("the swarm is shutting down"))
            return None
        self._per_caller[caller] += 1
        if self._per_caller[caller] > MAX_PENDING_PER_CALLER:
            self._fail(
                pending,
                TooManyPending(f"{caller!r} already waits on {MAX_PENDING_PER_CALLER} requests"),
            )
            return None
        if not isinstance(message.payload, dict):
            self._fail(
                pending,
                IpcError(
                    f"a delegate's payload must be an object, got {type(message.payload).__name__}",
                    code="IPC_MALFORMED_PAYLOAD",
                ),
            )
            return None
        if not str(message.fields.get("input", "")).strip():
            self._fail(pending, EmptyInput(f"the request to {target!r} has no text"))
            return None
        chain = [str(n) for n in message.fields.get("callChain") or []]
        node = f"{target}@{message.fields.get('instanceKey') or 'default'}"
        if node in chain:
            path = " -> ".join([*chain, node])
            self._fail(
                pending,
                CircularCall(f"Circular call detected: {path}", details={"chain": [*chain, node]}),
            )
            return None
        pending.awaited = node
        if chain and not message.fields.get("async"):
            pending.waiter = chain[-1]
            # Across requests: does the target (transitively) wait for the caller already?
            # Instance queues are serial, so that would deadlock until both time out.
            loop = self._wait_path(node, chain[-1])
            if loop is not None:
                cycle = [chain[-1], *loop]
                self._fail(
                    pending,
                    CircularCall(
                        "Circular call detected across requests: " + " -> ".join(cycle),
                        details={"chain": cycle},
                    ),
                )
                return None
        timeout_ms = _positive_int(message.fields.get("timeoutMs"), self.default_timeout_ms)
        pending.timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._timeout, correlation_id, timeout_ms
        )
        return pending, target

    def _wait_path(self, start: str, goal: str) -> list[str] | None:
        """The conversations from ``start`` to ``goal`` along "blocked waiting for" edges of
        the requests now pending, or ``None`` when ``start`` does not wait for ``goal``."""
        edges: dict[str, list[str]] = {}
        for pending in self.pending.values():
            if pending.waiter is not None and pending.awaited:
                edges.setdefault(pending.waiter, []).append(pending.awaited)
        if start not in edges:
            return None
        trail: dict[str, str | None] = {start: None}
        frontier = [start]
        while frontier:
            current = frontier.pop()
            for following in edges.get(current, ()):
                if following in trail:
                    continue
                trail[following] = current
                if following == goal:
                    path = [following]
                    step: str | None = current
                    while step is not None:
                        path.append(step)
                        step = trail[step]
                    return path[::-1]
                frontier.append(following)
        return None

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

    async def _start_and_forward(
        self, pending: Pending, message: DelegateMessage, target: str
    ) -> None:
        worker = await self._running_worker(target)
        if isinstance(worker, IpcError):
            self._fail(pending, worker)  # a no-op if it was answered meanwhile
        elif pending.correlation_id in self.pending:  # not timed out while the target started
            self._forward(pending, message, worker)

    def _forward(self, pending: Pending, message: DelegateMessage, worker: Worker) -> None:
        forwarded = (
            message
            if message.to == pending.target
            else message.model_copy(update={"to": pending.target})
        )
        try:
            worker.send(forwarded)
        except Exception as exc:
            self._fail(pending, AgentCrashed(f"agent {pending.target!r} is gone: {exc}"))

    def _take(self, correlation_id: str) -> Pending | None:
        """Remove a pending request (it is being answered or forgotten) and its timer."""
        pending = self.pending.pop(correlation_id, None)
        if pending is not None:
            self._per_caller[pending.caller] -= 1
            if pending.timer is not None:
                pending.timer.cancel()
        return pending

    def _result(self, sender: str, message: DelegateResultMessage) -> None:
        pending = self._take(message.correlation_id)
        if pending is None:
            self.log.info(
                "late or unknown delegate result dropped",
                agent=sender,
                correlation_id=message.correlation_id,
            )
            return
        self._deliver(pending, message.fields, message)

    def _deliver(
        self,
        pending: Pending,
        payload: dict[str, Any],
        message: DelegateResultMessage | None = None,
    ) -> None:
        """Hand the answer to the caller; ``message`` (the target's own) is forwarded as is."""
        if pending.future is not None:
            if not pending.future.done():
                pending.future.set_result(payload)
            return
        handle = self.supervisor.handles.get(pending.caller)
        worker = handle.worker if handle is not None else None
        if worker is None:
            self.log.info(
                "caller gone; result dropped", caller=pending.caller, target=pending.target
            )
            return
        if message is None or message.to != pending.caller:
            message = DelegateResultMessage(
                sender=pending.target or ORCHESTRATOR,  # a request naming no target
                to=pending.caller,
                correlation_id=pending.correlation_id,
                payload=payload,
            )
        try:
            worker.send(message)
        except Exception as exc:
            self.log.info("caller gone; result dropped", caller=pending.caller, error=str(exc))

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
        self._deliver(pending, {"status": "error", "error": error.to_dict()})

    def _forget(self, pending: Pending) -> None:
        self._take(pending.correlation_id)

    def _timeout(self, correlation_id: str, timeout_ms: int) -> None:
        pending = self.pending.get(correlation_id)
        if pending is not None:
            self._fail(
                pending,
                RequestTimeout(
                    f"Agent request to {pending.target!r} timed out after {timeout_ms}ms"
                ),
            )

    # -- fire-and-forget, spawn, list -------------------------------------------------------------

    def _accept_send(self, sender: str, message: EventMessage) -> None:
        payload = message.fields
        target = str(payload.get("target", ""))
        event_id = str(payload.get("eventId") or f"agent_event_{secrets.token_hex(8)}")
        fields = {k: v for k, v in payload.items() if k != "kind"}
        send = InFlightSend(
            event_id=event_id,
            sender=sender,
            sender_instance_key=str(payload.get("callerInstanceKey") or "default"),
            target=target,
            message=event(
                sender, target, "send", **{**fields, "eventId": event_id, "source": sender}
            ),
        )
        if event_id in self.sends:
            self.log.warning("duplicate send dropped", caller=sender, event_id=event_id)
            return
        self.sends[event_id] = send
        self._sends_per_caller[sender] += 1
        if self.closing:
            self._send_lost(send, ShuttingDown("the swarm is shutting down"))
        elif not str(payload.get("input", "")).strip():
            self._send_lost(send, EmptyInput(f"the send to {target!r} has no text"))
        elif self._sends_per_caller[sender] > MAX_SENDS_IN_FLIGHT_PER_CALLER:
            limit = MAX_SENDS_IN_FLIGHT_PER_CALLER
            self._send_lost(send, TooManyPending(f"{sender!r} already has {limit} sends in flight"))
        else:
            self._spawn_task(self._deliver_send(send))

    async def _deliver_send(self, send: InFlightSend) -> None:
        send.attempts += 1
        worker = await self._running_worker(send.target)
        if isinstance(worker, IpcError):
            self._send_lost(send, worker)
            return
        if send.event_id not in self.sends:
            return
        try:
            worker.send(send.message)
        except Exception as exc:
            self._send_lost(send, AgentCrashed(f"agent {send.target!r} is gone: {exc}"))

    def _send_progress(self, target: str, kind: str, payload: dict[str, Any]) -> None:
        send = self.sends.get(str(payload.get("eventId") or ""))
        if send is None or send.target != target:
            return
        if kind == "send_started":
            send.started = True
        elif kind == "send_done":
            self._finish_send(send)
        else:
            self._send_lost(send, IpcError.from_dict(payload.get("error")))

    def _finish_send(self, send: InFlightSend) -> None:
        if self.sends.pop(send.event_id, None) is not None:
            self._sends_per_caller[send.sender] -= 1

    def _send_lost(self, send: InFlightSend, error: IpcError) -> None:
        """Report a send that will not be (fully) handled to whoever sent it."""
        if self.sends.get(send.event_id) is not send:
            return
        self._finish_send(send)
        self.log.warning(
            "send not delivered",
            caller=send.sender,
            target=send.target,
            event_id=send.event_id,
            code=error.code,
            error=error.message,
        )
        if self.on_delivery_lost is not None:
            self.on_delivery_lost(send, error)
        handle = self.supervisor.handles.get(send.sender)
        if handle is None or handle.worker is None:
            return  # the sender is outside the swarm, or gone: the log and event log keep it
        try:
            handle.worker.send(
                event(
                    ORCHESTRATOR,
                    send.sender,
                    "send_failed",
                    eventId=send.event_id,
                    target=send.target,
                    instanceKey=send.sender_instance_key,
                    error=error.to_dict(),
                )
            )
        except Exception as exc:
            self.log.info(
                "sender gone; send failure not reported", caller=send.sender, error=str(exc)
            )

    async def _spawn_request(self, sender: str, message: EventMessage) -> None:
        """``agents__spawn``: the target agent creates the instance unless it exists (it owns
        the instance directories, so ``spawned`` is true only for the one that made it)."""
        payload = message.fields
        target = str(payload.get("target", ""))
        owner_key = str(payload.get("ownerInstanceKey") or "default")
        instance_key = str(
            payload.get("instanceKey") or f"{target}-instance-{secrets.token_hex(4)}"
        )
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
        reply: dict[str, Any]
        try:
            await self.supervisor.ensure_running(target)
            answer = await self.ask(
                target,
                "prepare_instance",
                instanceKey=instance_key,
                cwd=cwd,
                owner=sender,
                ownerInstanceKey=owner_key,
            )
            if not answer.get("ok"):
                raise IpcError.from_dict(answer.get("error"))
            if answer.get("created"):
                self.spawns[(sender, owner_key, target, instance_key)] = SpawnRecord(
                    target=target,
                    instance_key=instance_key,
                    owner_agent=sender,
                    owner_instance_key=owner_key,
                    created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
                    cwd=got if isinstance(got := answer.get("cwd"), str) else None,
                )
            reply = {
                "status": "ok",
                "target": target,
                "instanceKey": instance_key,
                "spawned": bool(answer.get("created")),
                "cwd": answer.get("cwd"),
            }
        except IpcError as exc:
            reply = {"status": "error", "error": exc.to_dict()}
        self._reply(sender, message, "spawn_result", reply)

    async def ask(self, agent: str, kind: str, **fields: Any) -> dict[str, Any]:
        """Send the running ``agent`` an event ``kind`` and wait for its ``<kind>_result``.

        Raises ``AgentUnavailable`` when it is not running, ``AgentCrashed`` when it exits
        first, ``RequestTimeout`` after ``AGENT_QUERY_TIMEOUT_SECONDS``.
        """
        handle = self.supervisor.handles.get(agent)
        if handle is None or handle.worker is None:
            raise AgentUnavailable(f"agent {agent!r} is not running")
        correlation_id = f"query_{secrets.token_hex(8)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._queries[correlation_id] = (agent, answer)
        try:
            handle.worker.send(
                event(ORCHESTRATOR, agent, kind, correlation_id=correlation_id, **fields)
            )
            async with asyncio.timeout(AGENT_QUERY_TIMEOUT_SECONDS):
                return await answer
        except TimeoutError:
            message = (
                f"agent {agent!r} did not answer {kind} within {AGENT_QUERY_TIMEOUT_SECONDS:g} s"
            )
            raise RequestTimeout(message) from None
        finally:
            self._queries.pop(correlation_id, None)

    def _list_request(self, sender: str, message: EventMessage) -> None:
        owner_key = str(message.fields.get("ownerInstanceKey") or "default")
        every = bool(message.fields.get("includeAll"))
        records = sorted(
            (
                r
                for r in self.spawns.values()
                if every or (r.owner_agent == sender and r.owner_instance_key == owner_key)
            ),
            key=lambda r: r.created_at,
        )
        self._reply(
            sender,
            message,
            "list_result",
            {"status": "ok", "agents": [r.to_json() for r in records]},
        )

    def _reply(
        self, sender: str, message: EventMessage, kind: str, payload: dict[str, Any]
    ) -> None:
        handle = self.supervisor.handles.get(sender)
        if handle is None or handle.worker is None:
            return
        try:
            handle.worker.send(
                event(ORCHESTRATOR, sender, kind, correlation_id=message.correlation_id, **payload)
            )
        except Exception as exc:
            self.log.info("reply not delivered", agent=sender, kind=kind, error=str(exc))

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("routing task failed", error=repr(task.exception()))


def _positive_int(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return int(value)
