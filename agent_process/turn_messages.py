"""The messages a Turn writes into its conversation besides the model's: the user's input,
a correction after an empty answer, a notice in place of an answer, the system prompt, and the
results of the calls a killed process never finished.
"""

from __future__ import annotations

from agent_process.conversation import ConversationStore, new_message_id
from agent_process.step import tool_message
from agent_process.turn_resume import REQUEST_KEY, request_record
from agent_process.turn_types import TurnInput
from goondan.errors import ToolCode
from goondan.time import utc_timestamp
from tools_base import (
    JsonValue,
    Message,
    MessageRole,
    MessageSource,
    ToolCall,
    ToolCallResult,
    ToolErrorInfo,
)

EMPTY_OUTPUT_CORRECTION = (
    "Your last answer was empty. Reply with text for the user, or call one of the tools."
)
"""Asked of the model after an empty answer (no text, no tool call)."""


def inbound_properties(turn_input: TurnInput) -> dict[str, str]:
    """The properties of the connector event behind ``turn_input`` (text values only)."""
    if turn_input.source_kind != "connector":
        return {}
    properties = turn_input.metadata.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {k: v for k, v in properties.items() if isinstance(k, str) and isinstance(v, str)}


def user_message(turn_input: TurnInput, turn_id: str = "", span_id: str = "") -> Message:
    """The user message a Turn starts with, saying where its input came from and which
    request it answers, run by Turn ``turn_id`` in span ``span_id`` (see
    :mod:`agent_process.turn_resume`)."""
    request: JsonValue = None
    if turn_input.request_id:
        request = request_record(turn_input.request_id, turn_id, span_id, turn_input.attempt)
    return Message(
        id=new_message_id("msg"),
        role="user",
        content=turn_input.text,
        created_at=utc_timestamp(),
        source=MessageSource(type="user"),
        metadata={
            **turn_input.message_metadata,
            "__goondanInbound": {
                "sourceKind": turn_input.source_kind,
                "sourceName": turn_input.source_name,
                "eventType": turn_input.event_type,
                "traceId": turn_input.trace_id,
                # A connector's event: its connection and properties (chat id, thread, ...).
                **({"metadata": turn_input.metadata} if turn_input.metadata else {}),
            },
            **({REQUEST_KEY: request} if request is not None else {}),
        },
    )


def _from_the_runtime(
    prefix: str, role: MessageRole, content: str, **metadata: JsonValue
) -> Message:
    """A message the runtime writes itself (not the model, a caller or a tool), made now."""
    return Message(
        id=new_message_id(prefix),
        role=role,
        content=content,
        created_at=utc_timestamp(),
        source=MessageSource(type="system"),
        metadata=metadata,
    )


def corrective_message() -> Message:
    """Asks the model again after an empty answer."""
    return _from_the_runtime(
        "msg", "user", EMPTY_OUTPUT_CORRECTION, __goondanCorrection="empty_output"
    )


def notice_message(text: str, step_id: str, kind: str = "empty_output") -> Message:
    """An answer the runtime gives in the model's place (``kind`` says why)."""
    return Message(
        id=new_message_id("msg"),
        role="assistant",
        content=text,
        created_at=utc_timestamp(),
        source=MessageSource(type="assistant", step_id=step_id),
        metadata={"__goondanNotice": kind},
    )


def close_interrupted_calls(store: ConversationStore, parked: set[str]) -> None:
    """Answer tool calls a killed process never finished, so the conversation stays valid.

    Providers refuse an assistant tool call without its result; after a crash between two tool
    calls, the unfinished ones get an error result saying so (``E_TOOL_INTERRUPTED``). Calls
    parked for approval (``parked``), and the calls after them in the same message, are left
    to the Turn that resumes them.
    """
    if not store.has_unanswered_calls:
        return
    answered: set[str | None] = set()
    calling: list[Message] = []
    for message in store.messages:  # one pass: this runs at every Turn's start
        if message.role == "tool":
            answered.add(message.source.tool_call_id)
        elif message.tool_calls:
            calling.append(message)
    for message in calling:
        if all(call.id in answered for call in message.tool_calls):
            continue
        if any(call.id in parked and call.id not in answered for call in message.tool_calls):
            continue
        for call in message.tool_calls:
            if call.id not in answered:
                store.append(interrupted_message(call))


def interrupted_message(call: ToolCall) -> Message:
    """The result of a call the agent process died in: it may or may not have run."""
    result = ToolCallResult(
        tool_call_id=call.id,
        tool_name=call.name,
        status="error",
        error=ToolErrorInfo(
            message="The agent process stopped before this call finished; it may or may not have run.",
            name="ToolInterruptedError",
            code=ToolCode.E_TOOL_INTERRUPTED,
            suggestion="Check whether its effect happened before calling it again.",
        ),
    )
    return tool_message(call, result)


def system_message(prompt: str) -> Message:
    """The conversation's system prompt."""
    return _from_the_runtime("sys", "system", prompt)
