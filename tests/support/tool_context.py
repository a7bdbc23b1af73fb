"""A real ToolContext over a temporary workdir, and process helpers, for built-in tool tests."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from pathlib import Path
from typing import Any

import structlog

from tools_base import (
    AgentToolRuntime,
    JsonObject,
    Message,
    MessageSource,
    ToolCall,
    ToolContext,
    ToolHandler,
)

ASSISTANT = Message(
    id="msg-assistant-1",
    role="assistant",
    content="",
    tool_calls=(ToolCall(id="call-1", name="bash__exec", args={"command": "true"}),),
    source=MessageSource(type="assistant", step_id="turn-1-step-0"),
)


def make_ctx(workdir: Path, runtime: AgentToolRuntime | None = None) -> ToolContext:
    """A ToolContext as the executor builds it, rooted at ``workdir``."""
    return ToolContext(
        agent_name="coder",
        instance_key="default",
        turn_id="turn-1",
        trace_id="0123456789abcdef0123456789abcdef",
        tool_call_id="call-1",
        message=ASSISTANT,
        workdir=workdir,
        logger=structlog.get_logger(),
        runtime=runtime,
    )


async def acall(handler: ToolHandler, ctx: ToolContext, args: JsonObject) -> Any:
    """Run an async handler (handlers are typed sync-or-async, so ``await`` needs a check)."""
    result = handler(ctx, args)
    assert inspect.isawaitable(result)
    return await result


async def wait_process_gone(pid: int, deadline: float = 5.0) -> None:
    """Return once ``pid`` has exited (a zombie counts as exited); fail after ``deadline`` s.

    Uses a pidfd, which becomes readable when the process exits, so no polling is needed.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, on_exit)
    try:
        async with asyncio.timeout(deadline):
            await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


MARK = "GOONDAN_TEST_MARK"
"""The variable a test sets (a call's ``env``) to find the processes of a command by."""


def processes_marked(token: str) -> list[int]:
    """Pids (as this process sees them) of the processes started with ``MARK=token``.

    A sandboxed program has a PID namespace of its own, so the pid it prints means nothing
    here. Every process of the command inherits the environment it was started with, from the
    moment it is forked (its command line changes only at ``exec``).
    """
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in Path(entry.path, "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


async def read_fifo(fifo: Path, deadline: float = 10.0) -> str:
    """The first line a command writes to ``fifo``: an event the test awaits, bounded.

    The FIFO is opened without blocking and watched by the event loop, so a command that never
    writes leaves no thread stuck in ``open`` behind a failed test.
    """
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    data = b""
    try:
        async with asyncio.timeout(deadline):
            while b"\n" not in data:
                await readable.wait()
                readable.clear()
                with contextlib.suppress(BlockingIOError):
                    data += os.read(fd, 4096)
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return data.decode()


def kill_if_alive(pid: int) -> None:
    """Cleanup for a process a test started on purpose."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
