"""``message-compaction``: keep the conversation under a message count and a size.

Runs before every Turn (a ``turn`` layer, before ``next()``). When the conversation (the
agent's system prompt not counted) holds more than ``maxMessages`` messages or more than
``maxCharacters`` characters of text, the oldest messages are removed until both limits hold.
Never removed: the system prompt, messages with ``metadata.pinned: true``, and the last
``retainLastMessages`` messages (which include the Turn's own user message). An assistant
message that called tools goes together with the results of those calls, so the conversation
stays valid for every provider. If it is still over a limit once nothing more can be removed,
mode ``truncate`` keeps only the system prompt, the pinned messages and the retained tail; mode
``remove`` leaves it there. With ``appendSummary``, a system message
``"<summaryPrefix> mode=<mode> removed=<n> chars=<c>"`` records what was dropped (metadata
``compaction.mode``, ``compaction.removed``, ``compaction.chars``).

It needs no model call, so it works the same with the offline ``scripted`` model and real ones.

Config (defaults as upstream):

- ``maxMessages`` (40), ``maxCharacters`` (12000), ``retainLastMessages`` (8)
- ``mode``: ``remove`` (default) or ``truncate``
- ``appendSummary`` (true), ``summaryPrefix`` (``"[message-compaction]"``)

Example::

    extensions:
      - ref: { kind: Extension, name: message-compaction, package: "@goondan/base" }
        config: { maxMessages: 30, maxCharacters: 8000, mode: truncate }
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools_base import ExtensionApi, ExtensionError, Message, MessageEvent
from tools_base.extensions._common import (
    config_bool,
    config_int,
    config_str,
    extension_message,
    is_system_prompt,
    removal_units,
    text_size,
)


def register(api: ExtensionApi) -> None:
    """Register the compaction as a ``turn`` layer."""
    max_messages = config_int(api.config, "maxMessages", 40, minimum=1)
    max_characters = config_int(api.config, "maxCharacters", 12000, minimum=1)
    retain = config_int(api.config, "retainLastMessages", 8, minimum=1)
    mode = config_str(api.config, "mode", "remove")
    if mode not in ("remove", "truncate"):
        raise ExtensionError(f"config.mode must be 'remove' or 'truncate', got {mode!r}")
    append_summary = config_bool(api.config, "appendSummary", True)
    prefix = config_str(api.config, "summaryPrefix", "[message-compaction]")

    async def compact(ctx: Any) -> Any:
        messages: list[Message] = ctx.messages
        plan = plan_compaction(messages, max_messages, max_characters, retain, mode)
        if plan.removed:
            if plan.truncate:
                ctx.emit_message_event(MessageEvent.truncate())
                for message in plan.kept:
                    ctx.emit_message_event(MessageEvent.append(message))
            else:
                for message in plan.removed:
                    ctx.emit_message_event(MessageEvent.remove(message.id))
            chars = sum(text_size(m) for m in plan.removed)
            api.logger.info(
                "conversation compacted", mode=mode, removed=len(plan.removed), chars=chars
            )
            if append_summary:
                summary = f"{prefix} mode={mode} removed={len(plan.removed)} chars={chars}"
                ctx.emit_message_event(
                    MessageEvent.append(
                        extension_message(
                            api.name,
                            summary,
                            role="system",
                            metadata={
                                "compaction.mode": mode,
                                "compaction.removed": len(plan.removed),
                                "compaction.chars": chars,
                            },
                        )
                    )
                )
        return await ctx.next()

    api.pipeline.register("turn", compact)


class CompactionPlan:
    """What to drop, and (for a truncation) what to keep, in order."""

    def __init__(self, removed: list[Message], kept: list[Message], truncate: bool) -> None:
        self.removed = removed
        self.kept = kept
        self.truncate = truncate


def plan_compaction(
    messages: list[Message], max_messages: int, max_characters: int, retain: int, mode: str
) -> CompactionPlan:
    """Decide which messages go so the conversation fits, keeping it valid."""
    counted = [m for m in messages if not is_system_prompt(m)]
    tail = {id(m) for m in counted[-retain:]}

    def protected(unit: list[Message]) -> bool:
        return any(
            is_system_prompt(m) or m.metadata.get("pinned") is True or id(m) in tail for m in unit
        )

    removed, still_over = _drop_until_fits(
        messages, counted, protected, max_messages, max_characters
    )
    if mode == "truncate" and still_over:
        return _truncation(messages, protected)
    return CompactionPlan(removed, [], False)


def _drop_until_fits(
    messages: list[Message],
    counted: list[Message],
    protected: Callable[[list[Message]], bool],
    max_messages: int,
    max_characters: int,
) -> tuple[list[Message], bool]:
    """The unprotected units to drop, oldest first, until the ``counted`` messages fit; and
    whether they are still over a limit then."""
    count = len(counted)
    chars = sum(text_size(m) for m in counted)
    removed: list[Message] = []
    for unit in removal_units(messages):
        if count <= max_messages and chars <= max_characters:
            break
        if protected(unit):
            continue
        removed.extend(unit)
        count -= len(unit)
        chars -= sum(text_size(m) for m in unit)
    return removed, count > max_messages or chars > max_characters


def _truncation(
    messages: list[Message], protected: Callable[[list[Message]], bool]
) -> CompactionPlan:
    """Keep only the protected units: what dropping unprotected ones could not make fit."""
    kept_units = [u for u in removal_units(messages) if protected(u)]
    kept = [m for u in kept_units for m in u]
    kept_ids = {id(m) for m in kept}
    return CompactionPlan([m for m in messages if id(m) not in kept_ids], kept, True)
