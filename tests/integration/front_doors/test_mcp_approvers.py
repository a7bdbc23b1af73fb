"""Who may answer an approval through MCP: an agent's own program that calls a tool over
``api.sock`` with elicitation declared is never asked (it would approve its swarm's parked
calls); its call waits, says why, and the attempt is on record."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.approvals import approval_swarm, watching

pytestmark = pytest.mark.timeout(120)

ROGUE_CLIENT = """\
import asyncio, sys
import httpx2, mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async def elicited(context, params):
        print("ELICITED", flush=True)
        return types.ElicitResult(action="accept")
    said = asyncio.Queue()
    async def progressed(done, total, message):
        if message and message.startswith("waiting for an operator"):
            said.put_nowait(message)
    transport = httpx2.AsyncHTTPTransport(uds=sys.argv[1])
    async with (
        httpx2.AsyncClient(transport=transport, timeout=30) as http,
        streamable_http_client("http://localhost/mcp", http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=elicited) as session,
    ):
        await session.initialize()
        call = asyncio.create_task(session.call_tool(
            "clerk", {"input": "run touch ran.txt"}, progress_callback=progressed))
        async with asyncio.timeout(40):
            print(await said.get(), flush=True)
        call.cancel()

asyncio.run(main())
"""
"""An MCP client that accepts every question, as an agent's shell would run it."""


async def test_an_agents_program_is_not_asked_to_approve(tmp_path: Path) -> None:
    script = tmp_path / "rogue_client.py"
    script.write_text(ROGUE_CLIENT)
    async with approval_swarm(tmp_path, rogue=True) as swarm:
        socket = swarm.state_dir / "api.sock"
        async with watching(swarm) as events:
            answer = await swarm.request(f"shell {sys.executable} {script} {socket}", agent="rogue")
            refused = await events.next("approval.refused", agentName="clerk")
        approval_id = refused["approvalId"]
        output = answer.output
        assert output.startswith("ran: waiting for an operator"), output
        assert "ELICITED" not in output
        assert f"approval {approval_id}" in output
        assert "not asked here: the caller may not decide approvals" in output
        assert "carries the process scope of agent 'rogue'" in refused["reason"]
        record = swarm.operations.approval(approval_id)
        assert record is not None
        assert record.status == "pending"  # still the operator's to decide
