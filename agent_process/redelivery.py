"""A send delivered again after its agent restarted, whose Turn had started all the same.

The Orchestrator delivers a send once more to a restarted agent when it never heard that the
send's Turn started (``send_started``): usually the Turn had not, but the report can die with
the process that wrote it (still in its buffers). The Turn's user message records the send's
event id, so a second delivery of a send whose message the conversation already holds is
answered without a second Turn: the message is never taken twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools_base import JsonObject, Message

SEND_ID_KEY = "__goondanSendId"
"""The user message metadata key that holds the event id of the send it came from."""
SCAN_LIMIT = 4096
"""Messages looked through, newest first: a redelivery follows the restart at once, so the
message it repeats is among the newest."""


@dataclass(frozen=True, slots=True)
class EarlierDelivery:
    """What became of a send's first delivery."""

    answer: str | None
    """The Turn's answer, when it reached one before the agent died."""


def send_metadata(event_id: str) -> JsonObject:
    """The user message metadata that records send ``event_id``."""
    return {SEND_ID_KEY: event_id}


def earlier_delivery(messages: list[Message], event_id: str) -> EarlierDelivery | None:
    """The first delivery of send ``event_id`` when ``messages`` hold its user message."""
    newest = messages[-SCAN_LIMIT:]
    for index in range(len(newest) - 1, -1, -1):
        message = newest[index]
        if message.role == "user" and message.metadata.get(SEND_ID_KEY) == event_id:
            return EarlierDelivery(_answer_after(newest[index + 1 :]))
    return None


def _answer_after(messages: list[Message]) -> str | None:
    """The first text answer after a user message, before the next user message."""
    for message in messages:
        if message.role == "user":
            return None
        if message.role == "assistant" and message.content and not message.tool_calls:
            return message.content
    return None
