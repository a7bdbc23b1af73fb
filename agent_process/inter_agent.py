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
        error: dict[str, str] | None = None
        status = "ok"
        if not answer.ok:
            code = answer.error.code if answer.error is not None else DeliveryCode.AGENT_TURN_FAILED
            text = answer.error.message if answer.error is not None else "agent request failed"
            partial = answer.output
            # A Turn that failed after writing something: the requester keeps that work.
            if isinstance(partial, str) and partial:
                text = f"{text} Its last text: {partial}"
            error = {"code": code, "message": text}
            status = "timeout" if code == TIMEOUT_CODE else "error"
        content: dict[str, Any] = {
            "type": KIND,
            "requestId": self.request_id,
            "fromAgentId": self.from_agent,
            "toAgentId": self.to_agent,
            "status": status,
        }
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
        if self.trace_id:
            about["traceId"] = self.trace_id
        if self.event_type:
            about["requestEventType"] = self.event_type
        if self.metadata:
            about["requestMetadata"] = self.metadata
        if error is None:
            content["response"] = answer.output
        else:
            content["error"] = error
            about.update(errorCode=error["code"], errorMessage=error["message"])
        metadata: dict[str, Any] = {INBOX_KEY: KIND, METADATA_KEY: about}
        if self.trace_id:
            metadata["traceId"] = self.trace_id
        return Message(
            id=new_message_id("inbox"),
            role="user",
            content=json.dumps(content, ensure_ascii=False),
            created_at=utc_timestamp(),
            source=MessageSource(type="system"),
            metadata=metadata,
        )
