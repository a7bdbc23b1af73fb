"""wait and self-restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.tool_context import acall
from tools_base import ToolContext, ToolError
from tools_base.tools import self_restart, wait


@pytest.mark.parametrize(
    ("seconds", "waited_ms"), [(0, 0), (0.01, 10), (0.0005, 1), (0.0004, 0), (0.0125, 13)]
)
async def test_wait(ctx: ToolContext, seconds: float, waited_ms: int) -> None:
    out = await acall(wait.handlers["wait"], ctx, {"seconds": seconds})
    assert out == {"waitedSeconds": seconds, "waitedMs": waited_ms}


@pytest.mark.parametrize("seconds", [-0.1, 300.5, "5", True, None])
async def test_wait_rejects_out_of_range_or_non_numbers(ctx: ToolContext, seconds: Any) -> None:
    with pytest.raises(ToolError) as exc_info:
        await acall(wait.handlers["wait"], ctx, {"seconds": seconds})
    assert exc_info.value.code == "E_TOOL_INVALID_ARGS"


async def test_wait_yields_to_other_tasks_and_can_be_cancelled(ctx: ToolContext) -> None:
    task = asyncio.create_task(acall(wait.handlers["wait"], ctx, {"seconds": 300}))
    other = asyncio.Event()
    asyncio.get_running_loop().call_soon(other.set)
    await asyncio.wait_for(other.wait(), 5)  # the loop is free while the tool waits
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({}, "tool:self-restart"),
        ({"reason": ""}, "tool:self-restart"),
        ({"reason": "   \n"}, "tool:self-restart"),
        ({"reason": "  config changed "}, "config changed"),
    ],
)
async def test_self_restart(ctx: ToolContext, args: dict[str, Any], reason: str) -> None:
    # No Orchestrator to check the configuration with: the tool only answers.
    out = await acall(self_restart.handlers["request"], ctx, args)
    assert out == {"ok": True, "restartRequested": True, "restartReason": reason}


async def test_self_restart_rejects_a_non_string_reason(ctx: ToolContext) -> None:
    with pytest.raises(ToolError):
        await acall(self_restart.handlers["request"], ctx, {"reason": 5})
