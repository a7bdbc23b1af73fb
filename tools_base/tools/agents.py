"""``agents``: talk to the other agents of the Swarm through ``ctx.runtime``.

Every export delegates to the :class:`~tools_base.AgentToolRuntime` the runtime injects as
``ctx.runtime``; the runtime decides routing, spawning, timeouts and cycle detection, and
fails with its own ToolError codes (unknown target, timeout, cycle, crash), which reach the
model unchanged. Without ``ctx.runtime`` every export fails with
``E_AGENT_RUNTIME_UNAVAILABLE``.

Exports (required parameters in **bold**):

``request``: **target**, **input** (text the target receives), ``instanceKey`` (default the
    caller's), ``eventType`` (default ``agent.request``), ``timeoutMs`` (default 60000; a
    non-positive or non-integer value means 60000), ``async`` (default false: wait for the
    target's answer; true: return at once, the answer arrives before a later step),
    ``metadata`` (object) → ``{target, eventId, correlationId, accepted, async, response}``;
    ``response`` is null when async.
``send``: **target**, **input**, ``instanceKey``, ``eventType`` (default ``agent.send``),
    ``metadata``. Fire-and-forget → ``{target, eventId, accepted}``.
``spawn``: **target**, ``instanceKey`` (the runtime generates one when absent), ``cwd`` (the
    new instance's workdir; a relative path is taken from the caller's workdir, and symlinks
    are resolved here; the target agent refuses, with ``E_SPAWN_CWD_REFUSED``, any directory
    outside the caller's own workspace: always the state directory, what is in it and what
    holds it, anywhere else unless the Swarm's ``policy.allowSpawnOutsideState`` is true) →
    ``{target, instanceKey, spawned, cwd}``; ``spawned`` is false whenever the instance already
    exists, whoever made it (its workdir then stays as it was); ``cwd`` is its workdir.
``list``: ``includeAll`` (default false: only instances the caller spawned) → ``{count,
    agents: [{target, instanceKey, ownerAgent, ownerInstanceKey, createdAt, cwd}]}``.
``catalog``: no parameters → ``{swarmName, entryAgent, selfAgent, availableCount,
    callableCount, availableAgents, callableAgents}``.

Error codes: ``E_AGENT_RUNTIME_UNAVAILABLE``, ``E_TOOL_INVALID_ARGS``, plus whatever the
runtime raises. No config. Handlers are coroutines.
"""

from __future__ import annotations

import asyncio
import os

from goondan.defaults import MAX_REQUEST_TIMEOUT_MS, REQUEST_TIMEOUT_MS
from goondan.errors import ToolCode
from goondan.handoff_events import AGENT_REQUEST, AGENT_SEND
from tools_base import (
    AgentEvent,
    AgentToolRuntime,
    JsonObject,
    JsonValue,
    ToolContext,
    ToolError,
    ToolHandler,
)
from tools_base.tools._common import (
    optional_bool,
    optional_object,
    optional_string,
    require_string,
)

DEFAULT_REQUEST_TIMEOUT_MS = REQUEST_TIMEOUT_MS


def _runtime(ctx: ToolContext) -> AgentToolRuntime:
    if ctx.runtime is None:
        raise ToolError(
            "agent runtime interface not available",
            code=ToolCode.E_AGENT_RUNTIME_UNAVAILABLE,
            suggestion=(
                "Inter-agent calls need the Goondan runtime (an Orchestrator); this agent runs "
                "without one. Do the work without delegating."
            ),
        )
    return ctx.runtime


def request_timeout_ms(value: JsonValue) -> int:
    """``timeoutMs`` as a positive integer of at most a week, or the 60000 default for
    anything else (a model may write ``1e20``: it waits a week, not forever)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_REQUEST_TIMEOUT_MS
    if isinstance(value, float) and not value.is_integer():
        return DEFAULT_REQUEST_TIMEOUT_MS
    return min(int(value), MAX_REQUEST_TIMEOUT_MS) if value > 0 else DEFAULT_REQUEST_TIMEOUT_MS


def _event(ctx: ToolContext, input: JsonObject, default_type: str) -> AgentEvent:
    event: AgentEvent = {
        "input": require_string(input, "input"),
        "instanceKey": optional_string(input, "instanceKey") or ctx.instance_key,
        "eventType": optional_string(input, "eventType") or default_type,
    }
    metadata = optional_object(input, "metadata")
    if metadata is not None:
        event["metadata"] = metadata
    return event


async def request(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``request``: ask another agent and (unless async) wait for its answer."""
    runtime = _runtime(ctx)
    target = require_string(input, "target")
    event = _event(ctx, input, AGENT_REQUEST)
    async_ = optional_bool(input, "async", False)
    result = await runtime.request(
        target, event, timeout_ms=request_timeout_ms(input.get("timeoutMs")), async_=async_
    )
    return {
        "target": target,
        "eventId": result["eventId"],
        "correlationId": result["correlationId"],
        "accepted": result["accepted"],
        "async": result["async_"],
        "response": None if result["async_"] else result["response"],
    }


async def send(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``send``: deliver an event to another agent without waiting."""
    runtime = _runtime(ctx)
    target = require_string(input, "target")
    result = await runtime.send(target, _event(ctx, input, AGENT_SEND))
    return {"target": target, "eventId": result["eventId"], "accepted": result["accepted"]}


async def spawn(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``spawn``: prepare an instance of an agent declared in the Swarm."""
    runtime = _runtime(ctx)
    target = require_string(input, "target")
    result = await runtime.spawn(
        target,
        instance_key=optional_string(input, "instanceKey") or None,
        cwd=await asyncio.to_thread(_from_workdir, ctx, optional_string(input, "cwd")),
    )
    return {
        "target": result["target"],
        "instanceKey": result["instanceKey"],
        "spawned": result["spawned"],
        "cwd": result.get("cwd"),
    }


def _from_workdir(ctx: ToolContext, cwd: str | None) -> str | None:
    """A relative ``cwd`` means one under the caller's own workdir, not the daemon's; the
    target agent checks the resolved path against that workdir (the authoritative check: a
    caller's process could send any path)."""
    if not cwd:
        return None
    if ctx.workdir_pin is not None:  # a workdir swapped for a link is no base to lend from
        ctx.workdir_pin.verify()
    # Resolved as the kernel would (symlinks before `..`), so what is checked is what is used.
    return os.path.realpath(os.path.join(ctx.workdir, cwd))


async def list_(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``list``: instances spawned by the caller (or by anyone)."""
    runtime = _runtime(ctx)
    result = await runtime.list(include_all=optional_bool(input, "includeAll", False))
    agents: list[JsonValue] = [
        {
            "target": info["target"],
            "instanceKey": info["instanceKey"],
            "ownerAgent": info["ownerAgent"],
            "ownerInstanceKey": info["ownerInstanceKey"],
            "createdAt": info["createdAt"],
            "cwd": info.get("cwd"),
        }
        for info in result["agents"]
    ]
    return {"count": len(agents), "agents": agents}


async def catalog(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``catalog``: the Swarm's agents and which of them the caller may call."""
    result = await _runtime(ctx).catalog()
    available: list[JsonValue] = list(result["availableAgents"])
    callable_: list[JsonValue] = list(result["callableAgents"])
    return {
        "swarmName": result["swarmName"],
        "entryAgent": result["entryAgent"],
        "selfAgent": result["selfAgent"],
        "availableCount": len(available),
        "callableCount": len(callable_),
        "availableAgents": available,
        "callableAgents": callable_,
    }


handlers: dict[str, ToolHandler] = {
    "request": request,
    "send": send,
    "spawn": spawn,
    "list": list_,
    "catalog": catalog,
}
