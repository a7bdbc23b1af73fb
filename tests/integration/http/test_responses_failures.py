"""A failed Turn on the Responses door maps as on chat, seen by the official ``openai`` client
against a real daemon on loopback TCP: 409 for a busy instance whose agent rejects a second
message, 429 (not retried) for a used-up budget."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.concurrency_swarm import write_concurrency_swarm
from tests.support.listening import serving, tcp_url
from tests.support.model_server import ModelServer, text_reply
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(90)

TOKEN = "sk-responses-failures"
BUDGETED = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: gpt}}
spec:
  provider: openai
  model: gpt-test
  baseUrl: {url}
  apiKey: {{value: sk-local}}
  maxTokens: 50
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: alpha}}
spec:
  modelConfig: {{modelRef: Model/gpt}}
  budgets:
    instance: {{totalTokens: 300}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha]
"""
"""One agent whose conversation may use 300 tokens; the first call uses 350."""


@asynccontextmanager
async def served(
    path: Path, retries: int = 0
) -> AsyncIterator[tuple[Orchestrator, openai.AsyncOpenAI]]:
    async with serving(path, TOKEN) as orchestrator:
        base = f"{tcp_url(orchestrator)}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=TOKEN, max_retries=retries) as client:
            yield orchestrator, client


async def test_a_busy_instance_that_rejects_is_a_409(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with served(write_concurrency_swarm(tmp_path)) as (swarm, client):
        first = await client.responses.create(
            model="rejecter", input=f"hold {gate}", user="k", background=True
        )
        async with asyncio.timeout(30):
            await swarm.supervisor.wait_for_status("rejecter", ProcessStatus.PROCESSING)
        with pytest.raises(openai.ConflictError) as busy:
            await client.responses.create(model="rejecter", input="hello", user="k")
        assert busy.value.code == "INSTANCE_BUSY"
        assert busy.value.type == "conflict_error"
        with pytest.raises(openai.ConflictError):
            await client.responses.create(model="rejecter", input="hello", user="k", stream=True)
        gate.touch()
        request_id = "req_" + first.id.removeprefix("resp_")
        await client.get(f"/requests/{request_id}?wait=30", cast_to=object)  # until it is done
        assert (await client.responses.retrieve(first.id)).output_text == "held: released"


async def test_a_used_up_budget_is_a_429_the_client_does_not_retry(tmp_path: Path) -> None:
    def answer(agent: str, body: dict[str, Any]) -> Reply:
        return text_reply("fine", prompt_tokens=300, completion_tokens=50)

    with ModelServer(answer) as server:
        path = tmp_path / "goondan.yaml"
        path.write_text(BUDGETED.format(url=server.url))
        async with served(path, retries=3) as (_, client):
            first = await client.responses.create(model="alpha", input="hi")
            with pytest.raises(openai.RateLimitError) as refused:
                await client.responses.create(model="alpha", input="hi again")
    assert first.output_text == "fine"
    assert first.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (300, 50)
    assert refused.value.status_code == 429
    assert refused.value.code == "E_BUDGET_EXCEEDED"
    assert refused.value.type == "insufficient_quota"
    assert len(server.calls) == 1  # refused before the model; the client did not retry
