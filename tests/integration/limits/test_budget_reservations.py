"""Budgets under parallel model calls: every call reserves what it may use before it is made.

The real Orchestrator runs real AgentProcesses on the ``openai`` provider (the official SDK),
pointed at a local Chat Completions server that reports each call's usage. A coordinator fans
out ten parallel ``agents__request`` to ten instances of a worker whose every call costs 200
tokens, under a trace budget of 600: the trace's total must stay within what the README
promises, however the calls interleave.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from orchestrator.operations.encoding import plain
from tests.support.model_server import Call, ModelServer, text_reply
from tests.support.wire_server import Reply, openai_completion

pytestmark = pytest.mark.timeout(120)

FANOUT = 10
WORKER_USAGE = (150, 50)
"""What each worker call reports: 200 tokens."""
COORDINATOR_USAGE = (30, 20)
WORKER_MAX_TOKENS = 60
PADDING = "Work carefully and answer in one short line. " * 15
"""The worker's system prompt runs to about 700 characters, so its calls' input estimate
(characters / 4) is above the 150 input tokens the server reports for them: no call uses more
than it reserved, and the budget's bound is the ceiling itself."""

# The coordinator declares only the export it uses: the whole agents tool of @goondan/base is
# estimated at some 780 input tokens, more than the 600 of the budget.
RELAY_TOOL = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: agents}
spec:
  entry: ./relay.py
  exports:
    - name: request
      description: Ask another agent and wait for its answer.
      parameters:
        type: object
        properties:
          target: {type: string}
          input: {type: string}
          instanceKey: {type: string}
        required: [target, input]
"""
RELAY_MODULE = """\
from tools_base.tools.agents import request

handlers = {"request": request}
"""


def model_doc(url: str) -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: gpt}}
spec:
  provider: openai
  model: gpt-test
  baseUrl: {url}
  apiKey: {{value: sk-local}}
  timeoutSeconds: 30
  maxRetries: 0
"""


def agent_doc(name: str, max_tokens: int, extra: str = "", prompt: str = "") -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/gpt, params: {{maxTokens: {max_tokens}}}}}
  prompt: {{system: "You are {name}. {prompt}"}}
{extra}"""


def swarm_doc(agents: list[str], budgets: str) -> str:
    names = ", ".join(f"Agent/{name}" for name in agents)
    return f"""\
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/{agents[0]}
  agents: [{names}]
  budgets:
{budgets}"""


@asynccontextmanager
async def running(tmp_path: Path, docs: list[str]) -> AsyncIterator[Orchestrator]:
    (tmp_path / "relay.py").write_text(RELAY_MODULE)
    path = tmp_path / "goondan.yaml"
    path.write_text("---\n".join(docs))
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    await orchestrator.start()
    try:
        yield orchestrator
    finally:
        await orchestrator.shutdown()


def fan_out(count: int) -> Reply:
    """The coordinator's answer: ``count`` parallel requests, each to an instance of its own."""
    calls = [
        {
            "id": f"call_{index}",
            "type": "function",
            "function": {
                "name": "agents__request",
                "arguments": json.dumps(
                    {"target": "worker", "input": f"task {index}", "instanceKey": f"w{index}"}
                ),
            },
        }
        for index in range(count)
    ]
    body = openai_completion({"content": None, "tool_calls": calls}, "tool_calls")
    prompt, completion = COORDINATOR_USAGE
    body["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return Reply(body=body)


def reported(call: Call) -> int:
    """The tokens the server reported for ``call``."""
    usage = WORKER_USAGE if call.agent == "worker" else COORDINATOR_USAGE
    return sum(usage) if call.status == 200 else 0


def usage_of(orchestrator: Orchestrator) -> dict[str, Any]:
    """The daemon's usage report, as ``GET /v1/usage`` shows it."""
    report = plain(orchestrator.operations.usage_report())
    assert isinstance(report, dict)
    return report


async def test_parallel_requests_keep_a_trace_within_its_budget(tmp_path: Path) -> None:
    def answer(agent: str, body: dict[str, Any]) -> Reply:
        if agent == "worker":
            return text_reply("worked", *WORKER_USAGE)
        if body["messages"][-1]["role"] == "tool":
            return text_reply("all done", *COORDINATOR_USAGE)
        return fan_out(FANOUT)

    tools = "  tools: [Tool/agents]\n  toolPolicy: {parallelToolCalls: true}\n"
    with ModelServer(answer) as server:
        docs = [
            model_doc(server.url),
            RELAY_TOOL,
            agent_doc("coordinator", 40, tools),
            agent_doc("worker", WORKER_MAX_TOKENS, prompt=PADDING),
            swarm_doc(["coordinator", "worker"], "    trace: {totalTokens: 600}\n"),
        ]
        async with running(tmp_path, docs) as orchestrator:
            async with asyncio.timeout(60):
                result: DelegateAnswer = await orchestrator.request("go", agent="coordinator")
            [trace] = usage_of(orchestrator)["traces"]
            assert orchestrator.metrics is not None
            metrics = orchestrator.metrics.exposition().decode()
    workers = [c for c in server.calls if c.agent == "worker"]
    # With 50 used, a worker call reserving ~235 (its estimate and maxTokens 60) fits twice
    # under 600, whatever the order in which the calls start and end; the eight others are
    # refused before they are sent.
    assert len(workers) == 2, server.summary()
    total = sum(reported(c) for c in server.calls)
    assert trace["usage"]["totalTokens"] == total == 450
    assert total <= 600
    assert "reserved" not in trace  # every call settled
    refused = f'goondan_budget_exceeded_total{{agent="worker",budget="trace"}} {FANOUT - 2:.1f}'
    assert refused in metrics
    # The coordinator's next call, with the ten results, does not fit either.
    assert result.error is not None
    assert result.error.code == "E_BUDGET_EXCEEDED"
    assert result.error.message.startswith("trace budget exceeded: totalTokens 450 of 600")


async def test_a_failed_call_returns_its_reservation(tmp_path: Path) -> None:
    failed: list[str] = []

    def answer(agent: str, body: dict[str, Any]) -> Reply:
        if not failed:
            failed.append(agent)
            error = {"message": "upstream broke", "type": "server_error", "code": None}
            return Reply(status=500, body={"error": error})
        return text_reply("fine", 100, 20)

    with ModelServer(answer) as server:
        server.hold("alpha")
        docs = [
            model_doc(server.url),
            agent_doc("alpha", 50),
            swarm_doc(["alpha"], "    trace: {totalTokens: 400}\n"),
        ]
        async with running(tmp_path, docs) as orchestrator:
            call = asyncio.ensure_future(orchestrator.request("go", agent="alpha"))
            await asyncio.to_thread(server.wait_for, lambda calls: len(calls) == 1, 30)
            [during] = usage_of(orchestrator)["traces"]
            server.release("alpha")
            async with asyncio.timeout(30):
                first: DelegateAnswer = await call
            [after] = usage_of(orchestrator)["traces"]
            async with asyncio.timeout(30):
                second = await orchestrator.request("again", agent="alpha")
    reserved = during["reserved"]
    assert reserved["calls"] == 1
    assert reserved["outputTokens"] == 50  # the agent's maxTokens
    assert reserved["inputTokens"] > 0  # the prompt's estimate
    assert during["usage"]["totalTokens"] == 0
    assert first.error is not None
    assert first.error.code != "E_BUDGET_EXCEEDED"
    assert "reserved" not in after  # given back whole
    assert after["usage"]["totalTokens"] == 0
    assert second.output == "fine"
