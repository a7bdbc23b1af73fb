"""``logging``: one structured log line per Turn, Step and tool call, with durations.

Registers a layer of each kind. Turn and Step starts and ends are logged at ``level``
(``turn started`` / ``turn completed``, ``step started`` / ``step completed``, with agent,
instance, trace and turn ids, status, finish reason, step and tool-call counts and
``duration_ms``); a layer that raised is logged at ``error`` (``turn failed`` /
``step failed``) and the exception goes on unchanged. Tool calls are logged at ``debug``
(``tool call`` with name, status, error code and duration; the arguments too with
``includeToolArgs``). Lines go through the agent's structlog setup, so they are JSON when the
output is not a terminal.

Config:

- ``level`` (``info``): ``debug``, ``info``, ``warning`` or ``error``.
- ``includeToolArgs`` (false): add each call's arguments to its line (may contain secrets).

Example::

    extensions:
      - ref: { kind: Extension, name: logging, package: "@goondan/base" }
        config: { level: debug, includeToolArgs: true }
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tools_base import ExtensionApi, ExtensionError
from tools_base.extensions._common import config_bool, config_str

LEVELS = ("debug", "info", "warning", "error")


def register(api: ExtensionApi) -> None:
    """Register the three logging layers."""
    level = config_str(api.config, "level", "info")
    if level not in LEVELS:
        raise ExtensionError(f"config.level must be one of {list(LEVELS)}, got {level!r}")
    include_args = config_bool(api.config, "includeToolArgs", False)
    log: Callable[..., Any] = getattr(api.logger, level)

    async def turn(ctx: Any) -> Any:
        ids = {"instance_key": ctx.instance_key, "trace_id": ctx.trace_id, "turn_id": ctx.turn_id}
        log("turn started", **ids)
        started = time.perf_counter()
        try:
            result = await ctx.next()
        except Exception as exc:
            api.logger.error("turn failed", **ids, error=repr(exc), duration_ms=_ms(started))
            raise
        log(
            "turn completed",
            **ids,
            status=result.status,
            finish_reason=result.finish_reason,
            steps=result.step_count,
            error_code=result.error.code if result.error else None,
            duration_ms=_ms(started),
        )
        return result

    async def step(ctx: Any) -> Any:
        ids = {"turn_id": ctx.turn_id, "step_index": ctx.step_index}
        log("step started", **ids, tools=len(ctx.tool_catalog))
        started = time.perf_counter()
        try:
            result = await ctx.next()
        except Exception as exc:
            api.logger.error("step failed", **ids, error=repr(exc), duration_ms=_ms(started))
            raise
        log(
            "step completed",
            **ids,
            tool_calls=len(result.tool_calls),
            should_continue=result.should_continue,
            duration_ms=_ms(started),
        )
        return result

    async def tool_call(ctx: Any) -> Any:
        started = time.perf_counter()
        result = await ctx.next()
        fields: dict[str, Any] = {
            "tool": ctx.tool_name,
            "tool_call_id": ctx.tool_call_id,
            "status": result.status,
            "duration_ms": _ms(started),
        }
        if result.error is not None:
            fields["error_code"] = result.error.code
        if include_args:
            fields["args"] = ctx.args
        api.logger.debug("tool call", **fields)
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
