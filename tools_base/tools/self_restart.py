"""``self-restart``: ask the runtime to restart this swarm.

Export ``request``: ``reason`` (optional text for logs) → ``{ok: true, restartRequested:
true, restartReason}``; ``restartReason`` is the trimmed reason, or ``"tool:self-restart"``
when it is missing or blank.

The tool only answers; the runtime watches for this output (``restartRequested: true``) and
performs the restart after the Turn. No config, no error codes of its own.
"""

from __future__ import annotations

from tools_base import JsonObject, JsonValue, ToolContext, ToolHandler, nonblocking
from tools_base.tools._common import optional_string

DEFAULT_REASON = "tool:self-restart"


@nonblocking
def request(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``request``: signal that a restart is wanted."""
    reason = (optional_string(input, "reason") or "").strip()
    return {"ok": True, "restartRequested": True, "restartReason": reason or DEFAULT_REASON}


handlers: dict[str, ToolHandler] = {"request": request}
