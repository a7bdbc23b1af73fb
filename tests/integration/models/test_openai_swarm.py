"""A two-agent handoff through the real Orchestrator, both agents on the `openai` provider,
pointed at a local server that speaks Chat Completions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from tests.support.wire_server import Reply, WireServer, openai_completion, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: gpt}}
spec:
  provider: openai
  model: gpt-test
  baseUrl: {url}/v1
  apiKey: {{value: sk-local}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: boss}}
spec:
  modelConfig: {{modelRef: Model/gpt}}
  prompt: {{system: You delegate.}}
  tools: [{{ref: {{kind: Tool, name: agents, package: "@goondan/base"}}}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: helper}}
spec:
  modelConfig: {{modelRef: Model/gpt}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/boss
  agents: [Agent/boss, Agent/helper]
"""


async def test_handoff_between_two_openai_agents(server: WireServer, tmp_path: Path) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "agents__request",
            "arguments": json.dumps({"target": "helper", "input": "say hi"}),
        },
    }
    server.replies = [
        Reply(
            body=openai_completion({"content": None, "tool_calls": [call]}, "tool_calls")
        ),  # boss, step 0
        Reply(body=openai_completion({"content": "hi from helper"})),  # helper's Turn
        Reply(body=openai_completion({"content": "helper said: hi from helper"})),  # boss, step 1
    ]
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM.format(url=server.url))
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            answer = await orchestrator.request("ask the helper")
        finally:
            await orchestrator.shutdown()
    assert answer.status == "ok", answer
    assert answer.output == "helper said: hi from helper"
    boss_first, helper, boss_second = (r.body for r in server.requests)
    assert [t["function"]["name"] for t in boss_first["tools"]] == [
        "agents__request",
        "agents__send",
        "agents__spawn",
        "agents__list",
        "agents__catalog",
    ]
    assert boss_first["messages"][0] == {"role": "system", "content": "You delegate."}
    assert helper["messages"] == [{"role": "user", "content": "say hi"}]
    assert "tools" not in helper
    tool_message = boss_second["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_1"
    assert json.loads(tool_message["content"])["output"]["response"] == "hi from helper"
