"""A RemoteAgent that misbehaves gets a bounded wait and a clear error, and its token goes
nowhere but the card's own origin: the calls of :mod:`orchestrator.remote_agents` against a
real A2A server on loopback that also serves hostile cards (:mod:`tests.support.a2a_partner`)."""

from __future__ import annotations

import asyncio

import pytest

from bundle.secrets import Secret
from ipc import IpcError
from orchestrator.remote_agents import MAX_BODY_BYTES, MAX_CARD_BYTES, RemoteAgents, RemoteTarget
from tests.support.a2a_partner import partner

TOKEN = "hostile-test-token-51c2"


def remote(card_url: str, timeout: float | None = None) -> RemoteAgents:
    token = Secret(TOKEN, "env:PARTNER_A2A_TOKEN")
    return RemoteAgents({"partner": RemoteTarget("partner", card_url, timeout, token)})


async def refusal(agents: RemoteAgents, text: str = "hello") -> IpcError:
    async with asyncio.timeout(30):
        with pytest.raises(IpcError) as caught:
            await agents.ask("partner", text, context_id="c", timeout_seconds=3)
    assert TOKEN not in str(caught.value)
    return caught.value


async def test_a_card_that_redirects_is_refused_without_following_it() -> None:
    async with partner() as server:
        error = await refusal(remote(server.hostile("redirect")))
    assert error.code == "REMOTE_AGENT_FAILED"
    assert "redirects to" in error.message
    assert "set cardUrl to the card's own address" in (error.message)
    assert server.elsewhere_executor is not None
    assert server.elsewhere_executor.seen == []


async def test_a_card_that_is_not_json_is_refused() -> None:
    async with partner() as server:
        error = await refusal(remote(server.hostile("html")))
    assert (error.code, error.message) == (
        "REMOTE_AGENT_FAILED",
        f"the agent card at {server.hostile('html')} is not JSON",
    )


async def test_a_huge_card_is_refused_once_past_the_limit() -> None:
    async with partner() as server:
        error = await refusal(remote(server.hostile("huge")))
    assert error.message.endswith(f"is larger than {MAX_CARD_BYTES} bytes")


async def test_a_card_that_never_ends_is_bounded_by_the_timeout() -> None:
    async with partner() as server:
        error = await refusal(remote(server.hostile("slow"), timeout=1))
    assert (error.code, error.message) == (
        "AGENT_REQUEST_TIMEOUT",
        "the remote A2A agent did not answer within 1 s",
    )


async def test_a_card_naming_another_origin_gets_no_token_there() -> None:
    async with partner() as server:
        agents = remote(server.hostile("elsewhere"))
        async with asyncio.timeout(30):
            answer = await agents.ask("partner", "hi", context_id="c", timeout_seconds=10)
    assert answer == "partner heard: hi (message 1 of c)"
    assert server.elsewhere_executor is not None
    assert [s.authorization for s in server.elsewhere_executor.seen] == [None]


async def test_an_unreachable_remote_is_a_clear_error() -> None:
    async with partner() as server:
        closed = server.elsewhere  # a port nothing listens on once the partner stops
    error = await refusal(remote(f"{closed}/.well-known/agent-card.json"))
    assert error.code == "REMOTE_AGENT_FAILED"
    assert error.message.startswith(f"the agent card at {closed}/")
    assert "could not be fetched" in error.message


async def test_a_remote_that_does_not_stream_is_waited_for() -> None:
    async with partner() as server:
        agents = remote(server.hostile("blocking"))
        async with asyncio.timeout(30):
            first = await agents.ask("partner", "one", context_id="c", timeout_seconds=10)
            second = await agents.ask("partner", "two", context_id="c", timeout_seconds=10)
        error = await refusal(agents, "fail hard")
    assert (first, second) == (
        "partner heard: one (message 1 of c)",
        "partner heard: two (message 2 of c)",
    )
    assert error.message == "the remote A2A agent failed the task: partner says no to: fail hard"


async def test_a_huge_answer_body_is_refused_once_past_the_limit() -> None:
    async with partner() as server:
        error = await refusal(remote(server.hostile("huge-rpc")))
    assert error.code == "REMOTE_AGENT_FAILED"
    assert f"the response is larger than {MAX_BODY_BYTES} bytes" in error.message
