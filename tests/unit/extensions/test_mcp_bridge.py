"""The MCP bridge against a real MCP server process written with the ``mcp`` SDK."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.extensions import ExtensionHarness, base_extension
from tools_base.extensions.mcp_bridge import tool_name_for

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"

RULES: list[dict[str, Any]] = [
    {"when": {"input": "^add$"}, "call": {"tool": "mcp__add", "args": {"a": 2, "b": 40}}},
    {"when": {"input": "^fail$"}, "call": {"tool": "mcp__fail", "args": {"message": "no way"}}},
    {"when": {"input": "^crash$"}, "call": {"tool": "mcp__crash"}},
    {"when": {"input": "^pid$"}, "call": {"tool": "mcp__pid"}},
    {"when": {"input": "^slow$"}, "call": {"tool": "mcp__slow", "args": {"seconds": 5}}},
    {"when": {"input": "^echo$"}, "call": {"tool": "mcp__echo", "args": {"text": "hi"}}},
    {"when": {"status": "ok"}, "reply": "{result.result}"},
    {"when": {"status": "error"}, "reply": "{errorCode}: {error}"},
]


def stdio(**extra: Any) -> dict[str, Any]:
    return {"name": "local", "command": sys.executable, "args": [str(SERVER)], **extra}


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[ExtensionHarness]:
    h = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[base_extension("mcp", servers=[stdio(callTimeoutSeconds=1)])],
    )
    yield h
    await h.close()


async def gone(pid: int) -> bool:
    """Whether ``pid`` ended within a few seconds (bounded polling of the process table)."""
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.025)
    return False


def test_mcp_names_are_made_safe() -> None:
    assert tool_name_for("mcp", "read_file") == "mcp__read_file"
    assert tool_name_for("mcp", "web.search") == "mcp__web_search"
    assert tool_name_for("mcp", "a__b") == "mcp__a_b"
    assert tool_name_for("mcp", "...") is None


async def test_server_tools_are_registered_with_their_schema_and_source(
    harness: ExtensionHarness,
) -> None:
    tools = {t.name: t.item for t in harness.registry}
    assert set(tools) == {f"mcp__{n}" for n in ("add", "echo", "fail", "crash", "pid", "slow")}
    add = tools["mcp__add"]
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.source is not None
    assert add.source.to_json() == {
        "type": "mcp",
        "name": "mcp",
        "mcp": {"extensionName": "mcp", "serverName": "local"},
    }


async def test_calls_answer_and_failures_are_structured(harness: ExtensionHarness) -> None:
    assert (await harness.turn("add")).text == "42"
    failed = (await harness.turn("fail")).text
    assert failed.startswith("E_MCP_TOOL_ERROR: ")
    assert failed.endswith("no way")
    assert (await harness.turn("slow")).text.startswith("E_MCP_TIMEOUT: ")
    assert (await harness.turn("echo")).text == "hi"  # still connected after the timeout


async def test_a_crashed_server_is_an_error_and_the_next_call_restarts_it(
    harness: ExtensionHarness,
) -> None:
    first = int((await harness.turn("pid")).text)
    crashed = await harness.turn("crash")
    assert crashed.status == "ok"  # the Turn (and the agent) carry on
    assert crashed.text.startswith("E_MCP_SERVER_UNAVAILABLE: ")
    assert await gone(first)
    second = int((await harness.turn("pid")).text)
    assert second != first
    await harness.close()
    assert await gone(second)  # stopped with the agent


async def test_invalid_arguments_never_reach_the_server(harness: ExtensionHarness) -> None:
    harness.runner.settings.model.script.rules.insert(  # type: ignore[attr-defined]
        0,
        type(harness.runner.settings.model.script.rules[0]).model_validate(  # type: ignore[attr-defined]
            {"when": {"input": "^bad$"}, "call": {"tool": "mcp__add", "args": {"a": "two"}}}
        ),
    )
    assert (await harness.turn("bad")).text.startswith("E_TOOL_INVALID_ARGS: ")


async def test_an_allowlist_registers_only_those_tools(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[base_extension("mcp", servers=[stdio(tools=["add", "echo"])])],
    )
    assert sorted(t.name for t in harness.registry) == ["mcp__add", "mcp__echo"]
    await harness.close()


async def test_a_server_that_cannot_start_does_not_stop_the_agent(tmp_path: Path) -> None:
    broken = {"name": "ghost", "command": str(tmp_path / "no-such-server")}
    with capture_logs() as logs:
        harness = await ExtensionHarness.start(
            tmp_path,
            rules=RULES,
            extensions=[base_extension("mcp", servers=[broken, stdio()])],
        )
    assert "mcp__add" in harness.registry  # the good server still serves
    [failed] = [e for e in logs if e["event"] == "mcp server did not start; retrying later"]
    assert failed["server"] == "ghost"
    assert (await harness.turn("add")).text == "42"
    await harness.close()


async def test_a_streamable_http_server(tmp_path: Path) -> None:
    # the server inherits a socket bound and listening here: no other process can take its port
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "http",
        str(listener.fileno()),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        pass_fds=(listener.fileno(),),
    )
    listener.close()  # connections queue on the child's copy until it serves them
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        harness = await ExtensionHarness.start(
            tmp_path,
            rules=RULES,
            extensions=[base_extension("mcp", servers=[{"name": "remote", "url": url}])],
        )
        assert (await harness.turn("add")).text == "42"
        await harness.close()
    finally:
        process.terminate()
        async with asyncio.timeout(10):
            await process.wait()
