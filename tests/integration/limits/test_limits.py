"""Shared rate limits and trace budgets across real agent processes.

Every test runs the real Orchestrator with real AgentProcesses on the ``openai`` provider (the
official SDK), pointed at a local server that speaks Chat Completions and logs when each call
arrived and was answered: what the limits promise is asserted from that log, as the provider
would see it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bundle.plan import AgentPlan
from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from orchestrator.operations.encoding import plain
from tests.support.daemon import run_cli
from tests.support.model_server import (
    Call,
    ModelServer,
    call_reply,
    rate_limited,
    text_reply,
)
from tests.support.usage import metadata_usage
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(120)


def model_doc(url: str, *, limits: str, name: str = "gpt", timeout: float = 30) -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: {name}}}
spec:
  provider: openai
  model: gpt-test
  baseUrl: {url}
  apiKey: {{value: sk-local}}
  timeoutSeconds: {timeout}
  maxRetries: 2
  limits: {limits}
"""


def agent_doc(name: str, extra: str = "", model: str = "gpt") -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/{model}}}
  prompt: {{system: "You are {name}."}}
{extra}"""


def swarm_doc(agents: list[str], budgets: str = "") -> str:
    names = ", ".join(f"Agent/{name}" for name in agents)
    return f"""\
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/{agents[0]}
  agents: [{names}]
{budgets}"""


def swarm(url: str, agents: dict[str, str], *, limits: str, budgets: str = "") -> str:
    """Agents (name → extra spec lines) on one Model with ``limits``."""
    docs = [model_doc(url, limits=limits)]
    docs += [agent_doc(name, extra) for name, extra in agents.items()]
    docs.append(swarm_doc(list(agents), budgets))
    return "---\n".join(docs)


@asynccontextmanager
async def running(tmp_path: Path, text: str) -> AsyncIterator[Orchestrator]:
    path = tmp_path / "goondan.yaml"
    path.write_text(text)
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    await orchestrator.start()
    try:
        yield orchestrator
    finally:
        await orchestrator.shutdown()


def usage_of(orchestrator: Orchestrator) -> dict[str, Any]:
    """The daemon's usage report, as ``GET /v1/usage`` shows it."""
    report = plain(orchestrator.operations.usage_report())
    assert isinstance(report, dict)
    return report


async def calls_matching(
    server: ModelServer, condition: Callable[[list[Call]], bool]
) -> list[Call]:
    return await asyncio.to_thread(server.wait_for, condition, 30)


async def next_event(queue: asyncio.Queue[dict[str, Any]], kind: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            event = await queue.get()
            if event.get("type") == kind:
                return event


THREE = {"alpha": "", "beta": "", "gamma": ""}


async def test_max_concurrent_one_keeps_three_agents_from_ever_overlapping(tmp_path: Path) -> None:
    with ModelServer(lambda agent, body: text_reply(f"{agent} done"), delay=0.3) as server:
        text = swarm(server.url, THREE, limits="{maxConcurrent: 1}")
        async with running(tmp_path, text) as orchestrator:
            for name in THREE:  # all up first, so their calls contend
                await orchestrator.supervisor.ensure_running(name)
            async with orchestrator.live.subscribe() as events:
                answers = await asyncio.gather(
                    *(orchestrator.request("go", agent=name) for name in THREE)
                )
                waits = []
                while not events.queue.empty():
                    event = events.queue.get_nowait()
                    if event.get("type") == "model.permit.waiting":
                        waits.append(event)
    assert [a.output for a in answers] == ["alpha done", "beta done", "gamma done"]
    calls = sorted(server.calls, key=lambda c: c.arrived)
    assert len(calls) == 3
    for earlier, later in itertools.pairwise(calls):
        assert earlier.answered is not None
        assert later.arrived >= earlier.answered, server.summary()
    # Without the limit the three 0.3 s calls would overlap: two of them had to wait.
    assert len(waits) == 2
    assert {w["reason"] for w in waits} == {"maxConcurrent"}
    assert {w["pool"] for w in waits} == {"gpt"}


async def test_a_429_with_retry_after_pauses_every_agent_of_the_pool(tmp_path: Path) -> None:
    limited_once: list[str] = []

    def answer(agent: str, body: dict[str, Any]) -> Reply:
        if agent == "alpha" and not limited_once:
            limited_once.append(agent)
            return rate_limited("2")
        return text_reply(f"{agent} done")

    with ModelServer(answer) as server:
        text = swarm(server.url, THREE, limits="{maxConcurrent: 3}")
        async with running(tmp_path, text) as orchestrator:
            for name in THREE:
                await orchestrator.supervisor.ensure_running(name)
            async with orchestrator.live.subscribe() as events:
                first = asyncio.ensure_future(orchestrator.request("go", agent="alpha"))
                paused = await next_event(events.queue, "model.rate_limited")
                others = await asyncio.gather(
                    orchestrator.request("go", agent="beta"),
                    orchestrator.request("go", agent="gamma"),
                )
                alpha = await first
            usage = usage_of(orchestrator)
    assert paused["pool"] == "gpt"
    assert paused["retryAfterMs"] == 2000
    assert alpha.output == "alpha done"
    assert [a.output for a in others] == ["beta done", "gamma done"]
    limited, *after = server.calls
    assert (limited.agent, limited.status) == ("alpha", 429)
    assert limited.answered is not None
    assert sorted(c.agent for c in after) == ["alpha", "beta", "gamma"]
    for call in after:  # alpha's retry and the other two agents alike
        assert call.arrived >= limited.answered + 2.0, server.summary()
    [pool] = usage["pools"]
    assert pool["pauses"] == 1


async def test_a_trace_budget_stops_a_handoff_chain_midway(tmp_path: Path) -> None:
    def answer(agent: str, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text_reply("relayed")
        target = {"front": "middle", "middle": "back"}.get(agent)
        if target is not None:
            return call_reply("agents__request", {"target": target, "input": "pass it on"})
        return text_reply("back answers")

    tools = '  tools: [{ref: {kind: Tool, name: agents, package: "@goondan/base"}}]\n'
    agents = {"front": tools, "middle": tools, "back": ""}
    # Each call reserves 20 tokens out (maxTokens) and reports 20 out: front's first call and
    # middle's leave 10 of the trace's 50, less than back's call may take.
    budgets = "  budgets:\n    trace: {outputTokens: 50}\n"
    with ModelServer(answer) as server:
        text = swarm(server.url, agents, limits="{maxConcurrent: 8}", budgets=budgets)
        text = text.replace("  limits:", "  maxTokens: 20\n  limits:", 1)
        async with running(tmp_path, text) as orchestrator:
            answer_ = await orchestrator.request("start", agent="front")
            trace = next(iter(orchestrator.broker.usage.traces.values()))
            report = usage_of(orchestrator)
            assert orchestrator.metrics is not None
            metrics = orchestrator.metrics.exposition().decode()
    assert answer_.status == "error"
    assert answer_.error is not None
    assert answer_.error.code == "E_BUDGET_EXCEEDED"
    assert answer_.error.message.startswith(
        "trace budget exceeded: outputTokens 40 of 50 used by this request across the swarm, "
        "and this call may take up to 20 (the trace budget of 'front')"
    )
    assert [c.agent for c in server.calls] == ["front", "middle"]  # back never reached it
    assert trace.root == "front"
    assert trace.usage.total_tokens == 240
    assert "exceeded" not in report["traces"][0]  # refused for want of room, never past it
    assert "reserved" not in report["traces"][0]
    assert report["traces"][0]["remaining"] == {"outputTokens": 10}
    # back, then middle, then front were refused their next call: each refusal is counted.
    for agent in ("back", "middle", "front"):
        assert f'goondan_budget_exceeded_total{{agent="{agent}",budget="trace"}} 1.0' in metrics


async def test_an_agent_killed_while_it_holds_a_permit_does_not_keep_it(tmp_path: Path) -> None:
    with ModelServer(lambda agent, body: text_reply(f"{agent} done")) as server:
        server.hold("alpha")
        text = swarm(server.url, THREE, limits="{maxConcurrent: 1}")
        async with running(tmp_path, text) as orchestrator:
            for name in THREE:
                await orchestrator.supervisor.ensure_running(name)
            held = asyncio.ensure_future(orchestrator.request("go", agent="alpha"))
            await calls_matching(server, lambda calls: any(c.agent == "alpha" for c in calls))
            [pool] = orchestrator.broker.snapshot()
            assert pool["inUse"] == 1
            async with orchestrator.live.subscribe() as events:
                waiting = asyncio.ensure_future(orchestrator.request("go", agent="beta"))
                queued = await next_event(events.queue, "model.permit.waiting")
            assert queued["agentName"] == "beta"
            pid = orchestrator.supervisor.handle("alpha").pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            beta = await waiting  # the dead agent's permit came back at once
            # alpha's Turn resumes after its restart and asks its model once more.
            await calls_matching(server, lambda calls: len(calls) == 3)
            server.release("alpha")
            resumed: DelegateAnswer = await held
            [pool] = orchestrator.broker.snapshot()
    assert resumed.output == "alpha done"
    assert beta.output == "beta done"
    assert [c.agent for c in server.calls] == ["alpha", "beta", "alpha"]
    assert (pool["inUse"], pool["waiting"]) == (0, 0)


async def test_a_permit_wait_past_the_model_timeout_fails_with_its_code(tmp_path: Path) -> None:
    with ModelServer(lambda agent, body: text_reply(f"{agent} done")) as server:
        server.hold("alpha")
        # Two Models on one provider key: alpha's calls may take 30 s, beta's only 1.5 s.
        shared = "{maxConcurrent: 1, pool: openai-key}"
        text = "---\n".join(
            [
                model_doc(server.url, limits=shared),
                model_doc(server.url, limits=shared, name="quick", timeout=1.5),
                agent_doc("alpha"),
                agent_doc("beta", model="quick"),
                swarm_doc(["alpha", "beta"]),
            ]
        )
        async with running(tmp_path, text) as orchestrator:
            await orchestrator.supervisor.ensure_running("beta")
            held = asyncio.ensure_future(orchestrator.request("go", agent="alpha"))
            await calls_matching(server, lambda calls: any(c.agent == "alpha" for c in calls))
            beta = await orchestrator.request("go", agent="beta")
            server.release("alpha")
            alpha = await held
    assert beta.error is not None
    assert beta.error.code == "E_MODEL_PERMIT_TIMEOUT"
    assert "pool 'openai-key' within 1.5 s" in beta.error.message
    assert alpha.output == "alpha done"
    assert [c.agent for c in server.calls] == ["alpha"]


async def test_operators_see_usage_budgets_and_pools(tmp_path: Path) -> None:
    def answer(agent: str, body: dict[str, Any]) -> Reply:
        return text_reply("fine", prompt_tokens=300, completion_tokens=50)

    with ModelServer(answer) as server:
        docs = [
            model_doc(server.url, limits="{maxConcurrent: 2, tokensPerMinute: 100000}").replace(
                "  limits:",
                "  maxTokens: 100\n"
                "  pricing: {inputPerMillionTokens: 2.5, outputPerMillionTokens: 10}\n  limits:",
            ),
            agent_doc("alpha", "  budgets:\n    instance: {totalTokens: 1000}\n"),
            swarm_doc(["alpha"], "  budgets:\n    trace: {cost: 0.01}\n"),
        ]
        async with running(tmp_path, "---\n".join(docs)) as orchestrator:
            first = await orchestrator.request("one", agent="alpha")
            state = str(orchestrator.state_dir)
            # The agent writes the instance's lasting usage to its metadata.json within 0.2 s of
            # the call (a file of another process: nothing to await but the file itself).
            await asyncio.to_thread(metadata_usage, orchestrator.state_dir, "alpha", calls=1)
            usage = await asyncio.to_thread(
                run_cli, "usage", "--state-dir", state, "--json", cwd=tmp_path
            )
            text = await asyncio.to_thread(run_cli, "usage", "--state-dir", state, cwd=tmp_path)
            status = await asyncio.to_thread(run_cli, "status", "--state-dir", state, cwd=tmp_path)
            trace_id = first.turn["traceId"] if first.turn else ""
            one = await asyncio.to_thread(
                run_cli, "usage", "--state-dir", state, "--trace", trace_id, cwd=tmp_path
            )
            assert orchestrator.metrics is not None
            metrics = orchestrator.metrics.exposition().decode()
    assert first.output == "fine"
    assert usage.returncode == 0, usage.stderr
    report = json.loads(usage.stdout)
    assert report["total"] == {
        "inputTokens": 300,
        "outputTokens": 50,
        "totalTokens": 350,
        "cost": 0.00125,
        "calls": 1,
    }
    [instance] = report["instances"]
    assert instance["remaining"] == {"totalTokens": 650}
    [trace] = report["traces"]
    assert trace["remaining"] == {"cost": 0.00875}
    [pool] = report["pools"]
    assert (pool["pool"], pool["inUse"], pool["granted"]) == ("gpt", 0, 1)
    assert "alpha                     1       300        50     0.0013" in text.stdout
    assert "totalTokens 650" in text.stdout
    assert "gpt                        0/2       0" in status.stdout
    assert "cost 0.0013" in one.stdout
    assert "budget left: cost 0.0088" in one.stdout
    assert 'goondan_model_tokens_total{agent="alpha",kind="input"} 300.0' in metrics
    assert 'goondan_model_cost_total{agent="alpha"} 0.00125' in metrics
    assert 'goondan_model_permits_granted_total{pool="gpt"} 1.0' in metrics
    assert 'goondan_model_permits_in_use{pool="gpt"} 0.0' in metrics


async def test_an_openai_client_gets_a_429_it_does_not_retry_for_a_used_up_budget(
    tmp_path: Path,
) -> None:
    import openai

    def answer(agent: str, body: dict[str, Any]) -> Reply:
        return text_reply("fine", prompt_tokens=300, completion_tokens=50)

    with ModelServer(answer) as server:
        docs = [
            # The first call reserves its prompt and 50 out, and uses 350: the second is refused.
            model_doc(server.url, limits="{maxConcurrent: 2}").replace(
                "  limits:", "  maxTokens: 50\n  limits:"
            ),
            agent_doc("alpha", "  budgets:\n    instance: {totalTokens: 300}\n"),
            swarm_doc(["alpha"]),
        ]
        path = tmp_path / "goondan.yaml"
        path.write_text("---\n".join(docs))
        orchestrator = Orchestrator.from_bundle(
            path, state_dir=tmp_path / "state", api_listen="127.0.0.1:0", api_token="sk-swarm"
        )
        await orchestrator.start()
        try:
            assert orchestrator.api is not None
            client = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{orchestrator.api.port}/v1",
                api_key="sk-swarm",
                max_retries=3,
            )
            messages: Any = [{"role": "user", "content": "hi"}]
            async with client:
                first = await client.chat.completions.create(model="alpha", messages=messages)
                with pytest.raises(openai.RateLimitError) as refused:
                    await client.chat.completions.create(model="alpha", messages=messages)
        finally:
            await orchestrator.shutdown()
    assert first.choices[0].message.content == "fine"
    error = refused.value
    assert error.status_code == 429
    assert error.code == "E_BUDGET_EXCEEDED"
    assert error.type == "insufficient_quota"
    assert "instance budget exceeded: totalTokens 350 of 300" in error.message
    assert len(server.calls) == 1  # the model was called once; the SDK did not retry


EXAMPLE = Path(__file__).resolve().parents[3] / "goondan.yaml.example"


async def test_calls_without_limits_are_counted_too(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(EXAMPLE, state_dir=tmp_path / "state")
    await orchestrator.start()
    try:
        answer = await orchestrator.request("write notes.txt hello world")
        report = usage_of(orchestrator)
        plan = orchestrator.supervisor.handle("worker").plan
        assert isinstance(plan, AgentPlan)
    finally:
        await orchestrator.shutdown()
    assert answer.ok, answer
    assert not plan.ask_permits  # no limits, no trace budget: no permit, no report
    calls = {row["agent"]: row["usage"]["calls"] for row in report["agents"]}
    assert calls == {"coordinator": 2, "worker": 2}
    assert report["traces"][0]["usage"]["calls"] == 4
    assert report["pools"] == []
