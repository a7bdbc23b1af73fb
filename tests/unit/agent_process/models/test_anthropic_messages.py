"""The anthropic provider against a local server speaking the Messages API wire format."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent_process.models.anthropic_messages import AnthropicMessagesModel, to_anthropic_messages
from agent_process.models.base import ModelCallError, ModelRequest
from agent_process.tools.catalog import ToolCatalogItem
from bundle.plan import ModelPlan
from bundle.spec_agent import ModelSpec
from tests.support.wire_server import Reply, WireServer, anthropic_stream, serve
from tools_base import Message, MessageSource, ToolCall


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


def model(server: WireServer, **spec: Any) -> AnthropicMessagesModel:
    plan = ModelPlan.of(
        "claude",
        ModelSpec.model_validate(
            {
                "provider": "anthropic",
                "model": "claude-test",
                "baseUrl": server.url,
                "apiKey": {"valueFrom": {"env": "TEST_ANTHROPIC_KEY"}},
                "maxRetries": 2,
                **spec,
            }
        ),
    )
    return AnthropicMessagesModel(plan, "agent", environ={"TEST_ANTHROPIC_KEY": "sk-ant-secret"})


def reply(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 4},
    }


BASH = ToolCatalogItem(
    name="bash__exec",
    description="Run a command",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
)
CONVERSATION = [
    Message(id="s", role="system", content="You are terse.", source=MessageSource(type="system")),
    Message(id="u", role="user", content="list files"),
]


async def test_text_answer_and_the_request_on_the_wire(server: WireServer) -> None:
    server.replies = [Reply(body=reply([{"type": "text", "text": "done"}]))]
    response = await model(server).complete(
        ModelRequest(messages=CONVERSATION, tools=[BASH], temperature=0.1)
    )
    assert response.text == "done"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 4)
    [request] = server.requests
    assert request.path == "/v1/messages"
    # SDK versions differ: x-api-key, or a bearer token
    assert "sk-ant-secret" in (
        request.headers.get("x-api-key", ""),
        request.headers.get("authorization", "").removeprefix("Bearer "),
    )
    body = request.body
    assert body["model"] == "claude-test"
    assert body["system"] == "You are terse."
    assert body["max_tokens"] == 1000
    assert body["temperature"] == 0.1
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list files"}]}
    ]
    assert body["tools"] == [
        {"name": "bash__exec", "description": "Run a command", "input_schema": BASH.parameters}
    ]


async def test_parallel_tool_use_blocks(server: WireServer) -> None:
    server.replies = [
        Reply(
            body=reply(
                [
                    {"type": "text", "text": "checking"},
                    {
                        "type": "tool_use",
                        "id": "tu1",
                        "name": "bash__exec",
                        "input": {"command": "ls"},
                    },
                    {
                        "type": "tool_use",
                        "id": "tu2",
                        "name": "bash__exec",
                        "input": {"command": "pwd"},
                    },
                ],
                "tool_use",
            )
        )
    ]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    assert response.text == "checking"
    assert response.tool_calls == (
        ToolCall(id="tu1", name="bash__exec", args={"command": "ls"}),
        ToolCall(id="tu2", name="bash__exec", args={"command": "pwd"}),
    )


def test_tool_results_share_one_user_message() -> None:
    calls = (
        ToolCall(id="tu1", name="bash__exec", args={"command": "ls"}),
        ToolCall(id="tu2", name="bash__exec", args={"command": "pwd"}),
    )
    assistant = Message(
        id="a",
        role="assistant",
        content="checking",
        tool_calls=calls,
        source=MessageSource(type="assistant"),
    )
    results = [
        Message(
            id=f"t{i}",
            role="tool",
            tool_result={"toolCallId": c.id, "status": "ok" if i == 0 else "error", "output": "x"},
            source=MessageSource(type="tool", tool_call_id=c.id, tool_name=c.name),
        )
        for i, c in enumerate(calls)
    ]
    system, wire = to_anthropic_messages([*CONVERSATION, assistant, *results])
    assert system == "You are terse."
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[1]["content"][1] == {
        "type": "tool_use",
        "id": "tu1",
        "name": "bash__exec",
        "input": {"command": "ls"},
    }  # type: ignore[index]
    blocks = wire[2]["content"]
    assert isinstance(blocks, list)
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [  # type: ignore[index]
        ("tool_result", "tu1", False),
        ("tool_result", "tu2", True),
    ]
    assert json.loads(blocks[0]["content"])["output"] == "x"  # type: ignore[index]


async def test_429_then_success(server: WireServer) -> None:
    server.replies = [
        Reply(
            status=429,
            body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
            headers={"retry-after-ms": "10"},
        ),
        Reply(body=reply([{"type": "text", "text": "ok"}])),
    ]
    assert (
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    ).text == "ok"
    assert len(server.requests) == 2


async def test_500_until_failure(server: WireServer) -> None:
    server.replies = [
        Reply(
            status=500,
            body={"type": "error", "error": {"type": "api_error", "message": "down"}},
            headers={"retry-after-ms": "10"},
        )
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server, maxRetries=1).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_API"
    assert len(server.requests) == 2


async def test_malformed_json_body(server: WireServer) -> None:
    server.replies = [Reply(raw=b"{oops")]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code.startswith("E_MODEL")


async def test_a_wrong_key_names_its_source_never_the_key(server: WireServer) -> None:
    server.replies = [
        Reply(
            status=401,
            body={
                "type": "error",
                "error": {"type": "authentication_error", "message": "bad key sk-ant-secret"},
            },
        )
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_AUTH"
    assert "env:TEST_ANTHROPIC_KEY" in str(raised.value)
    assert "sk-ant-secret" not in str(raised.value)


async def test_a_missing_key_names_the_variable() -> None:
    provider = AnthropicMessagesModel(
        ModelPlan.of("c", ModelSpec(provider="anthropic", model="m")), "a", environ={}
    )
    with pytest.raises(ModelCallError, match="ANTHROPIC_API_KEY"):
        await provider.complete(ModelRequest(messages=CONVERSATION, tools=[]))


@pytest.mark.parametrize(("provider", "sdk"), [("openai", "openai"), ("anthropic", "anthropic")])
def test_a_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, provider: str, sdk: str
) -> None:
    import sys

    from agent_process.boot import BootError, build_model

    monkeypatch.setitem(sys.modules, sdk, None)  # makes `import <sdk>` fail
    with pytest.raises(BootError, match=rf"pip install 'goondan-py\[{sdk}\]'"):
        build_model(ModelPlan.of("m", ModelSpec(provider=provider, model="x")), "agent")


STREAMED_CONTENT = {
    "text": ([{"type": "text", "text": "the files are a.txt and b.txt"}], "end_turn"),
    "tool use": (
        [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "tu1", "name": "bash__exec", "input": {"command": "ls"}},
            {
                "type": "tool_use",
                "id": "tu2",
                "name": "bash__exec",
                "input": {"command": "pwd", "cwd": {"deep": [1, 2]}},
            },
        ],
        "tool_use",
    ),
}


@pytest.mark.parametrize("case", list(STREAMED_CONTENT))
async def test_a_streamed_answer_is_assembled_as_the_whole_one(
    server: WireServer, case: str
) -> None:
    content, stop = STREAMED_CONTENT[case]
    server.replies = [
        Reply(body=reply(content, stop)),
        Reply(events=anthropic_stream(content, stop)),
    ]
    provider = model(server)
    whole = await provider.complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    pieces: list[str] = []
    streamed = await provider.complete(
        ModelRequest(messages=CONVERSATION, tools=[BASH], on_text=pieces.append)
    )
    same = {"latencyMs": 0}
    assert dataclasses.replace(streamed, metadata={**streamed.metadata, **same}) == (
        dataclasses.replace(whole, metadata={**whole.metadata, **same})
    )
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (12, 4)
    assert "".join(pieces) == whole.text
    assert len(pieces) > 1  # handed on piece by piece, as they came
    plain, streaming = server.requests
    assert streaming.body["stream"] is True
    assert {k: v for k, v in streaming.body.items() if k != "stream"} == plain.body
