"""A swarm delegating to another team's agent: a RemoteAgent served by a real A2A server
(the ``a2a-sdk``'s own server classes, :mod:`tests.support.a2a_partner`), called by a local
scripted agent through ``agents__request`` and ``agents__send`` in a running Orchestrator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bundle.plan import AgentPlan
from bundle.secrets import SecretUnavailable
from orchestrator.daemon import Orchestrator
from orchestrator.environment import child_environment
from orchestrator.watch import reload_configuration
from tests.support.a2a_partner import Partner, partner

TOKEN = "partner-token-9f3c1d7e"
SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^ask (?P<target>\\\\S+) as (?P<key>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}", instanceKey: "{key}"}}
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^tell (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__send, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^catalog$"}
        call: {tool: agents__catalog}
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}"
      - when: {toolResult: agents__request}
        reply: "ERROR {errorCode}: {error}"
      - when: {toolResult: agents__catalog}
        reply: "{result.callableAgents}"
      - when: {toolResult: agents__send}
        reply: "sent"
      - reply: "local got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: alpha}
spec:
  modelConfig: {modelRef: Model/brain}
  env: ["PARTNER_*"]  # names the token's variable too: it is withheld all the same
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: RemoteAgent
metadata: {name: partner}
spec:
  cardUrl: CARD_URL
  description: Another team's agent.
  auth: {bearer: {valueFrom: {env: PARTNER_A2A_TOKEN}}}
---
apiVersion: goondan.ai/v1
kind: RemoteAgent
metadata: {name: slowpoke}
spec:
  cardUrl: CARD_URL
  timeoutSeconds: 2
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha, RemoteAgent/partner, RemoteAgent/slowpoke]
"""


@asynccontextmanager
async def swarm_with_partner(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Orchestrator, Partner]]:
    """The partner serving, and a swarm that lists it, running in this event loop."""
    monkeypatch.setenv("PARTNER_A2A_TOKEN", TOKEN)
    monkeypatch.setenv("PARTNER_NOTE", "visible")
    async with partner() as remote:
        path = directory / "goondan.yaml"
        path.write_text(SWARM.replace("CARD_URL", remote.card_url))
        orchestrator = Orchestrator.from_bundle(path, state_dir=directory / "state")
        async with asyncio.timeout(30):
            await orchestrator.start()
        try:
            yield orchestrator, remote
        finally:
            async with asyncio.timeout(60):
                await orchestrator.shutdown()


async def ask(orchestrator: Orchestrator, text: str, instance_key: str = "default") -> str:
    async with asyncio.timeout(30):
        answer = await orchestrator.request(text, instance_key=instance_key)
    assert answer.ok, answer.error
    return str(answer.output)


async def test_an_agent_asks_the_remote_agent_and_the_conversation_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, remote):
        assert await ask(swarm, "catalog") == '["partner", "slowpoke"]'
        first = await ask(swarm, "ask partner hello there", instance_key="room-1")
        second = await ask(swarm, "ask partner and again", instance_key="room-1")
        other = await ask(swarm, "ask partner hi", instance_key="room-2")
    assert first == "partner heard: hello there (message 1 of room-1)"
    assert second == "partner heard: and again (message 2 of room-1)"
    assert other == "partner heard: hi (message 1 of room-2)"
    assert [s.context_id for s in remote.executor.seen] == ["room-1", "room-1", "room-2"]
    assert {s.authorization for s in remote.executor.seen} == {f"Bearer {TOKEN}"}
    leaked = [
        p
        for p in (tmp_path / "state").rglob("*")
        if p.is_file() and TOKEN.encode() in p.read_bytes()
    ]
    assert leaked == []


async def test_an_instance_key_names_the_remote_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, _remote):
        answer = await ask(swarm, "ask partner as shared-thread hello")
    assert answer == "partner heard: hello (message 1 of shared-thread)"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("fail now", "the remote A2A agent failed the task: partner says no to: fail now"),
        ("reject this", "the remote A2A agent rejected the task"),
        ("auth please", "the remote A2A agent needs other credentials for this task"),
        ("more detail", "the remote A2A agent asks for more input before it can answer"),
    ],
)
async def test_a_remote_task_that_does_not_complete_is_a_clear_error_to_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, _):
        answer = await ask(swarm, f"ask partner {text}")
    assert answer.startswith("ERROR REMOTE_AGENT_FAILED: Agent request to 'partner' failed: ")
    assert said in answer
    assert TOKEN not in answer


async def test_a_remote_agent_too_slow_is_timed_out_and_its_task_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, remote):
        answer = await ask(swarm, "ask slowpoke hang on")
        async with asyncio.timeout(20):
            await remote.executor.cancelled.wait()
    assert answer == (
        "ERROR AGENT_REQUEST_TIMEOUT: Agent request to 'slowpoke' failed: "
        "the remote A2A agent did not answer within 2 s"
    )
    assert remote.executor.seen[0].authorization is None  # slowpoke has no auth


async def test_cancelling_the_trace_cancels_the_remote_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, remote):
        asking = asyncio.create_task(
            swarm.request("ask partner hang on", trace_id="trace-remote-1")
        )
        async with asyncio.timeout(20):
            await remote.executor.hanging.wait()
            assert swarm.router.cancel("trace-remote-1") == ["trace-remote-1"]
            answer = await asking
            await remote.executor.cancelled.wait()
    assert answer.error is not None
    assert answer.error.code == "CANCELLED"


async def test_an_agent_sends_to_the_remote_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, remote):
        assert await ask(swarm, "tell partner fire and forget", instance_key="room-9") == "sent"
        async with asyncio.timeout(20):
            arrived = await remote.executor.arrivals.get()
    assert (arrived.text, arrived.context_id) == ("fire and forget", "room-9")
    assert arrived.authorization == f"Bearer {TOKEN}"


async def test_a_reload_adopts_the_swarms_remote_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, _remote):
        path = tmp_path / "goondan.yaml"
        edited = path.read_text().replace(
            "agents: [Agent/alpha, RemoteAgent/partner, RemoteAgent/slowpoke]",
            "agents: [Agent/alpha, RemoteAgent/partner]",
        )
        path.write_text(edited)
        async with asyncio.timeout(60):
            outcome = await reload_configuration(swarm)
        assert outcome["valid"], outcome
        assert sorted(swarm.router.remote.targets) == ["partner"]
        assert await ask(swarm, "catalog") == '["partner"]'
        gone = await ask(swarm, "ask slowpoke hello")
    assert gone.startswith("ERROR AGENT_NOT_FOUND: ")


def test_a_token_that_is_not_set_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PARTNER_A2A_TOKEN", raising=False)
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM.replace("CARD_URL", "http://127.0.0.1:9/card.json"))
    with pytest.raises(SecretUnavailable, match="environment variable PARTNER_A2A_TOKEN"):
        Orchestrator.from_bundle(path, state_dir=tmp_path / "state")


async def test_a_swarm_stopping_answers_the_caller_and_cancels_the_remote_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTNER_A2A_TOKEN", TOKEN)
    async with partner() as remote:
        path = tmp_path / "goondan.yaml"
        # A Turn gets its grace period to finish before its agent is stopped: a short one.
        grace = "  policy: {shutdown: {gracePeriodSeconds: 1}}\n"
        path.write_text(SWARM.replace("CARD_URL", remote.card_url) + grace)
        swarm = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
        async with asyncio.timeout(45):
            await swarm.start()
            asking = asyncio.create_task(swarm.request("ask partner hang on"))
            await remote.executor.hanging.wait()
            await swarm.shutdown()
            answer = await asking
            await remote.executor.cancelled.wait()
    assert answer.error is not None
    assert answer.error.code == "SHUTTING_DOWN"


async def test_the_token_reaches_no_agent_process_even_one_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with swarm_with_partner(tmp_path, monkeypatch) as (swarm, _remote):
        handle = swarm.supervisor.handle("alpha")
        assert handle is not None
        assert isinstance(handle.plan, AgentPlan)
        environment = child_environment(handle.plan)
    assert environment["PARTNER_NOTE"] == "visible"
    assert "PARTNER_A2A_TOKEN" not in environment
    assert TOKEN not in environment.values()
