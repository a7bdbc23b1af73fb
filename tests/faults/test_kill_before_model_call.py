"""SIGKILL while an agent waits for its model: the caller keeps waiting and gets the Turn's
answer, the model call in flight is asked once more, nothing is lost.

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


async def test_a_kill_during_the_model_call_is_carried_to_its_answer(
    server: WireServer, tmp_path: Path
) -> None:
    server.replies = [
        Reply(body=openai_completion({"content": "never delivered"})),
        Reply(body=openai_completion({"content": "answer one"})),
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
            # The caller keeps waiting through the kill and the restart: the Turn resumes.
            first = await orchestrator.request("first question")
            assert handle.pid not in (None, *killed)
            answer = await orchestrator.request("second question")
        finally:
            await orchestrator.shutdown()
    assert (first.status, first.output) == ("ok", "answer one")
    assert answer.output == "answer two"
    # The model call in flight was asked once more (one kill, one repeat), with the same
    # conversation; nothing else was asked twice.
    assert len(server.requests) == 3
    asked = [
        {"role": "system", "content": "You answer."},
        {"role": "user", "content": "first question"},
    ]
    assert server.requests[0].body["messages"] == asked
    assert server.requests[1].body["messages"] == asked
    assert server.requests[2].body["messages"] == [
        *asked,
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "second question"},
    ]
    conversation = tmp_path / "state" / "agents" / "solo" / "instances" / "default" / "conversation"
    messages = ConversationStore(conversation).load()
    assert [(m.role, m.content) for m in messages] == [
        ("system", "You answer."),
        ("user", "first question"),
        ("assistant", "answer one"),
        ("user", "second question"),
        ("assistant", "answer two"),
    ]
