"""The answer of an asynchronous ``agents__request`` as the requesting conversation receives it.

Upstream's shape (reference §4.2), so prompts and extensions written for it read ours: a user
message whose content is the JSON object ::

    {"type": "inter_agent_response", "requestId", "fromAgentId", "toAgentId",
     "status": "ok" | "error" | "timeout", "response" | "error": {"code", "message"}}

and whose metadata carries ``__goondanInterAgentResponse`` ``{kind: "inter_agent_response",
version: 1, requestId, requestEventId, fromAgentId, toAgentId, async: true, status,
receivedAt, traceId?, requestEventType?, requestMetadata?, errorCode?, errorMessage?}``, with
``traceId`` beside it. ``requestId`` is the request's correlation id (the ``correlationId`` its
tool result reported), ``requestEventId`` its ``eventId``. The message also carries
``__goondanInbox: "inter_agent_response"``, the inbox's own mark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_process.conversation import new_message_id
from goondan.errors import DeliveryCode
from goondan.time import utc_timestamp
from ipc.delegation import DelegateAnswer
from tools_base import JsonObject, Message, MessageSource

KIND = "inter_agent_response"
METADATA_KEY = "__goondanInterAgentResponse"
INBOX_KEY = "__goondanInbox"
TIMEOUT_CODE = DeliveryCode.AGENT_REQUEST_TIMEOUT


@dataclass(frozen=True, slots=True, kw_only=True)
class AsyncRequest:
    """What the requester remembers of an asynchronous request until its answer comes."""

    request_id: str
    """The correlation id."""
    event_id: str
    event_type: str
    from_agent: str
    """The target: the agent the answer comes from."""
    to_agent: str
    """The requester."""
    trace_id: str
    metadata: JsonObject

    def response_message(self, answer: DelegateAnswer) -> Message:
        """The conversation message carrying ``answer``."""
        error = _answer_error(answer)
        status = "ok" if error is None else "timeout" if error["code"] == TIMEOUT_CODE else "error"
        content: dict[str, Any] = {
            "type": KIND,
            "requestId": self.request_id,
            "fromAgentId": self.from_agent,
            "toAgentId": self.to_agent,
            "status": status,
        }
        about = self._about(status)
        if error is None:
            content["response"] = answer.output
        else:
            content["error"] = error
            about.update(errorCode=error["code"], errorMessage=error["message"])
        extra: dict[str, Any] = {METADATA_KEY: about}
        if self.trace_id:
            extra["traceId"] = self.trace_id
        return inbox_message(content, KIND, extra)

    def _about(self, status: str) -> dict[str, Any]:
        """What the answer's message says of the request (its ``METADATA_KEY`` metadata)."""
        about: dict[str, Any] = {
            "kind": KIND,
            "version": 1,
            "requestId": self.request_id,
            "requestEventId": self.event_id,
            "fromAgentId": self.from_agent,
            "toAgentId": self.to_agent,
            "async": True,
            "status": status,
            "receivedAt": utc_timestamp(),
        }
        optional = {
            "traceId": self.trace_id,
            "requestEventType": self.event_type,
            "requestMetadata": self.metadata,
        }
        about.update({key: value for key, value in optional.items() if value})
        return about


def _answer_error(answer: DelegateAnswer) -> dict[str, str] | None:
    """The ``{code, message}`` of a failed answer; ``None`` for one that succeeded."""
    if answer.ok:
        return None
    code: str = DeliveryCode.AGENT_TURN_FAILED
    text = "agent request failed"
    if answer.error is not None:
        code, text = answer.error.code, answer.error.message
    partial = answer.output
    # A Turn that failed after writing something: the requester keeps that work.
    if isinstance(partial, str) and partial:
        text = f"{text} Its last text: {partial}"
    return {"code": code, "message": text}


def inbox_message(
    payload: Mapping[str, Any], kind: str, metadata: Mapping[str, Any] | None = None
) -> Message:
    """An inbox message: ``payload`` as JSON, marked with its ``kind`` (and ``metadata``)."""
    return Message(
        id=new_message_id("inbox"),
        role="user",
        content=json.dumps(payload, ensure_ascii=False),
        created_at=utc_timestamp(),
        source=MessageSource(type="system"),
        metadata={INBOX_KEY: kind, **(metadata or {})},
    )
