"""What an AgentProcess sends the Orchestrator: events, callers' answers and refusals.

Everything here is sent without waiting (the Orchestrator reads its pipes at once whatever
its own clients do). Once the Orchestrator is gone there is nobody to tell: sending is then
quietly skipped, except by :meth:`Outbox.send`, whose caller wants to know.
"""

from __future__ import annotations

from typing import Any

from agent_process.scope import TextSink
from agent_process.turn_types import TurnInput, TurnResult
from goondan.errors import DeliveryCode
from ipc import (
    Channel,
    EventMessage,
    FrameTooLarge,
    IpcError,
    IpcMessage,
    PeerGone,
    TurnFailed,
    build,
)
from ipc.codec import Unencodable
from ipc.delegation import DelegateAnswer
from ipc.events import RuntimeEventReport, SendRefused, StatusChanged, TextDelta
from ipc.payload import EventBody
from ipc.protocol import ORCHESTRATOR
from ipc.runtime_events import RuntimeEvent


class Outbox:
    """The agent's side of its pipe to the Orchestrator, for everything it sends."""

    channel: Channel
    """Set once the pipe is open."""

    def __init__(self, agent_name: str, log: Any) -> None:
        self.agent_name = agent_name
        self._log = log

    def event(self, body: EventBody, correlation_id: str | None = None) -> EventMessage:
        """The event message carrying ``body`` to the Orchestrator."""
        return build.event(self.agent_name, ORCHESTRATOR, body, correlation_id)

    def tell(self, body: EventBody, correlation_id: str | None = None) -> None:
        """Send the Orchestrator an event; nothing happens if it is gone."""
        self.send_quietly(build.event(self.agent_name, ORCHESTRATOR, body, correlation_id))

    def send(self, message: IpcMessage) -> None:
        """Queue ``message`` on the pipe; raises when it cannot be sent."""
        self.channel.send_nowait(message)

    def send_quietly(self, message: IpcMessage) -> None:
        """Queue ``message`` on the pipe; nothing happens if the Orchestrator is gone."""
        try:
            self.channel.send_nowait(message)
        except (PeerGone, Exception) as exc:  # the Orchestrator is gone: nothing to tell
            self._log.debug("message not sent", error=str(exc), type=message.type)

    # -- reports ----------------------------------------------------------------------------

    def report_event(self, runtime_event: RuntimeEvent) -> None:
        """Hand the Orchestrator a runtime event for its event log."""
        self.tell(RuntimeEventReport(runtime_event))

    def report_busy(self, busy: bool) -> None:
        """The agent started its first running Turn, or finished its last."""
        self.tell(StatusChanged("processing" if busy else "idle"))

    def text_sink(self, instance_key: str, turn_id: str, turn_input: TurnInput) -> TextSink:
        """Where a streamed Turn's model text goes: a ``text_delta`` event per piece, queued
        on the pipe without waiting (the Orchestrator reads it at once whatever its clients
        do; a slow client costs them, not this agent)."""
        stream_id, trace_id = turn_input.stream_id, turn_input.trace_id

        def sink(step_id: str, text: str) -> None:
            self.tell(TextDelta(stream_id, text, trace_id, instance_key, turn_id, step_id))

        return sink

    # -- answers ----------------------------------------------------------------------------

    def reply(self, sender: str, correlation_id: str, result: TurnResult) -> None:
        """Answer request ``correlation_id`` of ``sender`` with the result of its Turn."""
        error = None
        if result.error is not None:
            # The Turn's own code (E_MAX_STEPS, a model error, ...) is the code the caller sees.
            error = TurnFailed(
                result.error.message,
                details={"turnCode": result.error.code},
                code=result.error.code,
            )
        answer = DelegateAnswer(result.status, result.text, result.to_json(), error)
        name = self.agent_name
        try:
            self.channel.send_nowait(build.delegate_result(name, sender, correlation_id, answer))
        except (FrameTooLarge, Unencodable) as exc:
            # The caller still gets its one answer: an error instead of the one that cannot go.
            self.refuse(sender, correlation_id, self._unsendable(exc))
        except Exception as exc:  # the Orchestrator is gone: nothing to tell
            self._log.debug("answer not sent", error=str(exc))

    def _unsendable(self, exc: FrameTooLarge | Unencodable) -> IpcError:
        """The error answered in place of a result the pipe cannot carry."""
        name = self.agent_name
        if isinstance(exc, FrameTooLarge):
            self._log.warning("answer too large for one frame", error=str(exc))
            return IpcError(
                f"the answer of {name!r} is too large to send ({exc})",
                code=DeliveryCode.E_RESULT_TOO_LARGE,
            )
        # A lone surrogate a model wrote, say.
        self._log.warning("answer cannot be encoded", error=str(exc))
        return IpcError(
            f"the answer of {name!r} cannot be sent: {exc}", code=DeliveryCode.IPC_MALFORMED_PAYLOAD
        )

    def refuse(
        self, sender: str, correlation_id: str | None, error: IpcError, send_id: str = ""
    ) -> None:
        """Answer a request (or report a send) that gets no Turn, with why."""
        if correlation_id is None:
            self._log.warning("event refused", error=error.message, code=error.code)
            if send_id:
                self.tell(SendRefused(send_id, error))
            return
        answer = DelegateAnswer.failure(error)
        self.send_quietly(build.delegate_result(self.agent_name, sender, correlation_id, answer))
