"""Conversation messages as tools see them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tools_base._json import JsonObject, JsonValue

MessageRole = Literal["system", "user", "assistant", "tool"]
MessageSourceType = Literal["user", "assistant", "tool", "system", "extension"]
_ROLES: dict[object, MessageRole] = {
    "system": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call requested by the model."""

    id: str
    """Call id chosen by the model provider; echoed in the matching tool result."""
    name: str
    """Full tool name, ``{resource}__{export}`` (for example ``bash__exec``)."""
    args: JsonObject
    """Arguments as the model sent them, already parsed from JSON."""
    malformed_arguments: str | None = None
    """The provider's raw argument text when it does not parse as a JSON object (``args`` is
    then empty): the executor refuses the call with ``E_TOOL_INVALID_ARGS`` instead of guessing."""

    def to_json(self) -> JsonObject:
        """The wire form: ``{id, name, args}``, with ``malformedArguments`` when set."""
        out: JsonObject = {"id": self.id, "name": self.name, "args": self.args}
        if self.malformed_arguments is not None:
            out["malformedArguments"] = self.malformed_arguments
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> ToolCall:
        """Inverse of :meth:`to_json`."""
        args = data.get("args")
        malformed = data.get("malformedArguments")
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            args=args if isinstance(args, dict) else {},
            malformed_arguments=malformed if isinstance(malformed, str) else None,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageSource:
    """Who produced a message."""

    type: MessageSourceType
    step_id: str | None = None
    """Set for ``assistant`` messages: the Step that produced them."""
    tool_call_id: str | None = None
    """Set for ``tool`` messages."""
    tool_name: str | None = None
    """Set for ``tool`` messages."""
    extension_name: str | None = None
    """Set for ``extension`` messages."""

    def to_json(self) -> JsonObject:
        """The wire form, camelCase keys, ``None`` fields omitted."""
        out: JsonObject = {"type": self.type}
        if self.step_id is not None:
            out["stepId"] = self.step_id
        if self.tool_call_id is not None:
            out["toolCallId"] = self.tool_call_id
        if self.tool_name is not None:
            out["toolName"] = self.tool_name
        if self.extension_name is not None:
            out["extensionName"] = self.extension_name
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> MessageSource:
        """Inverse of :meth:`to_json`."""

        def opt(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        kind = data.get("type")
        source_type: MessageSourceType = (
            kind if kind in ("user", "assistant", "tool", "system", "extension") else "user"  # type: ignore[assignment]
        )
        return cls(
            type=source_type,
            step_id=opt("stepId"),
            tool_call_id=opt("toolCallId"),
            tool_name=opt("toolName"),
            extension_name=opt("extensionName"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One message of a conversation.

    ``content`` holds the text of system, user and assistant messages; an assistant message
    that asks for tools lists them in ``tool_calls``; a ``tool`` message carries one tool
    result in ``tool_result`` (the JSON form of a ``ToolCallResult``).
    """

    id: str
    """Stable id; message events (`replace`, `remove`) address messages by it."""
    role: MessageRole
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_result: JsonObject | None = None
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    """Free-form annotations (extensions use it); the only mutable part of a message."""
    created_at: str = ""
    """ISO 8601 timestamp in UTC."""
    source: MessageSource = field(default_factory=lambda: MessageSource(type="user"))

    @property
    def data(self) -> JsonObject:
        """The provider-neutral message itself, (what providers call ``CoreMessage``).

        ``{role, content}`` where ``content`` is the text, or, for an assistant message that
        calls tools and for a tool message, a list of parts (``text``, ``tool-call``,
        ``tool-result``) in the shape of the AI SDK's ``CoreMessage``. Derived from the
        flattened fields (``content``, ``tool_calls``, ``tool_result``), which stay the
        convenient way to read a message.
        """
        if self.role == "tool":
            result = self.tool_result or {}
            part: JsonObject = {
                "type": "tool-result",
                "toolCallId": self.source.tool_call_id or str(result.get("toolCallId", "")),
                "toolName": self.source.tool_name or str(result.get("toolName", "")),
                "result": result,
            }
            if result.get("status") == "error":
                part["isError"] = True
            return {"role": "tool", "content": [part]}
        if self.role == "assistant" and self.tool_calls:
            parts: list[JsonValue] = []
            if self.content:
                parts.append({"type": "text", "text": self.content})
            parts.extend(
                {"type": "tool-call", "toolCallId": c.id, "toolName": c.name, "args": c.args}
                for c in self.tool_calls
            )
            return {"role": "assistant", "content": parts}
        return {"role": self.role, "content": self.content}

    def to_json(self) -> JsonObject:
        """The persisted form (one line of ``base.jsonl``)."""
        out: JsonObject = {
            "id": self.id,
            "role": self.role,
            "content": self.content,
            "metadata": self.metadata,
            "createdAt": self.created_at,
            "source": self.source.to_json(),
        }
        if self.tool_calls:
            out["toolCalls"] = [call.to_json() for call in self.tool_calls]
        if self.tool_result is not None:
            out["toolResult"] = self.tool_result
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> Message:
        """Inverse of :meth:`to_json`; raises ``KeyError``/``ValueError`` on a bad shape."""
        role = data["role"]
        if role not in _ROLES:
            raise ValueError(f"unknown message role {role!r}")
        calls_raw = data.get("toolCalls")
        calls = (
            tuple(ToolCall.from_json(c) for c in calls_raw if isinstance(c, dict))
            if isinstance(calls_raw, list)
            else ()
        )
        metadata = data.get("metadata")
        source = data.get("source")
        tool_result = data.get("toolResult")
        content = data.get("content")
        return cls(
            id=str(data["id"]),
            role=_ROLES[role],
            content=content if isinstance(content, str) else "",
            tool_calls=calls,
            tool_result=tool_result if isinstance(tool_result, dict) else None,
            metadata=metadata if isinstance(metadata, dict) else {},
            created_at=str(data.get("createdAt", "")),
            source=MessageSource.from_json(source)
            if isinstance(source, dict)
            else _default_source(role),
        )


def _default_source(role: Any) -> MessageSource:
    if role == "assistant":
        return MessageSource(type="assistant")
    if role == "system":
        return MessageSource(type="system")
    return MessageSource(type="user")


MessageEventType = Literal["append", "replace", "remove", "truncate"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageEvent:
    """One change to a conversation."""

    type: MessageEventType
    message: Message | None = None
    """The new message, for ``append`` and ``replace``."""
    target_id: str | None = None
    """The message addressed by ``replace`` and ``remove``."""

    @classmethod
    def append(cls, message: Message) -> MessageEvent:
        """Add ``message`` at the end."""
        return cls(type="append", message=message)

    @classmethod
    def replace(cls, target_id: str, message: Message) -> MessageEvent:
        """Swap the first message with id ``target_id`` for ``message``."""
        return cls(type="replace", target_id=target_id, message=message)

    @classmethod
    def remove(cls, target_id: str) -> MessageEvent:
        """Drop the first message with id ``target_id``."""
        return cls(type="remove", target_id=target_id)

    @classmethod
    def truncate(cls) -> MessageEvent:
        """Drop every message."""
        return cls(type="truncate")

    def to_json(self, seq: int) -> JsonObject:
        """The ``events.jsonl`` line for this event, numbered ``seq``."""
        out: JsonObject = {"seq": seq, "type": self.type}
        if self.target_id is not None:
            out["targetId"] = self.target_id
        if self.message is not None:
            out["message"] = self.message.to_json()
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> MessageEvent:
        """Inverse of :meth:`to_json` (the ``seq`` is read separately)."""
        kind = data.get("type")
        message = data.get("message")
        target = data.get("targetId")
        parsed = Message.from_json(message) if isinstance(message, dict) else None
        if kind == "append" and parsed is not None:
            return cls.append(parsed)
        if kind == "replace" and parsed is not None and isinstance(target, str):
            return cls.replace(target, parsed)
        if kind == "remove" and isinstance(target, str):
            return cls.remove(target)
        if kind == "truncate":
            return cls.truncate()
        raise ValueError(f"malformed message event of type {kind!r}")
