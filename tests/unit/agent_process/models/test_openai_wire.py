"""The openai provider's lean route: what it keeps of the SDK (headers, retries, errors), and
where it hands the call back to the SDK (an environment proxy)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agent_process.models._sdk import retry_delay, should_retry
from agent_process.models.base import ModelCallError, ModelRequest
from agent_process.models.openai_chat import OpenAIChatModel
from bundle.plan import ModelPlan
from bundle.spec_agent import ModelSpec
from tests.support.wire_server import Reply, WireServer, openai_completion, openai_stream, serve
from tools_base import Message

CONVERSATION = [Message(id="u", role="user", content="hi")]
VARYING = {"accept-encoding", "connection", "content-length", "host"}
"""Headers the transport, not the API, decides (the lean route asks for no compression)."""


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


def model(base_url: str, **spec: Any) -> OpenAIChatModel:
    plan = ModelPlan.of(
        "gpt",
        ModelSpec.model_validate(
            {"provider": "openai", "model": "gpt-test", "baseUrl": base_url, **spec}
        ),
    )
    return OpenAIChatModel(plan, "agent", environ={"OPENAI_API_KEY": "sk-test"})


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_headers_are_the_sdks(server: WireServer, streamed: bool) -> None:
    done = {"content": "done"}
    reply = Reply(events=openai_stream(done)) if streamed else Reply(body=openai_completion(done))
    server.replies = [reply, reply]
    provider = model(server.url + "/v1")
    assert provider._lean is not None
    on_text = (lambda text: None) if streamed else None
    await provider.complete(ModelRequest(messages=CONVERSATION, tools=[], on_text=on_text))
    extra: dict[str, Any] = {"stream": True} if streamed else {}
    sent = await provider.client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], **extra
    )
    if streamed:
        async for _ in sent:
            pass
    ours, sdks = ({k.lower(): v for k, v in r.headers.items()} for r in server.requests)
    assert {k: v for k, v in ours.items() if k not in VARYING} == {
        k: v for k, v in sdks.items() if k not in VARYING
    }
    assert ours["authorization"] == "Bearer sk-test"


async def test_retries_count_in_a_header_and_the_server_may_forbid_them(
    server: WireServer,
) -> None:
    server.replies = [
        Reply(status=503, body={"error": {"message": "busy"}}, headers={"retry-after-ms": "1"}),
        Reply(
            status=500, body={"error": {"message": "broken"}}, headers={"x-should-retry": "false"}
        ),
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server.url + "/v1", maxRetries=5).complete(
            ModelRequest(messages=CONVERSATION, tools=[])
        )
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]
    assert raised.value.code == "E_MODEL_API"
    assert str(raised.value) == "Model/gpt: API error HTTP 500: Error code: 500 - broken"


async def test_a_429_after_retries_says_how_long_to_wait(server: WireServer) -> None:
    server.replies = [
        Reply(status=429, body={"error": {"message": "slow"}}, headers={"retry-after": "7"})
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server.url + "/v1", maxRetries=0).complete(
            ModelRequest(messages=CONVERSATION, tools=[])
        )
    assert raised.value.code == "E_MODEL_RATE_LIMITED"
    assert raised.value.retry_after == 7.0


async def test_an_error_in_the_stream_is_a_model_error(server: WireServer) -> None:
    first = openai_stream({"content": "half"})[0]
    server.replies = [Reply(events=[first, (None, {"error": {"message": "overloaded"}})])]
    pieces: list[str] = []
    with pytest.raises(ModelCallError) as raised:
        await model(server.url + "/v1").complete(
            ModelRequest(messages=CONVERSATION, tools=[], on_text=pieces.append)
        )
    assert str(raised.value) == "Model/gpt: invalid API response: overloaded"
    assert len(server.requests) == 1  # a stream begun is never retried


async def test_nothing_listening_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(ModelCallError) as raised:
        await model(f"http://127.0.0.1:{port}/v1", maxRetries=0).complete(
            ModelRequest(messages=CONVERSATION, tools=[])
        )
    assert raised.value.code == "E_MODEL_CONNECTION"
    assert str(raised.value) == "Model/gpt: cannot reach the API: Connection error."


async def test_behind_an_environment_proxy_the_sdk_makes_the_call(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.replies = [Reply(body=openai_completion({"content": "via proxy"}))]
    provider = model("http://api.example.invalid/v1")
    assert provider._lean is None
    response = await provider.complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert response.text == "via proxy"
    assert server.requests[0].path == "http://api.example.invalid/v1/chat/completions"


def test_the_sdks_backoff() -> None:
    assert [should_retry(status, {}) for status in (408, 409, 429, 502)] == [True] * 4
    assert [should_retry(status, {}) for status in (400, 401, 404)] == [False] * 3
    assert should_retry(400, {"x-should-retry": "true"})
    assert not should_retry(503, {"retry-after": "121"})  # longer than the SDKs wait
    assert retry_delay(0, {"retry-after-ms": "250"}) == 0.25
    for taken, most in ((0, 0.5), (1, 1.0), (5, 8.0), (50, 8.0)):
        assert most * 0.75 <= retry_delay(taken, {}) <= most
