"""``python -m orchestrator mcp``: the daemon's MCP server over stdio, driven by the official
``mcp`` stdio client, against a running daemon (over ``api.sock``, and over TCP with a token)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from orchestrator.daemon import Orchestrator
from tests.support.daemon import run_cli
from tests.support.mcp_swarm import write_mcp_swarm
from tests.support.swarm import started

TOKEN = "stdio-token"


@asynccontextmanager
async def daemon(directory: Path, **options: Any) -> AsyncIterator[Orchestrator]:
    async with started(
        Orchestrator.from_bundle(
            write_mcp_swarm(directory), state_dir=directory / "state", **options
        )
    ) as orchestrator:
        yield orchestrator


@asynccontextmanager
async def stdio_session(
    directory: Path, *args: str, env: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[ClientSession]:
    """The official stdio client running ``python -m orchestrator mcp *args``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator", "mcp", *args],
        env={**os.environ, **(env or {})},
        cwd=str(directory),
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, **options) as session,
    ):
        async with asyncio.timeout(30):
            await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_stdio_serves_the_daemons_tools_over_its_socket(tmp_path: Path) -> None:
    asked: list[str] = []
    progress: list[str] = []

    async def elicited(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async def progressed(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    state = str(tmp_path / "state")
    async with (
        daemon(tmp_path),
        stdio_session(tmp_path, "--state-dir", state, elicitation_callback=elicited) as client,
        asyncio.timeout(90),
    ):
        listed = await client.list_tools()
        answered = await client.call_tool(
            "scribe", {"input": "hi via stdio"}, progress_callback=progressed
        )
        approved = await client.call_tool("clerk", {"input": "write s.txt ok"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("backroom", {"input": "hi"})
    descriptions = {tool.name: tool.description for tool in listed.tools}
    assert descriptions["scribe"] == "Keeps one note per conversation and reads it back."
    assert sorted(descriptions) == ["clerk", "scribe"]
    assert text_of(answered) == "scribe got: hi via stdio"
    assert isinstance(answered.structured_content, dict)
    assert answered.structured_content["requestId"].startswith("req_")
    assert progress[0].startswith("accepted as request req_")
    assert text_of(approved) == "wrote 2 bytes to s.txt"
    assert len(asked) == 1
    assert "file-system__write" in asked[0]
    assert unknown.value.code == types.INVALID_PARAMS


async def test_stdio_reaches_a_daemon_over_tcp_with_its_token(tmp_path: Path) -> None:
    async with daemon(tmp_path, api_listen="127.0.0.1:0", api_token=TOKEN) as orchestrator:
        assert orchestrator.api is not None
        url = f"http://127.0.0.1:{orchestrator.api.port}"
        args = ("--api-url", url, "--api-token-env", "MCP_TEST_TOKEN")
        env = {"MCP_TEST_TOKEN": TOKEN}
        keyed = {"goondan.ai/idempotencyKey": "stdio-1"}
        async with stdio_session(tmp_path, *args, env=env) as client, asyncio.timeout(60):
            answered = await client.call_tool("scribe", {"input": "over tcp"}, meta=keyed)
            again = await client.call_tool("scribe", {"input": "over tcp"}, meta=keyed)
    assert text_of(answered) == "scribe got: over tcp"
    # The key went on to the daemon: the call made again is the first one's request.
    assert isinstance(answered.structured_content, dict)
    assert again.structured_content == answered.structured_content


async def test_a_stdio_call_waits_for_a_decision_made_with_the_cli(tmp_path: Path) -> None:
    waiting: asyncio.Queue[str] = asyncio.Queue()
    logged: list[str] = []

    async def progressed(done: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("waiting for an operator"):
            waiting.put_nowait(message)

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(str(params.data))

    state = str(tmp_path / "state")
    async with (
        daemon(tmp_path),
        stdio_session(tmp_path, "--state-dir", state, logging_callback=log) as client,
        asyncio.timeout(90),
    ):
        call = asyncio.create_task(
            client.call_tool("clerk", {"input": "write w.txt cli"}, progress_callback=progressed)
        )
        found = re.search(r"approval (apr_[0-9a-f]{16})", await waiting.get())
        assert found is not None
        approve = ["approve", found.group(1), "--state-dir", state]
        done = await asyncio.to_thread(run_cli, *approve, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        result = await call
    assert text_of(result) == "wrote 3 bytes to w.txt"
    assert any(found.group(1) in line for line in logged)  # passed on from the daemon


def test_stdio_without_a_daemon_says_so(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "mcp", "--state-dir", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5
    assert done.stdout == ""  # stdout is the MCP wire: nothing else goes there
    assert "no daemon answers at" in done.stderr
