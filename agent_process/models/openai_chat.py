"""``provider: openai``: Chat Completions with tools, on the official ``openai`` SDK.

``baseUrl`` points it at any OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp).
Retries on 429/5xx/connection errors are the SDK's own (``maxRetries``, default 2); a failure
that survives them becomes a :class:`ModelError` with a code, and the Turn ends with it.

Mapping: catalog items → ``tools``; system/user/assistant
messages → the same roles; an assistant's tool calls → ``tool_calls`` with JSON arguments; each
tool result → a ``tool`` message with the ``ToolCallResult`` as JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent_process.models._sdk import import_sdk, missing_key_error, resolve_api_key, sdk_errors
from agent_process.models.base import ModelError, ModelRequest, ModelResponse, TokenUsage
from agent_process.tools.executor import MALFORMED_ARGUMENTS_KEY
from bundle.plan import ModelPlan
from tools_base import JsonObject, Message, ToolCall

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class OpenAIChatModel:
    """A :class:`~agent_process.models.base.ChatModel` on Chat Completions."""

    def __init__(
        self, plan: ModelPlan, agent_name: str, environ: Mapping[str, str] | None = None
    ) -> None:
        openai = import_sdk("openai", "openai")
        self._sdk = openai
        self.plan = plan
        self.agent_name = agent_name
        base_url = plan.base_url
        key, self.key_source = resolve_api_key(plan, DEFAULT_KEY_ENV, environ)
        self._missing_key = key is None and base_url is None
        self.client = openai.AsyncOpenAI(
            # A local OpenAI-compatible server usually ignores the key, but the SDK wants one.
            api_key=key or "unused",
            base_url=base_url,
            timeout=plan.timeout_seconds,
            max_retries=plan.max_retries,
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Chat Completions call."""
        if self._missing_key:
            raise missing_key_error(self.plan, self.key_source)
        kwargs: dict[str, Any] = {
            "model": self.plan.model,
            "messages": to_openai_messages(request.messages),
        }
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": item.name,
                        "description": item.description or "",
                        "parameters": item.parameters,
                    },
                }
                for item in request.tools
            ]
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        started = time.perf_counter()
        async with sdk_errors(self._sdk, self.plan, self.key_source):
            completion = await self.client.chat.completions.create(**kwargs)
        latency_ms = (time.perf_counter() - started) * 1000
        if not completion.choices:
            raise ModelError(
                f"Model/{self.plan.name}: the response has no choices", code="E_MODEL_API"
            )
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(_tool_call(call) for call in message.tool_calls or ())
        usage = completion.usage
        return ModelResponse(
            text=message.content or "",
            tool_calls=calls,
            finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
            usage=TokenUsage(
                prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
            )
            if usage is not None
            else None,
            metadata={"latencyMs": round(latency_ms, 3), "model": completion.model},
        )


def to_openai_messages(messages: Sequence[Message]) -> list[JsonObject]:
    """Our conversation in Chat Completions form."""
    out: list[JsonObject] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.source.tool_call_id or "",
                    "content": json.dumps(message.tool_result or {}, ensure_ascii=False),
                }
            )
        elif message.role == "assistant":
            entry: JsonObject = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.args, ensure_ascii=False),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(entry)
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _tool_call(call: Any) -> ToolCall:
    function = call.function
    raw = function.arguments or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        args = {MALFORMED_ARGUMENTS_KEY: raw}
    if not isinstance(args, dict):
        args = {MALFORMED_ARGUMENTS_KEY: raw}
    return ToolCall(id=call.id, name=function.name, args=args)
