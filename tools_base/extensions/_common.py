"""Shared by the base extensions: config checks and provider-safe message removal."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from goondan.time import utc_timestamp
from tools_base import ExtensionError, JsonValue, Message, MessageRole, MessageSource


def config_int(config: Mapping[str, Any], key: str, default: int, *, minimum: int = 0) -> int:
    """``config[key]`` as an int ≥ ``minimum``; a wrong value is an :class:`ExtensionError`."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ExtensionError(f"config.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def config_bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """``config[key]`` as a bool."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ExtensionError(f"config.{key} must be true or false, got {value!r}")
    return value


def config_str(config: Mapping[str, Any], key: str, default: str) -> str:
    """``config[key]`` as a string."""
    value = config.get(key, default)
    if not isinstance(value, str):
        raise ExtensionError(f"config.{key} must be a string, got {value!r}")
    return value


def config_names(config: Mapping[str, Any], key: str) -> list[str]:
    """``config[key]`` as a list of non-empty strings (tool names)."""
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ExtensionError(f"config.{key} must be a list of names, got {value!r}")
    return list(dict.fromkeys(value))


def is_system_prompt(message: Message) -> bool:
    """The agent's own system prompt, which the runtime keeps first."""
    return message.role == "system" and message.source.type == "system"


def removal_units(messages: Sequence[Message]) -> list[list[Message]]:
    """The conversation cut into pieces that can be removed without breaking it.

    An assistant message with tool calls and the tool results that answer them form one piece:
    providers refuse a tool result without its call, and a call without its result.
    """
    units: list[list[Message]] = []
    owner: dict[str, list[Message]] = {}
    for message in messages:
        if message.role == "tool" and message.source.tool_call_id in owner:
            owner[message.source.tool_call_id].append(message)
            continue
        unit = [message]
        units.append(unit)
        for call in message.tool_calls:
            owner[call.id] = unit
    return units


def text_size(message: Message) -> int:
    """Characters of a message's text (content, plus a tool result's rendered size)."""
    size = len(message.content)
    if message.tool_result is not None:
        size += len(str(message.tool_result))
    return size


def extension_message(
    extension: str,
    content: str,
    *,
    role: MessageRole = "user",
    metadata: dict[str, JsonValue] | None = None,
) -> Message:
    """A message an extension adds to the conversation."""
    stamp = time.time()
    return Message(
        id=f"ext-{time.time_ns():x}-{secrets.token_hex(3)}",
        role=role,
        content=content,
        created_at=utc_timestamp(stamp),
        source=MessageSource(type="extension", extension_name=extension),
        metadata=dict(metadata or {}),
    )
