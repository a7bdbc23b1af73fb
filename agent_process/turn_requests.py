"""The Turns callers ask this agent for: a ``delegate`` (a request, answered when its Turn
ends) or a ``send`` (reported started and done, so the Orchestrator can redeliver one lost
before it started). Each is admitted on its instance by the agent's ``policy.concurrency``
(queued, refused ``INSTANCE_BUSY`` or interrupting the running Turn); none starts once the
agent drains.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from agent_process.instance_files import InstanceKeyConflict
from agent_process.instances import InstanceBusy, InstanceManager, InstanceQueueFull
from agent_process.outbox import Outbox
from agent_process.redelivery import EarlierDelivery, earlier_delivery, send_metadata
from agent_process.shutdown import Shutdown
from agent_process.turn_types import TurnInput, TurnResult
from goondan.errors import DeliveryCode
from ipc import DelegateMessage, EventMessage, IpcError, ShuttingDown
from ipc import protocol as wire
from ipc.delegation import Handoff
from ipc.events import RestartRequest, Send, SendDone, SendStarted, TurnCompleted
from ipc.protocol import EXTERNAL_CALLER, ORCHESTRATOR

AGENT_CRASHED = DeliveryCode.AGENT_CRASHED
MAX_CONNECTION_ANSWER_CHARS = 256 * 1024
"""The longest answer handed back to a Connection's connector (longer ones are cut)."""


class TurnRequests:
    """Starts the Turns of ``delegate`` and ``send`` messages and answers them."""

    instances: InstanceManager | None = None
    """Where the Turns queue; set once the agent has booted."""

    def __init__(self, agent_name: str, outbox: Outbox, shutdown: Shutdown, log: Any) -> None:
        self.agent_name = agent_name
        self._outbox = outbox
        self._shutdown = shutdown
        self._log = log
        self._sends_running: set[str] = set()
        """Event ids of the sends whose Turns are queued or running here."""

    def on_delegate(self, message: DelegateMessage) -> None:
        """A request for a Turn, answered with its result."""
        try:
            handoff = Handoff.from_wire(message.payload)
        except IpcError as exc:
            self._outbox.refuse(message.sender, message.correlation_id, exc)
            return
        self.start(message.sender, handoff, message.correlation_id)

    def on_send(self, message: EventMessage, body: Send) -> None:
        """A fire-and-forget event for a Turn (from an agent, a user or a connector)."""
        self.start(body.handoff.source or message.sender, body.handoff, None)

    def start(self, sender: str, handoff: Handoff, correlation_id: str | None) -> None:
        """Queue the Turn of a request (answered when it ends) or of a send (reported started
        and done, so the Orchestrator can redeliver one lost before it started)."""
        assert self.instances is not None
        outbox = self._outbox
        send_id = handoff.event_id if correlation_id is None else ""
        if self._shutdown.draining:
            refusal = ShuttingDown(f"agent {self.agent_name!r} is shutting down")
            outbox.refuse(sender, correlation_id, refusal, send_id)
            return
        instance_key = handoff.instance_key
        on_start = self._reporting_start(send_id) if send_id else None
        try:
            asked = self._fresh_input(sender, handoff, correlation_id, send_id)
            if asked is None:
                return
            future = self.instances.admit(instance_key, asked, on_start=on_start)
            if send_id:
                self._sends_running.add(send_id)
        except Exception as exc:  # a full queue, an unreadable conversation, a full disk, ...
            outbox.refuse(sender, correlation_id, self._unavailable(instance_key, exc), send_id)
            return

        def finished(done: asyncio.Future[TurnResult]) -> None:
            self._sends_running.discard(send_id)
            if done.cancelled():  # queued or running when the agent stopped
                stopped = ShuttingDown(
                    f"agent {self.agent_name!r} stopped before the Turn finished "
                    "(the shutdown grace period ended first)"
                )
                outbox.refuse(sender, correlation_id, stopped)
                return
            self._finished(sender, instance_key, correlation_id, send_id, done.result())

        future.add_done_callback(finished)

    def _reporting_start(self, send_id: str) -> Callable[[], None]:
        outbox = self._outbox

        def on_start() -> None:
            # Out now, before the Turn can have any effect: a send whose Turn never started
            # is delivered again, one that started never is.
            outbox.tell(SendStarted(send_id))
            outbox.channel.write_now()

        return on_start

    def _unavailable(self, instance_key: str, exc: Exception) -> IpcError:
        """The refusal of a Turn its instance could not take (``exc`` says why)."""
        code = getattr(exc, "code", None)
        if not isinstance(exc, InstanceQueueFull | InstanceKeyConflict | InstanceBusy):
            self._log.error(
                "instance unavailable", instance_key=instance_key, code=code, error=str(exc)
            )
        return IpcError(
            str(exc) or type(exc).__name__,
            code=code if isinstance(code, str) else DeliveryCode.E_INTERNAL,
        )

    def _fresh_input(
        self, sender: str, handoff: Handoff, correlation_id: str | None, send_id: str
    ) -> TurnInput | None:
        """The input of the Turn ``handoff`` asks for; ``None`` (answered here) for a send
        delivered again whose Turn is running, or started before a restart."""
        asked = turn_input(sender, handoff, correlation_id or send_id)
        if not send_id:
            return asked
        if send_id in self._sends_running:
            # Delivered twice to this process (a redelivery racing the first delivery): the
            # first one's Turn answers for both (the Orchestrator tracks one send).
            self._log.info("send delivered twice; taken once", event_id=send_id)
            return None
        if asked.may_resume:  # carried after its Turn started: the Turn takes it up again
            return dataclasses.replace(asked, message_metadata=send_metadata(send_id))
        assert self.instances is not None
        messages = self.instances.get(handoff.instance_key).store.messages
        earlier = earlier_delivery(messages, send_id)
        if earlier is not None:
            self._delivered_again(sender, handoff.instance_key, send_id, earlier)
            return None
        return dataclasses.replace(asked, message_metadata=send_metadata(send_id))

    def _delivered_again(
        self, sender: str, instance_key: str, send_id: str, earlier: EarlierDelivery
    ) -> None:
        """Report a send whose Turn started before the agent restarted as started and done,
        without a second Turn (see :mod:`agent_process.redelivery`)."""
        self._log.info(
            "send delivered again after a restart; its Turn had started",
            instance_key=instance_key,
            event_id=send_id,
            answered=earlier.answer is not None,
        )
        self._outbox.tell(SendStarted(send_id))
        if not sender.startswith(wire.CONNECTION_SENDER_PREFIX):
            self._outbox.tell(SendDone(send_id))
        elif earlier.answer is not None:
            self._outbox.tell(
                SendDone(send_id, answer=earlier.answer[:MAX_CONNECTION_ANSWER_CHARS])
            )
        else:
            stopped = "the agent stopped during this event's Turn; its message is kept"
            self._outbox.tell(
                SendDone(send_id, turn_error=f"{DeliveryCode.AGENT_CRASHED}: {stopped}")
            )

    def _finished(
        self,
        sender: str,
        instance_key: str,
        correlation_id: str | None,
        send_id: str,
        result: TurnResult,
    ) -> None:
        outbox = self._outbox
        outbox.tell(TurnCompleted(instance_key, result.status))
        if correlation_id is not None:
            outbox.reply(sender, correlation_id, result)
        elif send_id and result.error is not None and result.error.code == AGENT_CRASHED:
            # A send whose Turn kept killing this agent: its sender is told, as for a refusal.
            outbox.refuse(sender, None, IpcError(result.error.message, code=AGENT_CRASHED), send_id)
        elif send_id:
            outbox.tell(send_done(sender, send_id, result))
        if result.restart_reason is not None:
            # After the answer is out: the restart must not cost the caller its result.
            self._log.info("restart requested by a tool", reason=result.restart_reason)
            outbox.tell(RestartRequest(result.restart_reason))
        self._shutdown.check_standard_fds()


def turn_input(sender: str, handoff: Handoff, request_id: str = "") -> TurnInput:
    """The input of the Turn ``handoff`` from ``sender`` asks for; the handoff's own request
    id names it, else ``request_id`` (the id its caller tracks it by)."""
    return TurnInput(
        text=handoff.input,
        trace_id=handoff.trace_id or wire.new_trace_id(),
        event_type=handoff.event_type,
        source_kind=source_kind(sender),
        source_name=sender,
        metadata=handoff.metadata,
        call_chain=handoff.call_chain,
        parent_span_id=handoff.parent_span_id,
        stream_id=handoff.stream_id,
        relay=handoff.relay,
        request_id=handoff.request_id or request_id,
        attempt=handoff.attempt,
        # A fresh id on a first delivery cannot be in any conversation yet: no search.
        may_resume=bool(handoff.request_id) or handoff.attempt > 1,
    )


def source_kind(sender: str) -> Literal["user", "agent", "connector"]:
    """Who a Turn's input came from, by the sender of its delegate or send."""
    if sender in (ORCHESTRATOR, EXTERNAL_CALLER):
        return "user"
    if sender.startswith(wire.CONNECTION_SENDER_PREFIX):
        return "connector"
    return "agent"


def send_done(sender: str, send_id: str, result: TurnResult) -> SendDone:
    """The end of send ``send_id``'s Turn; a Connection's send also gets the answer, so its
    connector can reply where the event came from (other senders never read it)."""
    if not sender.startswith(wire.CONNECTION_SENDER_PREFIX):
        return SendDone(send_id)
    if result.error is not None:
        return SendDone(send_id, turn_error=f"{result.error.code}: {result.error.message}")
    return SendDone(send_id, answer=result.text[:MAX_CONNECTION_ANSWER_CHARS])
