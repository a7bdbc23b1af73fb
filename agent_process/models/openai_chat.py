"""``provider: openai``: Chat Completions with tools, configured as the official ``openai`` SDK.

``baseUrl`` points it at any OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp).
The call itself goes on the lean route of :mod:`agent_process.models._openai_wire` (a tenth of
the SDK's CPU per call) with the SDK client's headers, base URL and timeouts; behind an
environment proxy the SDK client makes it. Retries on 429/5xx/connection errors are the SDK's
(``maxRetries``, default 2); a failure that survives them becomes a :class:`ModelCallError`
with a code, and the Turn ends with it.

With ``on_text`` in the request the call streams (``stream=True``, usage asked for with
``stream_options.include_usage``); text and tool calls are put together from the chunks into
the very response the non-streaming call returns.

Mapping: catalog items → ``tools``; system/user/assistant
messages → the same roles; an assistant's tool calls → ``tool_calls`` with JSON arguments; each
tool result → a ``tool`` message with the ``ToolCallResult`` as JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_process.models import _openai_wire as wire
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
from goondan.errors import DeliveryCode
from tools_base import JsonObject, Message, ToolCall

DEFAULT_KEY_ENV = PROVIDER_KEY_ENV["openai"]


class OpenAIChatModel:
    """A :class:`~agent_process.models.base.ChatModel` on Chat Completions."""

    def __init__(
        self, plan: ModelPlan, agent_name: str, environ: Mapping[str, str] | None = None
    ) -> None:
        openai = import_sdk("openai", "openai")
        self._sdk = openai
        self.plan = plan
        self.agent_name = agent_name
        key, self.key_source = resolve_api_key(plan, DEFAULT_KEY_ENV, environ)
        self._missing_key = key is None and plan.base_url is None
        # A local OpenAI-compatible server usually ignores the key, but the SDK wants one.
        self.client = openai.AsyncOpenAI(**client_options(plan, key or "unused"))
        self._lean = wire.LeanRoute.of(self.client, f"Model/{plan.name}", self.key_source)
        """The call without the SDK's machinery (``None``: through a proxy, on the SDK)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Chat Completions call."""
        if self._missing_key:
            raise missing_key_error(self.plan, self.key_source)
        started = time.perf_counter()
        completion: Any
        if self._lean is not None:
            body = wire_body(self.plan.model, request)
            if request.on_text is not None:
                reply = _StreamedReply(self.plan.model)
                await self._lean.stream(body, reply.add, request.on_text)
                return self._assembled(reply, started)
            completion = await self._lean.complete(body)
        else:
            kwargs = _call_options(self.plan.model, request)
            if request.on_text is not None:
                return await self._streamed(kwargs, request.on_text, started)
            async with sdk_errors(self._sdk, self.plan, self.key_source):
                completion = await self.client.chat.completions.create(**kwargs)
        if not completion.choices:
            raise ModelCallError(
                f"Model/{self.plan.name}: the response has no choices",
                code=DeliveryCode.E_MODEL_API,
            )
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(_tool_call(call) for call in message.tool_calls or ())
        return self._response(
            message.content or "",
            calls,
            choice.finish_reason,
            completion.usage,
            completion.model,
            started,
        )

    async def _streamed(
        self, kwargs: dict[str, Any], on_text: Callable[[str], None], started: float
    ) -> ModelResponse:
        """The same call with ``stream=True``: text goes to ``on_text`` as it arrives, tool
        calls are put together from their deltas by ``index``, usage comes in the last chunk."""
        reply = _StreamedReply(self.plan.model)
        async with sdk_errors(self._sdk, self.plan, self.key_source):
            stream = await self.client.chat.completions.create(
                **kwargs, stream=True, stream_options={"include_usage": True}
            )
            async for chunk in stream:
                reply.add(chunk, on_text)
        return self._assembled(reply, started)

    def _assembled(self, reply: _StreamedReply, started: float) -> ModelResponse:
        if not reply.seen_choice:
            raise ModelCallError(
                f"Model/{self.plan.name}: the response has no choices",
                code=DeliveryCode.E_MODEL_API,
            )
        calls = reply.calls
        assembled = tuple(calls[index].tool_call() for index in sorted(calls))
        return self._response(
            "".join(reply.texts), assembled, reply.finish, reply.usage, reply.model, started
        )

    def _response(
        self,
        text: str,
        calls: tuple[ToolCall, ...],
        finish: str | None,
        usage: Any,
        model: str,
        started: float,
    ) -> ModelResponse:
        latency_ms = (time.perf_counter() - started) * 1000
        return ModelResponse(
            text=text,
            tool_calls=calls,
            finish_reason=finish or ("tool_calls" if calls else "stop"),
            usage=TokenUsage(
                prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
            )
            if usage is not None
            else None,
            metadata={"latencyMs": round(latency_ms, 3), "model": model},
        )


def wire_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The Chat Completions request body of ``request`` (without ``stream``)."""
    body: dict[str, Any] = {"model": model, "messages": to_openai_messages(request.messages)}
    if request.tools:
        body["tools"] = _wire_tools(request)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    return body


def _wire_tools(request: ModelRequest) -> list[JsonObject]:
    return [
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


def _call_options(model: str, request: ModelRequest) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments of ``request``.

    The conversation and the tools go as ``extra_body``, which the SDK sends as it is: passed
    as ``messages``/``tools`` they are first walked against the SDK's TypedDicts
    (``maybe_transform``), which changes nothing in what we build (no aliases, no dates or
    files) yet costs about 0.17 ms of CPU per message on every call (14 ms for 80 messages):
    more than the rest of the call. ``messages`` must still be given, so it is given empty;
    the wire body is the same.
    """
    body = wire_body(model, request)
    wire = {key: body.pop(key) for key in ("messages", "tools") if key in body}
    # What is left (model, temperature, max_tokens) goes as the SDK's own arguments.
    return {**body, "messages": (), "extra_body": wire}


class _StreamedReply:
    """One answer put together from a stream's chunks: text in order, tool calls from their
    deltas by ``index``, the last finish reason, usage (in the last chunk) and model."""

    __slots__ = ("calls", "finish", "model", "seen_choice", "texts", "usage")

    def __init__(self, model: str) -> None:
        self.texts: list[str] = []
        self.calls: dict[int, _CallParts] = {}
        self.finish: str | None = None
        self.usage: Any = None
        self.model = model
        self.seen_choice = False

    def add(self, chunk: Any, on_text: Callable[[str], None]) -> None:
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not chunk.choices:
            return
        self.seen_choice = True
        choice = chunk.choices[0]
        if choice.delta is not None:
            self._add_delta(choice.delta, on_text)
        if choice.finish_reason is not None:
            self.finish = choice.finish_reason

    def _add_delta(self, delta: Any, on_text: Callable[[str], None]) -> None:
        if delta.content:
            self.texts.append(delta.content)
            on_text(delta.content)
        for part in delta.tool_calls or ():
            self.calls.setdefault(part.index, _CallParts()).add(part)


class _CallParts:
    """One streamed tool call: its id and name arrive once, its arguments in pieces."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, part: Any) -> None:
        if part.id:
            self.id = part.id
        function = part.function
        if function is not None:
            if function.name:
                self.name += function.name
            if function.arguments:
                self.arguments.append(function.arguments)

    def tool_call(self) -> ToolCall:
        return _parse_call(self.id, self.name, "".join(self.arguments))


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
                            "arguments": _arguments(call),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(entry)
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _arguments(call: ToolCall) -> str:
    """A call's arguments as the model wrote them: its JSON, or the text that did not parse."""
    if call.malformed_arguments is not None:
        return call.malformed_arguments
    return json.dumps(call.args, ensure_ascii=False)


def _tool_call(call: Any) -> ToolCall:
    return _parse_call(call.id, call.function.name, call.function.arguments)


def _parse_call(call_id: str, name: str, arguments: str | None) -> ToolCall:
    raw = arguments or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):  # refused by the executor, never guessed as {}
        return ToolCall(id=call_id, name=name, args={}, malformed_arguments=raw)
    return ToolCall(id=call_id, name=name, args=args)
