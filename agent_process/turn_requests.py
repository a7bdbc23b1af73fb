"""The Turns callers ask this agent for: a ``delegate`` (a request, answered when its Turn
ends) or a ``send`` (reported started and done, so the Orchestrator can redeliver one lost
before it started). Each is queued on its instance; none starts once the agent drains.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from agent_process.instance_files import InstanceKeyConflict
from agent_process.instances import InstanceManager, InstanceQueueFull
from agent_process.outbox import Outbox
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
        on_start = None
        if send_id:

            def on_start() -> None:
                # Out now, before the Turn can have any effect: a send whose Turn never
                # started is delivered again, one that started never is.
                outbox.tell(SendStarted(send_id))
                outbox.channel.write_now()

        try:
            future = self.instances.submit(
                instance_key,
                turn_input(sender, handoff, correlation_id or send_id),
                on_start=on_start,
            )
        except Exception as exc:  # a full queue, an unreadable conversation, a full disk, ...
            code = getattr(exc, "code", None)
            if not isinstance(exc, InstanceQueueFull | InstanceKeyConflict):
                self._log.error(
                    "instance unavailable", instance_key=instance_key, code=code, error=str(exc)
                )
            error = IpcError(
                str(exc) or type(exc).__name__,
                code=code if isinstance(code, str) else DeliveryCode.E_INTERNAL,
            )
            outbox.refuse(sender, correlation_id, error, send_id)
            return

        def finished(done: asyncio.Future[TurnResult]) -> None:
            if done.cancelled():  # queued or running when the agent stopped
                stopped = ShuttingDown(
                    f"agent {self.agent_name!r} stopped before the Turn finished "
                    "(the shutdown grace period ended first)"
                )
                outbox.refuse(sender, correlation_id, stopped)
                return
            self._finished(sender, instance_key, correlation_id, send_id, done.result())

        future.add_done_callback(finished)

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
