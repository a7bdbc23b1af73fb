"""``pending``: where a background tool call stands.

Export ``status``: **handle** (the ``handle`` of a ``status: "pending"`` result of this
conversation) → ``{handle, status, ...}`` where ``status`` is ``running`` (with ``toolName``,
``toolCallId``, ``startedAt``), ``completed`` (with ``result``: the completion as delivered to
the conversation) or ``unknown`` (no such handle, or completed long ago). A completion is also
delivered to the conversation by itself, starting a Turn when the conversation is idle; this
tool is for a model that wants to look before then. Needs the agent runtime (``E_NO_RUNTIME``
without it). No config.
"""

from __future__ import annotations

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._common import require_string


async def status(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``status``: the state of one background call."""
    handle = require_string(input, "handle")
    lookup = getattr(ctx.runtime, "pending_status", None)
    if lookup is None:
        raise ToolError(
            "background calls can only be looked up inside a running agent",
            code=ToolCode.E_NO_RUNTIME,
        )
    answer: JsonObject = lookup(handle)
    return answer


handlers: dict[str, ToolHandler] = {"status": status}
