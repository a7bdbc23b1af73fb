"""Building the protocol's messages (:mod:`ipc.protocol`) from their typed payloads.

Apart from the vocabulary so that the payloads (:mod:`ipc.delegation`, :mod:`ipc.payload`), which
build on that vocabulary, are never imported back by it.
"""

from __future__ import annotations

from ipc.delegation import DelegateAnswer, Handoff, ShutdownRequest
from ipc.messages import DelegateMessage, DelegateResultMessage, EventMessage, ShutdownMessage
from ipc.payload import EventBody
from ipc.protocol import ORCHESTRATOR

__all__ = ["delegate", "delegate_result", "event", "shutdown"]


def delegate(sender: str, to: str, correlation_id: str, handoff: Handoff) -> DelegateMessage:
    """A ``delegate`` carrying ``handoff``."""
    return DelegateMessage(
        sender=sender, to=to, correlation_id=correlation_id, payload=handoff.to_wire()
    )


def delegate_result(
    sender: str, to: str, correlation_id: str, answer: DelegateAnswer
) -> DelegateResultMessage:
    """The ``delegate_result`` answering ``correlation_id``."""
    return DelegateResultMessage(
        sender=sender, to=to, correlation_id=correlation_id, payload=answer.to_wire()
    )


def shutdown(to: str, request: ShutdownRequest) -> ShutdownMessage:
    """A ``shutdown`` from the Orchestrator."""
    return ShutdownMessage(sender=ORCHESTRATOR, to=to, payload=request.to_wire())


def event(sender: str, to: str, body: EventBody, correlation_id: str | None = None) -> EventMessage:
    """An ``event`` carrying ``body``."""
    return EventMessage(
        sender=sender,
        to=to,
        payload={"kind": body.KIND.value, **body.to_wire()},
        correlation_id=correlation_id,
    )
