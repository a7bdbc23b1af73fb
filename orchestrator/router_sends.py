"""The router's fire-and-forget half: a ``send`` tracked by its ``eventId`` until the target
reports its Turn done, delivered once more to a restarted target whose Turn never started (and
carried over the restart when it had started, see :mod:`orchestrator.router_carry`), and
otherwise reported lost to its sender (see :mod:`orchestrator.router`).
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from goondan import crashpoints
from goondan.defaults import MAX_SENDS_IN_FLIGHT_PER_CALLER
from ipc import (
    AgentCrashed,
    EmptyInput,
    EventMessage,
    IpcError,
    IpcMessage,
    ShuttingDown,
    TooManyPending,
    build,
)
from ipc import protocol as wire
from ipc.channel import PeerGone
from ipc.codec import FrameTooLarge, Unencodable
from ipc.delegation import Handoff
from ipc.events import Send, SendDone, SendFailed, SendRefused, SendStarted
from ipc.protocol import ORCHESTRATOR, MalformedPayload
from orchestrator.transport import Worker

if TYPE_CHECKING:
    from orchestrator.remote_agents import RemoteAgents


@dataclass(eq=False)
class InFlightSend:
    """A fire-and-forget send between delivery and the end of the Turn it started."""

    sender: str
    handoff: Handoff
    """As the target receives it (``source`` filled in; kept for a redelivery)."""
    started: bool = False
    attempts: int = 0
    """Deliveries that reached a running target's worker."""
    delivery: int = 0
    """The newest delivery started: an older one still waiting for its target gives way."""
    on_settled: Callable[[IpcError | None], None] | None = None
    """Told once when the send is done with: ``None`` when its Turn ended, else why it was
    not (fully) handled. For senders outside the swarm (connections)."""
    on_answer: Callable[[str | None, str | None], None] | None = None
    """Told the answer of the send's Turn (``answer``, ``turn_error``) when it ends, just
    before ``on_settled``: a Connection hands it back to its connector."""
    on_started: Callable[[], None] | None = None
    """Told once when the target reports the send's Turn started: from then on it is never
    delivered again (a Connection marks its event delivered then)."""

    @property
    def event_id(self) -> str:
        """The send's id, as its sender's tool result reported it."""
        return self.handoff.event_id

    @property
    def target(self) -> str:
        """The agent that runs the Turn."""
        return self.handoff.target


DeliveryLost = Callable[[InFlightSend, IpcError], None]
"""Told of every send that could not be delivered, and why."""


class SendRouting:
    """The sends of a :class:`~orchestrator.router.Router`, which holds the table and gives
    the way to a target's worker."""

    sends: dict[str, InFlightSend]
    """Sends between delivery and the end of their Turn, by event id."""
    _sends_per_caller: Counter[str]
    closing: bool
    on_delivery_lost: DeliveryLost | None
    log: Any
    remote: RemoteAgents
    _send_remote: Callable[[InFlightSend], Coroutine[Any, Any, None]]
    """Deliver a send to a RemoteAgent (:class:`~orchestrator.router_remote.RemoteRouting`)."""

    @abstractmethod
    async def _running_worker(self, target: str) -> Worker | IpcError:
        """``target``'s worker, started if need be, or why there is none."""

    @abstractmethod
    def _send_to(self, agent: str, message: IpcMessage) -> bool:
        """Queue ``message`` to ``agent``'s running worker; ``False`` when it has none."""

    @abstractmethod
    def _start_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[Any] | None:
        """Run ``coro`` in the background."""

    def _accept_send(self, sender: str, message: EventMessage, body: Send) -> None:
        self.send(sender, body.handoff)

    def send(
        self,
        sender: str,
        handoff: Handoff,
        on_settled: Callable[[IpcError | None], None] | None = None,
        on_answer: Callable[[str | None, str | None], None] | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        """Deliver a fire-and-forget ``handoff`` from ``sender`` (an agent, or a connection);
        ``on_settled`` is told once when it is done with, delivered or not; ``on_started``
        once its Turn started."""
        event_id = handoff.event_id or wire.new_event_id()
        send = InFlightSend(
            sender,
            msgspec.structs.replace(handoff, event_id=event_id, source=sender),
            on_settled=on_settled,
            on_answer=on_answer,
            on_started=on_started,
        )
        if event_id in self.sends:
            self.log.warning("duplicate send dropped", caller=sender, event_id=event_id)
            return
        self.sends[event_id] = send
        self._sends_per_caller[sender] += 1
        if self.closing:
            self._send_lost(send, ShuttingDown("the swarm is shutting down"))
        elif not handoff.input.strip():
            self._send_lost(send, EmptyInput(f"the send to {handoff.target!r} has no text"))
        elif self._sends_per_caller[sender] > MAX_SENDS_IN_FLIGHT_PER_CALLER:
            limit = MAX_SENDS_IN_FLIGHT_PER_CALLER
            self._send_lost(send, TooManyPending(f"{sender!r} already has {limit} sends in flight"))
        else:
            self._start_task(self._deliver_send(send), f"send:{event_id}")

    async def _deliver_send(self, send: InFlightSend) -> None:
        send.delivery += 1
        delivery = send.delivery
        if send.target in self.remote:
            send.attempts += 1
            await self._send_remote(send)
            return
        worker = await self._running_worker(send.target)
        if self.sends.get(send.event_id) is not send or send.delivery != delivery:
            return  # settled meanwhile, or its target's exit handed it to a newer delivery
        if isinstance(worker, IpcError):
            self._send_lost(send, worker)
            return
        crashpoints.point("send.delivering")
        try:
            worker.send(build.event(send.sender, send.target, Send(send.handoff)))
        except (PeerGone, ConnectionError):
            # The worker died and its exit is not seen yet; the send never reached it. That
            # exit delivers it again (see Router.on_agent_exit).
            self.log.info("send waits for its target's exit", target=send.target)
            return
        except Exception as exc:
            self._send_lost(send, not_delivered(send.target, "send", exc))
            return
        send.attempts += 1

    def _tracked_send(self, target: str, event_id: str) -> InFlightSend | None:
        send = self.sends.get(event_id)
        return send if send is not None and send.target == target else None

    def _send_started(self, target: str, message: EventMessage, body: SendStarted) -> None:
        send = self._tracked_send(target, body.event_id)
        if send is not None and not send.started:
            send.started = True
            if send.on_started is not None:
                send.on_started()

    def _send_done(self, target: str, message: EventMessage, body: SendDone) -> None:
        send = self._tracked_send(target, body.event_id)
        if send is not None:
            if send.on_answer is not None:
                send.on_answer(body.answer, body.turn_error)
            self._finish_send(send)

    def _send_refused(self, target: str, message: EventMessage, body: SendRefused) -> None:
        send = self._tracked_send(target, body.event_id)
        if send is not None:
            self._send_lost(send, body.error)

    def _finish_send(self, send: InFlightSend, error: IpcError | None = None) -> None:
        if self.sends.pop(send.event_id, None) is not None:
            self._sends_per_caller[send.sender] -= 1
            if send.on_settled is not None:
                send.on_settled(error)

    def _send_lost(self, send: InFlightSend, error: IpcError) -> None:
        """Report a send that will not be (fully) handled to whoever sent it."""
        if self.sends.get(send.event_id) is not send:
            return
        self._finish_send(send, error)
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
        report = SendFailed(send.event_id, send.target, send.handoff.caller_instance_key, error)
        # A sender outside the swarm, or gone: the log and the event log keep it.
        self._send_to(send.sender, build.event(ORCHESTRATOR, send.sender, report))


def not_delivered(target: str, what: str, exc: Exception) -> IpcError:
    """Why a message could not be handed to ``target``'s worker: one it cannot encode is the
    message's fault (the agent is as alive as before), anything else means the agent is gone."""
    if isinstance(exc, Unencodable):
        return MalformedPayload(f"the {what} to {target!r} cannot be sent: {exc}")
    if isinstance(exc, FrameTooLarge):
        return IpcError(f"the {what} to {target!r} is too large to send: {exc}", code=exc.code)
    return AgentCrashed(f"agent {target!r} is gone: {exc}")
