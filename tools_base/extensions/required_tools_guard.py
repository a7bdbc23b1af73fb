"""``required-tools-guard``: a Turn may not end before one of the required tools succeeded.

A ``step`` layer, after ``next()``. It notes every tool that returned ``ok`` in the current
Turn (a success in an earlier Turn does not count). When a Step would end the Turn
(``should_continue`` false) and none of ``requiredTools`` has succeeded yet (any one of them
is enough), it appends a user message asking for one (``errorMessage``, or
``"You must call one of these tools before answering: ..."``) and makes the Turn go on with
another Step. The Turn's ``maxStepsPerTurn`` still bounds it: a model that never complies ends
the Turn there, and (a ``turn`` layer) its answer gets a line saying that no required tool
succeeded (with ``onMaxSteps: error`` the Turn fails with ``E_MAX_STEPS`` as well).

An agent with ``spec.requiredTools`` gets this extension appended automatically, with those
names as ``requiredTools``.

Config:

- ``requiredTools`` (``[]``): full tool names; empty means the agent's ``requiredTools``.
- ``errorMessage`` (``""``): the reminder text; empty means the default above.

Example::

    extensions:
      - ref: { kind: Extension, name: required-tools-guard, package: "@goondan/base" }
        config: { requiredTools: [report__submit], errorMessage: "Submit the report first." }
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tools_base import ExtensionApi, MessageEvent
from tools_base.extensions._common import config_names, config_str, extension_message


def register(api: ExtensionApi) -> None:
    """Register the guard as a ``step`` layer."""
    required = config_names(api.config, "requiredTools") or list(api.agent.required_tools)
    custom = config_str(api.config, "errorMessage", "")
    if not required:
        return
    reminder = custom or (
        "You must call one of these tools before answering: " + ", ".join(required)
    )
    key = f"{api.name}.succeeded"

    async def guard(ctx: Any) -> Any:
        result = await ctx.next()
        succeeded: list[str] = list(ctx.turn_metadata.get(key) or [])
        for tool_result in result.tool_results:
            if tool_result.status == "ok" and tool_result.tool_name not in succeeded:
                succeeded.append(tool_result.tool_name)
        ctx.turn_metadata[key] = succeeded
        if result.should_continue or any(name in succeeded for name in required):
            return result
        api.logger.info("required tool not called yet; continuing the turn", required=required)
        ctx.emit_message_event(MessageEvent.append(extension_message(api.name, reminder)))
        return dataclasses.replace(result, should_continue=True)

    async def report(ctx: Any) -> Any:
        result = await ctx.next()
        succeeded = ctx.metadata.get(key) or []
        if result.finish_reason != "max_steps" or any(name in succeeded for name in required):
            return result
        summary = (
            f"Stopped at maxStepsPerTurn ({result.step_count}) before any required tool "
            f"succeeded (at least one of: {', '.join(required)})."
        )
        return dataclasses.replace(result, text=f"{result.text}\n\n{summary}".lstrip())

    api.pipeline.register("step", guard)
    api.pipeline.register("turn", report)
