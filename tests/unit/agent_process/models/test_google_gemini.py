"""The google provider against a local server speaking Gemini's ``generateContent`` wire format."""

from __future__ import annotations

import base64
import dataclasses
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_process.models.base import RATE_LIMITED, ModelCallError, ModelRequest
from agent_process.models.google_gemini import GeminiModel, to_gemini_contents
from agent_process.tools.catalog import ToolCatalogItem
from bundle import load_bundle
from bundle.keys import key_needs
from bundle.plan import ModelPlan
from bundle.spec_agent import ModelSpec
from tests.support.wire_server import Reply, WireServer, gemini_response, gemini_stream, serve
from tools_base import Message, MessageSource, ToolCall

KEY = "AIza-test-secret"


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serve()


def model(server: WireServer, **spec: Any) -> GeminiModel:
    plan = ModelPlan.of(
        "gemini",
        ModelSpec.model_validate(
            {
                "provider": "google",
                "model": "gemini-test",
                "baseUrl": server.url,
                "apiKey": {"valueFrom": {"env": "TEST_GEMINI_KEY"}},
                "maxRetries": 0,
                **spec,
            }
        ),
    )
    return GeminiModel(plan, "agent", environ={"TEST_GEMINI_KEY": KEY})


BASH = ToolCatalogItem(
    name="bash__exec",
    description="Run a command",
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the command"},
            "cwd": {"type": ["string", "null"], "format": "uri"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
NO_ARGS = ToolCatalogItem(
    name="clock__now", description="", parameters={"type": "object", "properties": {}}
)
CONVERSATION = [
    Message(id="s", role="system", content="You are terse.", source=MessageSource(type="system")),
    Message(id="u", role="user", content="list files"),
]
CALL_LS = {"functionCall": {"name": "bash__exec", "args": {"command": "ls"}}}
CALL_PWD = {"functionCall": {"name": "bash__exec", "args": {"command": "pwd"}}}


def error(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    """An error body as Google APIs send it."""
    body = {"code": code, "message": message, "status": status}
    return {"error": {**body, "details": list(details)} if details else body}


async def test_text_answer_and_the_request_on_the_wire(server: WireServer) -> None:
    server.replies = [Reply(body=gemini_response([{"text": "done"}]))]
    response = await model(server).complete(
        ModelRequest(messages=CONVERSATION, tools=[BASH, NO_ARGS], temperature=0.2, max_tokens=50)
    )
    assert response.text == "done"
    assert response.tool_calls == ()
    assert response.finish_reason == "STOP"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 4)
    assert response.metadata["model"] == "gemini-test-001"
    assert response.metadata["latencyMs"] > 0
    [request] = server.requests
    assert request.path.endswith("/models/gemini-test:generateContent")
    assert request.headers["x-goog-api-key"] == KEY
    body = request.body
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "list files"}]}]
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 50}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "bash__exec",
                    "description": "Run a command",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {
                            "command": {"type": "STRING", "description": "the command"},
                            "cwd": {
                                "type": "STRING",
                                "nullable": True,
                                "description": "Format: uri",
                            },
                            "env": {"description": "A JSON object"},
                        },
                        "required": ["command"],
                    },
                },
                {"name": "clock__now", "description": ""},
            ]
        }
    ]


async def test_thinking_and_tool_prompt_tokens_count_in_the_shared_vocabulary(
    server: WireServer,
) -> None:
    usage = {
        "promptTokenCount": 100,
        "toolUsePromptTokenCount": 5,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 30,
        "totalTokenCount": 155,
    }
    server.replies = [Reply(body=gemini_response([{"text": "ok"}], usage=usage))]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert response.usage is not None
    assert response.usage.to_json() == {
        "promptTokens": 105,
        "completionTokens": 50,
        "totalTokens": 155,
    }


async def test_parallel_function_calls_get_ids_unique_to_the_response(server: WireServer) -> None:
    with_id = {"functionCall": {"id": "fc-9", "name": "bash__exec", "args": {"command": "id"}}}
    server.replies = [
        Reply(body=gemini_response([{"text": "checking"}, CALL_LS, CALL_PWD, with_id]))
    ]
    response = await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    assert response.text == "checking"
    assert response.tool_calls == (
        ToolCall(id="call_resp-1_0", name="bash__exec", args={"command": "ls"}),
        ToolCall(id="call_resp-1_1", name="bash__exec", args={"command": "pwd"}),
        ToolCall(id="fc-9", name="bash__exec", args={"command": "id"}),
    )


def assistant_and_results(calls: tuple[ToolCall, ...]) -> list[Message]:
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
            tool_result={
                "toolCallId": c.id,
                "toolName": c.name,
                "status": "ok" if i == 0 else "error",
                "output": "a.txt" if i == 0 else None,
                "error": None if i == 0 else {"message": "boom", "code": "E_TOOL"},
            },
            source=MessageSource(type="tool", tool_call_id=c.id, tool_name=c.name),
        )
        for i, c in enumerate(calls)
    ]
    return [assistant, *results]


def test_tool_results_go_back_as_function_responses_in_one_user_content() -> None:
    calls = (
        ToolCall(id="c1", name="bash__exec", args={"command": "ls"}),
        ToolCall(id="c2", name="bash__exec", args={"command": "pwd"}),
    )
    later = Message(id="u2", role="user", content="and then?")
    system, contents = to_gemini_contents([*CONVERSATION, *assistant_and_results(calls), later])
    assert system == "You are terse."
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == [
        {"text": "checking"},
        {"function_call": {"id": "c1", "name": "bash__exec", "args": {"command": "ls"}}},
        {"function_call": {"id": "c2", "name": "bash__exec", "args": {"command": "pwd"}}},
    ]
    parts = contents[2]["parts"]
    assert isinstance(parts, list)
    responses = [p["function_response"] for p in parts[:2]]  # type: ignore[index]
    assert [(r["id"], r["name"]) for r in responses] == [("c1", "bash__exec"), ("c2", "bash__exec")]
    assert responses[1]["response"]["error"]["code"] == "E_TOOL"
    assert parts[2] == {"text": "and then?"}


async def test_a_calls_thought_signature_goes_back_with_it(server: WireServer) -> None:
    signature = base64.b64encode(b"opaque-thought").decode()
    server.replies = [
        Reply(body=gemini_response([{**CALL_LS, "thoughtSignature": signature}])),
        Reply(body=gemini_response([{"text": "a.txt is there"}], response_id="resp-2")),
    ]
    provider = model(server)
    first = await provider.complete(ModelRequest(messages=CONVERSATION, tools=[BASH]))
    history = [*CONVERSATION, *assistant_and_results(first.tool_calls)]
    second = await provider.complete(ModelRequest(messages=history, tools=[BASH]))
    assert second.text == "a.txt is there"
    contents = server.requests[1].body["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"text": "checking"},
            {
                "functionCall": {
                    "id": "call_resp-1_0",
                    "name": "bash__exec",
                    "args": {"command": "ls"},
                },
                "thoughtSignature": signature,
            },
        ],
    }
    assert contents[2]["role"] == "user"
    [part] = contents[2]["parts"]
    assert part["functionResponse"]["id"] == "call_resp-1_0"
    assert part["functionResponse"]["response"]["output"] == "a.txt"


async def test_429_then_success_is_retried_by_the_sdk(server: WireServer) -> None:
    server.replies = [
        Reply(status=429, body=error(429, "RESOURCE_EXHAUSTED", "slow down")),
        Reply(body=gemini_response([{"text": "after retry"}])),
    ]
    response = await model(server, maxRetries=1).complete(
        ModelRequest(messages=CONVERSATION, tools=[])
    )
    assert response.text == "after retry"
    assert len(server.requests) == 2


RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}


@pytest.mark.parametrize(
    ("headers", "details", "wait"),
    [({}, [RETRY_INFO], 37.0), ({"retry-after": "5"}, [RETRY_INFO], 5.0), ({}, [], None)],
)
async def test_a_429_that_outlasts_the_retries_says_how_long_to_wait(
    server: WireServer, headers: dict[str, str], details: list[dict[str, Any]], wait: float | None
) -> None:
    body = error(429, "RESOURCE_EXHAUSTED", "quota", *details)
    server.replies = [Reply(status=429, body=body, headers=headers)]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == RATE_LIMITED
    assert raised.value.retry_after == wait
    assert len(server.requests) == 1


async def test_with_shared_limits_the_sdk_does_not_retry(server: WireServer) -> None:
    server.replies = [Reply(status=429, body=error(429, "RESOURCE_EXHAUSTED", "quota"))]
    limited = model(server, maxRetries=3, limits={"maxConcurrent": 1})
    with pytest.raises(ModelCallError) as raised:
        await limited.complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == RATE_LIMITED
    assert len(server.requests) == 1  # the governor retries, after the pool's pause


async def test_500_until_failure_is_a_model_error(server: WireServer) -> None:
    server.replies = [Reply(status=500, body=error(500, "INTERNAL", "backend down"))]
    with pytest.raises(ModelCallError, match="backend down") as raised:
        await model(server, maxRetries=1).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_API"
    assert len(server.requests) == 2  # one try plus one retry, then it gives up


async def test_a_bad_request_is_an_api_error_with_the_apis_message(server: WireServer) -> None:
    body = error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    server.replies = [Reply(status=400, body=body)]
    with pytest.raises(ModelCallError, match="HTTP 400: Invalid JSON payload") as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_API"


INVALID_KEY = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, error(400, "INVALID_ARGUMENT", f"API key not valid: {KEY}", INVALID_KEY)),
        (401, error(401, "UNAUTHENTICATED", "no credentials")),
        (403, error(403, "PERMISSION_DENIED", f"key {KEY} may not call this")),
    ],
)
async def test_a_wrong_key_names_its_source_never_the_key(
    server: WireServer, status: int, body: dict[str, Any]
) -> None:
    server.replies = [Reply(status=status, body=body)]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_AUTH"
    assert "env:TEST_GEMINI_KEY" in str(raised.value)
    assert KEY not in str(raised.value)


async def test_a_server_that_does_not_answer_in_time(server: WireServer) -> None:
    answer = threading.Event()
    server.on_request = lambda _request: answer.wait(10)
    server.replies = [Reply(body=gemini_response([{"text": "too late"}]))]
    try:
        with pytest.raises(ModelCallError, match=r"within 0\.3s") as raised:
            await model(server, timeoutSeconds=0.3).complete(
                ModelRequest(messages=CONVERSATION, tools=[])
            )
    finally:
        answer.set()
    assert raised.value.code == "E_MODEL_CONNECTION"


async def test_a_server_that_is_not_there_is_a_connection_error(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    plan = ModelPlan.of(
        "gemini",
        ModelSpec.model_validate(
            {
                "provider": "google",
                "model": "m",
                "baseUrl": f"http://127.0.0.1:{port}",
                "maxRetries": 0,
            }
        ),
    )
    with pytest.raises(ModelCallError) as raised:
        await GeminiModel(plan, "agent", environ={}).complete(
            ModelRequest(messages=CONVERSATION, tools=[])
        )
    assert raised.value.code == "E_MODEL_CONNECTION"


async def test_malformed_json_body_is_a_model_error(server: WireServer) -> None:
    server.replies = [Reply(raw=b"{this is not json")]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code.startswith("E_MODEL")


@pytest.mark.parametrize(
    "body",
    [
        gemini_response([], "SAFETY"),
        {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}},
    ],
    ids=["refused", "prompt blocked"],
)
async def test_a_refusal_is_a_model_error(server: WireServer, body: dict[str, Any]) -> None:
    server.replies = [Reply(body=body)]
    with pytest.raises(ModelCallError, match="SAFETY") as raised:
        await model(server).complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_API"


async def test_the_key_defaults_to_gemini_api_key(server: WireServer) -> None:
    server.replies = [Reply(body=gemini_response([{"text": "hi"}]))]
    plan = ModelPlan.of("g", ModelSpec(provider="google", model="gemini-test"))
    plan = plan.model_copy(update={"base_url": server.url})
    await GeminiModel(plan, "a", environ={"GEMINI_API_KEY": "from-env"}).complete(
        ModelRequest(messages=CONVERSATION, tools=[])
    )
    assert server.requests[0].headers["x-goog-api-key"] == "from-env"


async def test_a_missing_key_fails_at_the_first_call_naming_the_variable() -> None:
    plan = ModelPlan.of("g", ModelSpec(provider="google", model="gemini-test"))
    provider = GeminiModel(plan, "agent", environ={})
    with pytest.raises(ModelCallError, match="GEMINI_API_KEY") as raised:
        await provider.complete(ModelRequest(messages=CONVERSATION, tools=[]))
    assert raised.value.code == "E_MODEL_AUTH"


def test_the_agent_boots_on_provider_google() -> None:
    from agent_process.boot import build_model

    spec = ModelSpec.model_validate(
        {"provider": "google", "model": "gemini-test", "apiKey": {"value": "k"}}
    )
    assert isinstance(build_model(ModelPlan.of("g", spec), "agent"), GeminiModel)


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_process.boot import BootError, build_model

    monkeypatch.setitem(sys.modules, "google.genai", None)  # makes the import fail
    with pytest.raises(BootError, match=r"pip install 'goondan-py\[google\]'"):
        build_model(ModelPlan.of("m", ModelSpec(provider="google", model="x")), "agent")


def test_an_agent_on_google_gets_its_key_and_settings_and_no_other(tmp_path: Path) -> None:
    head = "apiVersion: goondan.ai/v1\n"
    path = tmp_path / "goondan.yaml"
    path.write_text(
        "---\n".join(
            [
                head + "kind: Model\nmetadata: {name: g}\nspec: {provider: google, model: m}\n",
                head + "kind: Model\nmetadata: {name: o}\nspec: {provider: openai, model: m}\n",
                head
                + "kind: Agent\nmetadata: {name: a}\nspec: {modelConfig: {modelRef: Model/g}}\n",
                head
                + "kind: Agent\nmetadata: {name: b}\nspec: {modelConfig: {modelRef: Model/o}}\n",
                head + "kind: Swarm\nmetadata: {name: s}\n"
                "spec: {entryAgent: Agent/a, agents: [Agent/a, Agent/b]}\n",
            ]
        )
    )
    bundle = load_bundle(path)
    assert bundle.agent_plan("a", tmp_path).environment == [
        "GEMINI_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_API_VERSION",
    ]
    assert [(n.model, n.variable) for n in key_needs(bundle)] == [
        ("g", "GEMINI_API_KEY"),
        ("o", "OPENAI_API_KEY"),
    ]


STREAMED_PARTS = {
    "text": ([{"text": "the files are a.txt and b.txt"}], "STOP"),
    "function calls": ([{"text": "Let me look."}, CALL_LS, CALL_PWD], "STOP"),
    "cut short": ([{"text": "the files are a.txt and"}], "MAX_TOKENS"),
}


@pytest.mark.parametrize("case", list(STREAMED_PARTS))
async def test_a_streamed_answer_is_assembled_as_the_whole_one(
    server: WireServer, case: str
) -> None:
    parts, finish = STREAMED_PARTS[case]
    server.replies = [
        Reply(body=gemini_response(parts, finish)),
        Reply(events=gemini_stream(parts, finish)),
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
    assert whole.finish_reason == finish
    assert "".join(pieces) == whole.text
    assert len(pieces) > 1  # handed on piece by piece, as they came
    plain, streaming = server.requests
    assert plain.path.endswith("/models/gemini-test:generateContent")
    assert streaming.path.endswith("/models/gemini-test:streamGenerateContent?alt=sse")
    assert streaming.body == plain.body


async def test_a_stream_cut_short_is_a_model_error(server: WireServer) -> None:
    events = gemini_stream([{"text": "half of it"}])
    server.replies = [Reply(events=[events[0], (None, "{broken json")])]
    with pytest.raises(ModelCallError) as raised:
        await model(server).complete(
            ModelRequest(messages=CONVERSATION, tools=[], on_text=lambda text: None)
        )
    assert raised.value.code.startswith("E_MODEL")
