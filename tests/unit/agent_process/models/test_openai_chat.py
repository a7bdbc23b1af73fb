"""The openai provider against a local server speaking the Chat Completions wire format."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_process.models.base import ModelCallError, ModelRequest
from agent_process.models.openai_chat import OpenAIChatModel, to_openai_messages
from agent_process.tools.catalog import ToolCatalogItem
from bundle.plan import ModelPlan
from bundle.spec_agent import ModelSpec
from tests.support.wire_server import Reply, WireServer, openai_completion, openai_stream, serve
from tools_base import Message, MessageSource, ToolCall


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


def model(server: WireServer, **spec: Any) -> OpenAIChatModel:
    plan = ModelPlan.of(
        "gpt",
        ModelSpec.model_validate(
            {
                "provider": "openai",
                "model": "gpt-test",
                "baseUrl": server.url + "/v1",
                "apiKey": {"valueFrom": {"env": "TEST_OPENAI_KEY"}},
                "maxRetries": 2,
                **spec,
            }
        ),
    )
    return OpenAIChatModel(plan, "agent", environ={"TEST_OPENAI_KEY": "sk-test-secret"})


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
    server.replies = [Reply(body=openai_completion({"content": "done"}))]
    response = await model(server).complete(
        ModelRequest(messages=CONVERSATION, tools=[BASH], temperature=0.2, max_tokens=50)
    )
    assert response.text == "done"
    assert response.tool_calls == ()
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 7)
    assert response.metadata["latencyMs"] > 0
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test-secret"
    body = request.body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "list files"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash__exec",
                "description": "Run a command",
                "parameters": BASH.parameters,
            },
        }
    ]
    assert (body["temperature"], body["max_tokens"]) == (0.2, 50)


async def test_one_and_parallel_tool_calls(server: WireServer) -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "bash__exec", "arguments": '{"command": "ls"}'},
        },
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "bash__exec", "arguments": '{"command": "pwd"}'},
        },
    ]
    server.replies = [
        Reply(body=openai_completion({"content": None, "tool_calls": calls}, "tool_calls"))
    ]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    assert response.tool_calls == (
        ToolCall(id="c1", name="bash__exec", args={"command": "ls"}),
        ToolCall(id="c2", name="bash__exec", args={"command": "pwd"}),
    )
    assert response.finish_reason == "tool_calls"


async def test_unparsable_arguments_are_passed_on_for_the_executor_to_refuse(
    server: WireServer,
) -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "bash__exec", "arguments": "{not json"},
        }
    ]
    server.replies = [
        Reply(body=openai_completion({"content": None, "tool_calls": calls}, "tool_calls"))
    ]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    assert response.tool_calls[0].args == {}
    assert response.tool_calls[0].malformed_arguments == "{not json"


def test_tool_results_go_back_as_tool_messages() -> None:
    assistant = Message(
        id="a",
        role="assistant",
        tool_calls=(ToolCall(id="c1", name="bash__exec", args={"command": "ls"}),),
        source=MessageSource(type="assistant"),
    )
    result = Message(
        id="t",
        role="tool",
        tool_result={
            "toolCallId": "c1",
            "toolName": "bash__exec",
            "status": "error",
            "error": {"message": "boom", "code": "E_TOOL"},
        },
        source=MessageSource(type="tool", tool_call_id="c1", tool_name="bash__exec"),
    )
    wire = to_openai_messages([*CONVERSATION, assistant, result])
    assert wire[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash__exec", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    assert wire[3]["role"] == "tool"
    assert wire[3]["tool_call_id"] == "c1"
    assert json.loads(str(wire[3]["content"]))["error"]["code"] == "E_TOOL"


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_body_is_what_the_sdk_sends_for_the_same_messages_and_tools(
    server: WireServer, streamed: bool
) -> None:
    """The conversation and tools bypass the SDK's parameter walk: the bytes must not change."""
    assistant = Message(
        id="a",
        role="assistant",
        tool_calls=(ToolCall(id="c1", name="bash__exec", args={"command": "ls é"}),),
        source=MessageSource(type="assistant"),
    )
    result = Message(
        id="t",
        role="tool",
        tool_result={"toolCallId": "c1", "toolName": "bash__exec", "status": "ok"},
        source=MessageSource(type="tool", tool_call_id="c1", tool_name="bash__exec"),
    )
    conversation = [*CONVERSATION, assistant, result]
    done = {"content": "done"}
    reply = Reply(events=openai_stream(done)) if streamed else Reply(body=openai_completion(done))
    server.replies = [reply, reply]  # ours, then the SDK's own
    provider = model(server)
    on_text = (lambda text: None) if streamed else None
    await provider.complete(
        ModelRequest(messages=conversation, tools=[BASH], temperature=0.5, on_text=on_text)
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": BASH.name,
                "description": BASH.description,
                "parameters": BASH.parameters,
            },
        }
    ]
    extra: dict[str, Any] = (
        {"stream": True, "stream_options": {"include_usage": True}} if streamed else {}
    )
    sent = await provider.client.chat.completions.create(
        model="gpt-test",
        messages=to_openai_messages(conversation),
        tools=tools,
        temperature=0.5,
        **extra,
    )
    if streamed:
        async for _ in sent:
            pass
    ours, sdks = server.requests
    assert ours.body == sdks.body
    assert ours.body["messages"][2]["content"] is None
    assert ours.body["tools"] == tools


async def test_429_then_success_is_retried_by_the_sdk(server: WireServer) -> None:
    server.replies = [
        Reply(
            status=429, body={"error": {"message": "slow down"}}, headers={"retry-after-ms": "10"}
        ),
        Reply(body=openai_completion({"content": "after retry"})),
    ]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert response.text == "after retry"
    assert len(server.requests) == 2


async def test_500_until_failure_is_a_model_error(server: WireServer) -> None:
    server.replies = [
        Reply(status=500, body={"error": {"message": "down"}}, headers={"retry-after-ms": "10"})
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server, maxRetries=1).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_API"
    assert len(server.requests) == 2  # one try plus one retry, then it gives up


async def test_malformed_json_body_is_a_model_error(server: WireServer) -> None:
    server.replies = [Reply(raw=b"{this is not json")]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code.startswith("E_MODEL")


async def test_a_wrong_key_names_its_source_never_the_key(server: WireServer) -> None:
    server.replies = [
        Reply(status=401, body={"error": {"message": "invalid api key sk-test-secret"}})
    ]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_AUTH"
    assert "env:TEST_OPENAI_KEY" in str(raised.value)
    assert "sk-test-secret" not in str(raised.value)


async def test_a_missing_key_fails_at_the_first_call_naming_the_variable(tmp_path: Path) -> None:
    plan = ModelPlan.of("gpt", ModelSpec(provider="openai", model="gpt-test"))
    provider = OpenAIChatModel(plan, "agent", environ={})
    with pytest.raises(ModelCallError, match="OPENAI_API_KEY") as raised:
        await provider.complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_AUTH"


STREAMED_MESSAGES = {
    "text": ({"content": "the files are a.txt and b.txt"}, "stop"),
    "tool calls": (
        {
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash__exec", "arguments": '{"command": "ls -la"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "bash__exec", "arguments": '{"command": "pwd"}'},
                },
            ],
        },
        "tool_calls",
    ),
    "malformed arguments": (
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash__exec", "arguments": "{not json"},
                }
            ],
        },
        "tool_calls",
    ),
}


@pytest.mark.parametrize("case", list(STREAMED_MESSAGES))
async def test_a_streamed_answer_is_assembled_as_the_whole_one(
    server: WireServer, case: str
) -> None:
    message, finish = STREAMED_MESSAGES[case]
    server.replies = [
        Reply(body=openai_completion(message, finish)),
        Reply(events=openai_stream(message, finish)),
    ]
    provider = model(server)
    whole = await provider.complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    pieces: list[str] = []
    streamed = await provider.complete(
        ModelRequest(messages=CONVERSATION, tools=[BASH], on_text=pieces.append)
    )
    assert streamed.metadata["latencyMs"] > 0
    same = {"latencyMs": 0}
    assert dataclasses.replace(streamed, metadata={**streamed.metadata, **same}) == (
        dataclasses.replace(whole, metadata={**whole.metadata, **same})
    )
    assert "".join(pieces) == whole.text
    if whole.text:
        assert len(pieces) > 1  # handed on piece by piece, as they came
    plain, streaming = server.requests
    assert "stream" not in plain.body
    assert streaming.body["stream"] is True
    assert streaming.body["stream_options"] == {"include_usage": True}
    assert {k: v for k, v in streaming.body.items() if not k.startswith("stream")} == plain.body


async def test_a_stream_cut_short_is_a_model_error(server: WireServer) -> None:
    events = openai_stream({"content": "half"})
    server.replies = [Reply(events=[events[0], (None, "{broken json")])]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(
            ModelRequest(messages=CONVERSATION, tools=[], on_text=lambda text: None)
        )
    assert raised.value.code.startswith("E_MODEL")
