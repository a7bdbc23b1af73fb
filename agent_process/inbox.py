"""What reaches an instance between its Turns' Steps: the answers of its async requests to
other agents, the completions of its background tool calls, and sends of its that were lost.

Each instance has a bounded inbox; the next Step of its running Turn takes what waits there.
A message the model waits for also wakes an idle instance, whose new Turn takes it at once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent_process.conversation import new_message_id
from agent_process.instances import InstanceManager
from agent_process.outbox import Outbox
from agent_process.pending import LOST_CODE, PendingLedger, lost_handles
from agent_process.shutdown import Shutdown
from agent_process.tools.executor import PendingCompletion, PendingStart
from agent_process.turn_types import TurnInput, TurnResult
from goondan.defaults import MAX_INBOX_PER_INSTANCE
from goondan.errors import DeliveryCode
from goondan.time import utc_timestamp
from ipc import EventMessage
from ipc.events import SendFailed
from ipc.runtime_events import InboxOverflowEvent
from tools_base import Message, MessageSource


class Inboxes:
    """The inboxes of every instance of one agent."""

    instances: InstanceManager | None = None
    """The instances a message may wake; set once the agent has booted."""

    def __init__(
        self, agent_name: str, pending: PendingLedger, outbox: Outbox, shutdown: Shutdown, log: Any
    ) -> None:
        self.agent_name = agent_name
        self.messages: dict[str, list[Message]] = {}
        """What waits, by instance key, oldest first."""
        self._pending = pending
        self._outbox = outbox
        self._shutdown = shutdown
        self._log = log

    def take(self, instance_key: str) -> list[Message]:
        """Everything waiting for ``instance_key``, now the Step that appends it begins."""
        return self.messages.pop(instance_key, [])

    def forget(self, instance_key: str) -> None:
        """Drop what waits for a deleted instance."""
        self.messages.pop(instance_key, None)

    def on_async_result(self, instance_key: str, message: Message) -> None:
        """The answer of an async request to another agent: the instance is woken for it."""
        self._enqueue(instance_key, message, "inter_agent_response", wake=True)

    def on_send_failed(self, message: EventMessage, body: SendFailed) -> None:
        """A send of ours was lost (its target crashed mid-Turn, or refused it): tell the
        instance that sent it, in its next Step."""
        self._log.warning(
            "send not delivered",
            instance_key=body.instance_key,
            target=body.target,
            event_id=body.event_id,
        )
        report = {"type": "send_failed", "eventId": body.event_id, "target": body.target}
        self.deliver(body.instance_key, {**report, "error": body.error.to_dict()}, "send_failed")

    def on_pending_start(self, start: PendingStart) -> None:
        """A call answered ``pending``: recorded, so a restart that loses it answers it."""
        assert self.instances is not None
        directory = self.instances.get(start.instance_key).directory
        self._pending.started(
            start.instance_key, directory, start.handle, start.tool_call_id, start.tool_name
        )

    def on_pending_complete(self, completion: PendingCompletion) -> None:
        """A background call finished: its outcome wakes the instance that started it."""
        payload = {
            "type": "tool_completion",
            "handle": completion.handle,
            **completion.result.to_json(),
        }
        self._pending.finished(completion.instance_key, completion.handle, payload)
        self.deliver(completion.instance_key, payload, "tool_completion", wake=True)

    def close_lost_handles(self) -> None:
        """Answer the background calls an earlier process of this agent never finished, so no
        conversation keeps a call open forever (they are seen by the model's next Turn)."""
        assert self.instances is not None
        for ledger, lost in lost_handles(self.instances.root):
            try:
                store = self.instances.get(lost.instance_key).store
                store.append(inbox_message(lost.completion(), "tool_completion"))
                ledger.unlink(missing_ok=True)
                if self._pending.mirror is not None:
                    self._pending.mirror.removed(ledger)
            except Exception as exc:  # that instance cannot load now; try again next boot
                self._log.warning(
                    "lost background call not closed",
                    instance_key=lost.instance_key,
                    handle=lost.handle,
                    error=str(exc),
                )
                continue
            self._log.warning(
                "background call lost in a restart",
                instance_key=lost.instance_key,
                handle=lost.handle,
                tool=lost.tool_name,
                code=LOST_CODE,
            )

    def deliver(
        self, instance_key: str, payload: dict[str, Any], kind: str, *, wake: bool = False
    ) -> None:
        """Put a message in the instance's inbox: the next Step of a running Turn takes it.

        With ``wake``, an idle instance starts a Turn for it at once, so a result the model
        waits for is seen without anyone sending anything.
        """
        self._enqueue(instance_key, inbox_message(payload, kind), kind, wake=wake)

    def _enqueue(self, instance_key: str, message: Message, kind: str, *, wake: bool) -> None:
        inbox = self.messages.setdefault(instance_key, [])
        if len(inbox) >= MAX_INBOX_PER_INSTANCE:
            self._log.error(
                "inbox full; message dropped",
                code=DeliveryCode.E_INBOX_FULL,
                instance_key=instance_key,
                kind=kind,
                limit=MAX_INBOX_PER_INSTANCE,
            )
            overflow = InboxOverflowEvent(
                timestamp=utc_timestamp(),
                agent_name=self.agent_name,
                instance_key=instance_key,
                kind=kind,
                code=DeliveryCode.E_INBOX_FULL,
            )
            self._outbox.report_event(overflow.to_builtins())
            return
        inbox.append(message)
        if wake:
            self._wake(instance_key)

    def _wake(self, instance_key: str) -> None:
        """Start a Turn for what waits in an idle instance's inbox (one Turn takes it all)."""
        inbox = self.messages.get(instance_key)
        if not inbox or self.instances is None or self._shutdown.draining:
            return
        if not self.instances.is_idle(instance_key):
            return  # the running or queued Turn takes it at its next Step
        first = inbox.pop(0)
        kind = first.metadata.get("__goondanInbox")
        turn_input = TurnInput(
            text=first.content,
            event_type=f"inbox.{kind}",
            source_kind="agent",
            source_name=self.agent_name,
            metadata={"__goondanInbox": kind},
            message_metadata=first.metadata,
        )
        try:
            future = self.instances.submit(instance_key, turn_input)
        except Exception as exc:
            inbox.insert(0, first)
            self._log.warning("inbox not delivered", instance_key=instance_key, error=str(exc))
            return

        def done(finished: asyncio.Future[TurnResult]) -> None:
            if not finished.cancelled():
                self._wake(instance_key)  # more may have arrived meanwhile

        future.add_done_callback(done)


def inbox_message(payload: dict[str, Any], kind: str) -> Message:
    """An inbox message: ``payload`` as JSON, marked with its ``kind``."""
    return Message(
        id=new_message_id("inbox"),
        role="user",
        content=json.dumps(payload, ensure_ascii=False),
        created_at=utc_timestamp(),
        source=MessageSource(type="system"),
        metadata={"__goondanInbox": kind},
    )
