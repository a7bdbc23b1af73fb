"""SIGKILL while an agent waits for its model: the caller is answered, nothing is lost.

The agent runs the real ``openai`` provider against a local Chat Completions server, which
kills the agent process when the first request arrives: after the Turn's user message was
persisted, before any answer.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_process.conversation import ConversationStore
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.wire_server import Recorded, Reply, WireServer, openai_completion, serve

pytestmark = pytest.mark.timeout(120)

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
metadata: {{name: solo}}
spec:
  modelConfig: {{modelRef: Model/gpt}}
  prompt: {{system: You answer.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/solo
  agents: [Agent/solo]
"""


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


async def test_a_kill_during_the_model_call_is_answered_and_resumed(
    server: WireServer, tmp_path: Path
) -> None:
    server.replies = [
        Reply(body=openai_completion({"content": "never delivered"})),
        Reply(body=openai_completion({"content": "answer two"})),
    ]
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM.format(url=server.url))
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    handle = orchestrator.supervisor.handle("solo")
    killed: list[int] = []

    def kill_the_agent_once(request: Recorded) -> None:
        if not killed and handle.pid is not None:
            killed.append(handle.pid)
            os.kill(handle.pid, signal.SIGKILL)

    server.on_request = kill_the_agent_once
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            crashed = await orchestrator.request("first question")
            assert crashed.status == "error"
            assert crashed.error.code == "AGENT_CRASHED"
            await orchestrator.supervisor.wait_until(
                lambda: handle.pid not in (None, *killed) and handle.status is ProcessStatus.IDLE
            )
            answer = await orchestrator.request("second question")
        finally:
            await orchestrator.shutdown()
    assert answer.output == "answer two"
    assert len(server.requests) == 2
    # the resumed conversation went to the model: the first question was not lost
    assert server.requests[1].body["messages"] == [
        {"role": "system", "content": "You answer."},
        {"role": "user", "content": "first question"},
        {"role": "user", "content": "second question"},
    ]
    conversation = tmp_path / "state" / "agents" / "solo" / "instances" / "default" / "conversation"
    messages = ConversationStore(conversation).load()
    assert [(m.role, m.content) for m in messages] == [
        ("system", "You answer."),
        ("user", "first question"),
        ("user", "second question"),
        ("assistant", "answer two"),
    ]
