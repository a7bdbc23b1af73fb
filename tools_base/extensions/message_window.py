"""``message-window``: keep the conversation to the newest ``maxMessages`` messages.

Runs before every Turn (a ``turn`` layer, before ``next()``), after the Turn's user message was
added. When the conversation holds more than ``maxMessages`` messages (the agent's system
prompt not counted), the oldest are removed from it (``remove`` message events, so on disk
too) until it fits. Never removed: the system prompt, messages with ``metadata.pinned: true``
and the Turn's own user message. An assistant message that called tools and the results of
those calls are removed together, so no provider ever sees a result without its call or a call
without its result (the window may end slightly under the limit because of that).

Config:

- ``maxMessages`` (default 80): messages kept, at least 1.

Example::

    extensions:
      - ref: { kind: Extension, name: message-window, package: "@goondan/base" }
        config: { maxMessages: 40 }
"""

from __future__ import annotations

from typing import Any

from tools_base import ExtensionApi, Message, MessageEvent
from tools_base.extensions._common import config_int, is_system_prompt, removal_units


def register(api: ExtensionApi) -> None:
    """Register the window as a ``turn`` layer."""
    limit = config_int(api.config, "maxMessages", 80, minimum=1)

    async def window(ctx: Any) -> Any:
        dropped = messages_outside_window(ctx.messages, limit)
        for message in dropped:
            ctx.emit_message_event(MessageEvent.remove(message.id))
        if dropped:
            ctx.metadata["messageWindow.removed"] = len(dropped)
            api.logger.info("message window applied", removed=len(dropped), limit=limit)
        return await ctx.next()

    api.pipeline.register("turn", window)


def messages_outside_window(messages: list[Message], limit: int) -> list[Message]:
    """The oldest removable messages to drop so at most ``limit`` (prompt excluded) remain."""
    counted = [m for m in messages if not is_system_prompt(m)]
    excess = len(counted) - limit
    if excess <= 0:
        return []
    last = messages[-1] if messages else None
    dropped: list[Message] = []
    for unit in removal_units(messages):
        if excess <= 0:
            break
        if any(is_system_prompt(m) or m.metadata.get("pinned") is True or m is last for m in unit):
            continue
        dropped.extend(unit)
        excess -= len(unit)
    return dropped
