"""``wait``: pause for a number of seconds without blocking anything else.

Export ``wait``: **seconds** (finite number, 0 ≤ seconds ≤ 300) → sleeps
``round(seconds * 1000)`` ms → ``{waitedSeconds, waitedMs}``.

The manifest sets ``timeoutSeconds: 310`` so the executor's handler timeout never cuts the
longest allowed wait. Upstream named this export ``seconds`` (``wait__seconds``); here it is
``wait__wait``. Error code: ``E_TOOL_INVALID_ARGS``. No config.

The handler is a coroutine (``asyncio.sleep``): other tool calls and instances keep running.
"""

from __future__ import annotations

import asyncio
import math

from tools_base import JsonObject, JsonValue, ToolContext, ToolHandler
from tools_base.tools._common import invalid_arg, optional_number

MAX_WAIT_SECONDS = 300


async def wait(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``wait``: sleep, then report how long."""
    seconds = optional_number(input, "seconds")
    if seconds is None:
        raise invalid_arg("'seconds' must be a finite number")
    if seconds < 0:
        raise invalid_arg("'seconds' must be greater than or equal to 0")
    if seconds > MAX_WAIT_SECONDS:
        raise invalid_arg(
            f"'seconds' must be less than or equal to {MAX_WAIT_SECONDS}",
            suggestion=f"Wait in several calls of at most {MAX_WAIT_SECONDS} seconds.",
        )
    waited_ms = math.floor(seconds * 1000 + 0.5)  # JavaScript Math.round
    await asyncio.sleep(waited_ms / 1000)
    return {"waitedSeconds": seconds, "waitedMs": waited_ms}


handlers: dict[str, ToolHandler] = {"wait": wait}
