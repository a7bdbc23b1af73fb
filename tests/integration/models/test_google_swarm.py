"""A two-agent handoff through the real Orchestrator, both agents on the `google` provider,
pointed at a local server that speaks Gemini's ``generateContent``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from tests.support.wire_server import Reply, WireServer, gemini_response, serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: gemini}}
spec:
  provider: google
  model: gemini-test
  baseUrl: {url}
  apiKey: {{value: local-key}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: boss}}
spec:
  modelConfig: {{modelRef: Model/gemini}}
  prompt: {{system: You delegate.}}
  tools: [{{ref: {{kind: Tool, name: agents, package: "@goondan/base"}}}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: helper}}
spec:
  modelConfig: {{modelRef: Model/gemini}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/boss
  agents: [Agent/boss, Agent/helper]
"""


async def test_handoff_between_two_gemini_agents(server: WireServer, tmp_path: Path) -> None:
    call = {
        "functionCall": {"name": "agents__request", "args": {"target": "helper", "input": "say hi"}}
    }
    server.replies = [
        Reply(body=gemini_response([call], response_id="boss-0")),
        Reply(body=gemini_response([{"text": "hi from helper"}], response_id="helper-0")),
        Reply(
            body=gemini_response([{"text": "helper said: hi from helper"}], response_id="boss-1")
        ),
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
    [tools] = boss_first["tools"]
    assert [d["name"] for d in tools["functionDeclarations"]] == [
        "agents__request",
        "agents__send",
        "agents__spawn",
        "agents__list",
        "agents__catalog",
    ]
    assert boss_first["systemInstruction"]["parts"] == [{"text": "You delegate."}]
    assert helper["contents"] == [{"role": "user", "parts": [{"text": "say hi"}]}]
    assert "tools" not in helper
    model_turn, results = boss_second["contents"][-2:]
    assert model_turn["parts"][0]["functionCall"]["id"] == "call_boss-0_0"
    [part] = results["parts"]
    assert part["functionResponse"]["id"] == "call_boss-0_0"
    assert part["functionResponse"]["name"] == "agents__request"
    assert part["functionResponse"]["response"]["output"]["response"] == "hi from helper"
