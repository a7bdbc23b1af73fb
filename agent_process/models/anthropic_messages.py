"""``provider: anthropic``: the Messages API with tools, on the official ``anthropic`` SDK.

Mapping: system messages → the ``system`` parameter; the assistant's tool calls → ``tool_use``
blocks; tool results → ``tool_result`` blocks in the following user message (consecutive
results, and any user text after them, share one user message, since the API wants roles to
alternate); catalog items → ``tools`` with ``input_schema`` (names unchanged).

With ``on_text`` in the request the call streams (``messages.stream``); the SDK assembles the
events into the same message the non-streaming call returns, so both read it alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_process.models._roles import add_merged
from agent_process.models._sdk import (
    client_options,
    import_sdk,
    missing_key_error,
    resolve_api_key,
    sdk_errors,
)
from agent_process.models.base import ModelCallError, ModelRequest, ModelResponse, TokenUsage
from bundle.keys import PROVIDER_KEY_ENV
from bundle.plan import ModelPlan
from goondan.defaults import MODEL_MAX_TOKENS
from goondan.errors import DeliveryCode
from tools_base import JsonObject, Message, ToolCall

DEFAULT_KEY_ENV = PROVIDER_KEY_ENV["anthropic"]
DEFAULT_MAX_TOKENS = MODEL_MAX_TOKENS
"""The Messages API requires ``max_tokens``; upstream's default, and what budgets reserve."""


class AnthropicMessagesModel:
    """A :class:`~agent_process.models.base.ChatModel` on the Messages API."""

    def __init__(
        self, plan: ModelPlan, agent_name: str, environ: Mapping[str, str] | None = None
    ) -> None:
        self._sdk = import_sdk("anthropic", "anthropic")
        self.plan = plan
        self.agent_name = agent_name
        key, self.key_source = resolve_api_key(plan, DEFAULT_KEY_ENV, environ)
        self._missing_key = key is None
        self.client = self._sdk.AsyncAnthropic(**client_options(plan, key or "unset"))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call."""
        if self._missing_key:
            raise missing_key_error(self.plan, self.key_source)
        system, messages = to_anthropic_messages(request.messages)
        kwargs: dict[str, Any] = {
            "model": self.plan.model,
            "messages": messages,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        }
        if system:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = [
                {
                    "name": item.name,
                    "description": item.description or "",
                    "input_schema": item.parameters,
                }
                for item in request.tools
            ]
        if request.temperature is not None:
            # This SDK has no temperature parameter; the API field is passed through as given.
            kwargs["extra_body"] = {"temperature": request.temperature}
        started = time.perf_counter()
        async with sdk_errors(self._sdk, self.plan, self.key_source):
            if request.on_text is None:
                reply = await self.client.messages.create(**kwargs)
            else:
                reply = await self._streamed(kwargs, request.on_text)
        return self._response(reply, started)

    async def _streamed(self, kwargs: dict[str, Any], on_text: Callable[[str], None]) -> Any:
        """The same call as a stream: text goes to ``on_text`` as it arrives; the SDK puts the
        events together into the very message the non-streaming call returns."""
        async with self.client.messages.stream(**kwargs) as stream:
            async for event in stream:
                if event.type == "text" and event.text:
                    on_text(event.text)
            return await stream.get_final_message()

    def _response(self, reply: Any, started: float) -> ModelResponse:
        latency_ms = (time.perf_counter() - started) * 1000
        texts, calls = _read_blocks(reply.content or ())
        if (
            not texts
            and not calls
            and reply.stop_reason not in ("end_turn", "stop_sequence", "max_tokens")
        ):
            raise ModelCallError(
                f"Model/{self.plan.name}: empty response ({reply.stop_reason})",
                code=DeliveryCode.E_MODEL_API,
            )
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            finish_reason=str(reply.stop_reason or ("tool_use" if calls else "end_turn")),
            usage=_usage(reply.usage),
            metadata={"latencyMs": round(latency_ms, 3), "model": reply.model},
        )


def _read_blocks(content: Any) -> tuple[list[str], list[ToolCall]]:
    """The texts and tool calls among a reply's content blocks."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            args = block.input if isinstance(block.input, dict) else {}
            calls.append(ToolCall(id=block.id, name=block.name, args=args))
    return texts, calls


def _usage(usage: Any) -> TokenUsage | None:
    if usage is None:
        return None
    return TokenUsage(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens)


def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[JsonObject]]:
    """``(system, messages)`` in Messages API form, roles alternating."""
    system_parts = [m.content for m in messages if m.role == "system"]
    out: list[JsonObject] = []
    for message in messages:
        if message.role == "system":
            continue
        role, blocks = _blocks_of(message)
        if blocks:
            add_merged(out, role, "content", blocks)
    return "\n\n".join(system_parts), out


def _blocks_of(message: Message) -> tuple[str, list[JsonObject]]:
    """The role and content blocks of a message other than a system one (no blocks:
    nothing to send)."""
    if message.role == "tool":
        result = message.tool_result or {}
        block: JsonObject = {
            "type": "tool_result",
            "tool_use_id": message.source.tool_call_id or "",
            "content": json.dumps(result, ensure_ascii=False),
            "is_error": result.get("status") == "error",
        }
        return "user", [block]
    if message.role != "assistant":
        return "user", [{"type": "text", "text": message.content}] if message.content else []
    blocks: list[JsonObject] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
        for call in message.tool_calls
    )
    return "assistant", blocks
