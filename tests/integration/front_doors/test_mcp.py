"""The swarm as an MCP server, driven by the official ``mcp`` client against a real daemon
serving ``/mcp`` on TCP (with a token): tools, answers, conversations, progress, approvals
by elicitation and through another door, and what a hostile caller gets."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from orchestrator.daemon import Orchestrator
from tests.support.listening import serving, tcp_url
from tests.support.mcp_swarm import write_mcp_swarm

TOKEN = "mcp-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Served:
    """A running swarm and where its MCP server answers."""

    orchestrator: Orchestrator
    base: str

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(write_mcp_swarm(tmp_path), TOKEN) as orchestrator:
        yield Served(orchestrator, tcp_url(orchestrator))


@asynccontextmanager
async def session(
    served: Served, *, modern: bool = False, **options: Any
) -> AsyncIterator[ClientSession]:
    """A client session with the daemon's MCP server, initialized (or, ``modern``, on the
    2026-07-28 revision, which has no handshake)."""
    timeout = httpx2.Timeout(30, read=120)
    async with (
        httpx2.AsyncClient(headers=AUTH, timeout=timeout) as http,
        streamable_http_client(served.url, http_client=http) as (read, write),
        ClientSession(read, write, **options) as client,
    ):
        async with asyncio.timeout(30):
            await (client.discover() if modern else client.initialize())
        yield client


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_each_agent_shown_is_a_tool_with_its_description(served: Served) -> None:
    async with session(served) as client, asyncio.timeout(30):
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["clerk", "scribe"]  # backroom shows itself to openai only
    scribe = tools["scribe"]
    assert scribe.description == "Keeps one note per conversation and reads it back."
    assert scribe.input_schema["required"] == ["input"]
    assert set(scribe.input_schema["properties"]) == {"input", "instanceKey"}


async def test_a_call_answers_with_the_agents_text_and_its_request(served: Served) -> None:
    async with session(served) as client, asyncio.timeout(60):
        result = await client.call_tool("scribe", {"input": "hello there"})
    assert not result.is_error
    assert text_of(result) == "scribe got: hello there"
    body = result.structured_content
    assert isinstance(body, dict)
    assert body["output"] == "scribe got: hello there"
    assert body["status"] == "ok"
    # The request id finds the same answer again through the request API.
    async with httpx2.AsyncClient(base_url=served.base, headers=AUTH, timeout=30) as http:
        again = await http.get(f"/v1/requests/{body['requestId']}")
    assert again.json()["state"] == "done"
    assert again.json()["answer"]["output"] == "scribe got: hello there"


async def test_an_instance_key_continues_its_own_conversation(served: Served) -> None:
    async with session(served) as client, asyncio.timeout(60):
        noted = await client.call_tool("scribe", {"input": "note milk", "instanceKey": "k1"})
        recalled = await client.call_tool("scribe", {"input": "recall", "instanceKey": "k1"})
        elsewhere = await client.call_tool("scribe", {"input": "recall", "instanceKey": "k2"})
    assert text_of(noted) == "wrote 4 bytes to note.txt"
    assert text_of(recalled) == "read: milk"
    # Another conversation has no note: its Turn fails, as a tool result, not a protocol error.
    assert elsewhere.is_error
    assert text_of(elsewhere).startswith("E_MAX_STEPS: ")
    body = elsewhere.structured_content
    assert isinstance(body, dict)
    assert body["error"]["code"] == "E_MAX_STEPS"
    assert body["requestId"] in text_of(elsewhere)


async def test_progress_is_reported_while_the_turn_runs(served: Served) -> None:
    messages: list[str] = []

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with session(served) as client, asyncio.timeout(60):
        result = await client.call_tool(
            "scribe", {"input": "three small words"}, progress_callback=progressed
        )
    assert text_of(result) == "scribe got: three small words"
    assert messages[0].startswith("accepted as request req_")
    assert "scribe: step 1 started" in messages
    assert "".join(m for m in messages if m.endswith((" ", "words"))).endswith("words")


async def test_only_a_call_with_a_progress_token_has_the_turns_text_streamed(
    served: Served,
) -> None:
    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with session(served) as client, asyncio.timeout(60):
        quiet = await client.call_tool("scribe", {"input": "no progress"})
        told = await client.call_tool("scribe", {"input": "progress"}, progress_callback=progressed)
    streamed = {}
    for result in (quiet, told):
        body = result.structured_content
        assert isinstance(body, dict)
        record = served.orchestrator.requests.record(body["requestId"])
        assert record is not None
        streamed[text_of(result)] = record.stream
    assert streamed == {"scribe got: no progress": False, "scribe got: progress": True}


async def test_an_approval_is_asked_by_elicitation(served: Served) -> None:
    asked: list[str] = []

    async def elicited(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async with session(served, elicitation_callback=elicited) as client, asyncio.timeout(60):
        result = await client.call_tool("clerk", {"input": "write a.txt hi"})
    assert text_of(result) == "wrote 2 bytes to a.txt"
    [question] = asked
    assert "clerk wants to call file-system__write" in question
    approval_id = re.search(r"apr_[0-9a-f]{16}", question)
    assert approval_id is not None
    record = served.orchestrator.operations.approval(approval_id.group(0))
    assert record is not None
    assert record.status == "approved"
    assert isinstance(record.decided_by, dict)
    assert record.decided_by["via"] == "tcp"


async def test_declining_the_elicitation_rejects_the_call(served: Served) -> None:
    async def declined(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with session(served, elicitation_callback=declined) as client, asyncio.timeout(60):
        result = await client.call_tool("clerk", {"input": "write b.txt no"})
    assert text_of(result).startswith("ERROR E_TOOL_REJECTED: ")
    assert "rejected by the user of the MCP client (decline)" in text_of(result)
    assert not list(served.orchestrator.state_dir.glob("agents/clerk/**/b.txt"))


async def test_without_elicitation_the_call_waits_for_another_door(served: Served) -> None:
    waiting: asyncio.Queue[str] = asyncio.Queue()
    logged: list[str] = []

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("waiting for an operator"):
            waiting.put_nowait(message)

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(str(params.data))

    async with (
        session(served, logging_callback=log) as client,
        httpx2.AsyncClient(base_url=served.base, headers=AUTH, timeout=30) as http,
        asyncio.timeout(60),
    ):
        call = asyncio.create_task(
            client.call_tool("clerk", {"input": "write c.txt yes"}, progress_callback=progressed)
        )
        message = await waiting.get()
        found = re.search(r"approval (apr_[0-9a-f]{16})", message)
        assert found is not None
        approval_id = found.group(1)
        assert f"POST /v1/approvals/{approval_id}/approve" in message
        assert not call.done()
        approved = await http.post(f"/v1/approvals/{approval_id}/approve", json={})
        assert approved.status_code == 200
        result = await call
    assert text_of(result) == "wrote 3 bytes to c.txt"
    assert any(approval_id in line for line in logged)


async def test_an_approval_decided_elsewhere_withdraws_the_question(served: Served) -> None:
    asked: asyncio.Queue[str] = asyncio.Queue()

    async def unanswered(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.put_nowait(params.message)
        await asyncio.Event().wait()  # its user never answers
        raise AssertionError("unreachable")

    async with (
        session(served, elicitation_callback=unanswered) as client,
        httpx2.AsyncClient(base_url=served.base, headers=AUTH, timeout=30) as http,
        asyncio.timeout(60),
    ):
        call = asyncio.create_task(client.call_tool("clerk", {"input": "write e.txt hey"}))
        found = re.search(r"apr_[0-9a-f]{16}", await asked.get())
        assert found is not None
        approved = await http.post(f"/v1/approvals/{found.group(0)}/approve", json={})
        assert approved.status_code == 200
        result = await call
    assert text_of(result) == "wrote 3 bytes to e.txt"


async def test_a_client_of_the_2026_revision_is_served(served: Served) -> None:
    async with session(served, modern=True) as client, asyncio.timeout(60):
        listed = await client.list_tools()
        result = await client.call_tool("scribe", {"input": "hello from 2026"})
    assert sorted(tool.name for tool in listed.tools) == ["clerk", "scribe"]
    assert text_of(result) == "scribe got: hello from 2026"


KEYED = "goondan.ai/idempotencyKey"


async def test_a_call_again_with_its_key_reattaches_to_its_request(served: Served) -> None:
    waiting: asyncio.Queue[str] = asyncio.Queue()

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("waiting for an operator"):
            waiting.put_nowait(message)

    arguments = {"input": "write f.txt once"}
    async with (
        session(served) as client,
        httpx2.AsyncClient(base_url=served.base, headers=AUTH, timeout=30) as http,
        asyncio.timeout(60),
    ):
        first = asyncio.create_task(
            client.call_tool(
                "clerk", arguments, progress_callback=progressed, meta={KEYED: "order-1"}
            )
        )
        found = re.search(r"approval (apr_[0-9a-f]{16})", await waiting.get())
        assert found is not None
        first.cancel()  # the client gives up on the call; its Turn goes on
        with contextlib.suppress(asyncio.CancelledError):
            await first
        again = asyncio.create_task(client.call_tool("clerk", arguments, meta={KEYED: "order-1"}))
        approved = await http.post(f"/v1/approvals/{found.group(1)}/approve", json={})
        assert approved.status_code == 200
        result = await again
        reused = await client.call_tool(
            "clerk", {"input": "write g.txt other"}, meta={KEYED: "order-1"}
        )
        bad = await client.call_tool("clerk", arguments, meta={KEYED: "line\nbreak"})
    assert text_of(result) == "wrote 4 bytes to f.txt"
    approvals = served.orchestrator.operations.approvals(agent="clerk", include_decided=True)
    assert len(approvals) == 1  # one Turn, however often it was called
    assert reused.is_error
    assert isinstance(reused.structured_content, dict)
    assert reused.structured_content["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert bad.is_error
    assert isinstance(bad.structured_content, dict)
    assert bad.structured_content["error"]["field"] == f"_meta.{KEYED}"


async def test_an_unknown_tool_is_a_protocol_error(served: Served) -> None:
    async with session(served) as client, asyncio.timeout(30):
        with pytest.raises(MCPError) as raised:
            await client.call_tool("backroom", {"input": "hi"})  # not shown to MCP
    assert raised.value.code == types.INVALID_PARAMS
    assert "Unknown tool: backroom" in raised.value.message


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({}, "input"), ({"input": 42}, "input"), ({"input": "hi", "instanceKey": []}, "instanceKey")],
)
async def test_bad_arguments_are_an_error_result_naming_the_field(
    served: Served, arguments: dict[str, Any], field: str
) -> None:
    async with session(served) as client, asyncio.timeout(30):
        result = await client.call_tool("scribe", arguments)
    assert result.is_error
    body = result.structured_content
    assert isinstance(body, dict)
    assert body["error"]["code"] == "BAD_REQUEST"
    assert body["error"]["field"] == field
    assert field in text_of(result)


INITIALIZE = (
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
    b'"2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}'
)
"""An ``initialize`` request as raw bytes (hostile cases are sent without the client)."""
RAW = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def test_a_foreign_origin_a_missing_token_and_oversize_are_refused(served: Served) -> None:
    async with httpx2.AsyncClient(base_url=served.base, timeout=30) as http:
        foreign = await http.post(
            "/mcp", content=INITIALIZE, headers={**RAW, **AUTH, "Origin": "https://evil.example"}
        )
        tokenless = await http.post("/mcp", content=INITIALIZE, headers=RAW)
        form = await http.post(
            "/mcp", content=INITIALIZE, headers={**AUTH, "Content-Type": "text/plain"}
        )
        oversize = await http.post(
            "/mcp", content=b'{"pad": "' + b"x" * (2 << 20) + b'"}', headers={**RAW, **AUTH}
        )
    assert foreign.status_code == 403
    assert foreign.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert tokenless.status_code == 401
    assert tokenless.json()["error"]["code"] == "UNAUTHORIZED"
    assert form.status_code == 415
    assert oversize.status_code == 413
    assert oversize.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_shutdown_ends_open_sessions_and_leaves_no_task(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_mcp_swarm(tmp_path),
        state_dir=tmp_path / "state",
        api_listen="127.0.0.1:0",
        api_token=TOKEN,
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    assert orchestrator.api is not None
    served = Served(orchestrator, f"http://127.0.0.1:{orchestrator.api.port}")
    waiting = asyncio.Event()

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("waiting for an operator"):
            waiting.set()

    try:
        async with session(served) as client, asyncio.timeout(60):
            call = asyncio.create_task(
                client.call_tool("clerk", {"input": "write d.txt x"}, progress_callback=progressed)
            )
            await waiting.wait()
            await orchestrator.shutdown()  # a session open, a call waiting on its approval
            stopped = await call
    finally:
        if not orchestrator.operations.stopping:
            await orchestrator.shutdown()
    # The call is told the daemon stopped under it, and by which request to ask again.
    assert stopped.is_error
    assert text_of(stopped).startswith("SHUTTING_DOWN: ")
    body = stopped.structured_content
    assert isinstance(body, dict)
    assert body["requestId"] in text_of(stopped)
    assert len(orchestrator.tasks) == 0
    mcp_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp")]
    assert mcp_tasks == []
