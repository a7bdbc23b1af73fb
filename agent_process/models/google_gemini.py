"""``provider: google``: Gemini's ``generateContent`` with function calling, on the official
``google-genai`` SDK (the Gemini Developer API, with an API key).

Mapping: system messages → ``systemInstruction``; user text → ``user`` contents; the
assistant's text and tool calls → ``model`` contents with ``text`` and ``functionCall`` parts;
each tool result → a ``functionResponse`` part (the ``ToolCallResult`` JSON as its
``response``) in the following ``user`` content, consecutive results sharing one; catalog items
→ ``functionDeclarations`` with their JSON Schemas converted to the subset Gemini accepts
(:mod:`agent_process.models.gemini_schema`), names unchanged.

With ``on_text`` in the request the call streams (``streamGenerateContent`` with ``alt=sse``):
text is passed on as it arrives, and the chunks' parts, last usage and finish reason are put
together into exactly what the non-streaming call returns.

Retries on 408/429/5xx and connection errors are the SDK's own (``maxRetries``); a failure
that survives them becomes a :class:`ModelCallError` with the codes the other providers use.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from agent_process.models._roles import add_merged
from agent_process.models._sdk import (
    MAX_RETRY_AFTER_SECONDS,
    _short,
    import_sdk,
    missing_key_error,
    resolve_api_key,
    retry_after,
)
from agent_process.models.base import (
    RATE_LIMITED,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    TokenUsage,
)
from agent_process.models.gemini_schema import function_declaration
from bundle.keys import PROVIDER_KEY_ENV
from bundle.plan import ModelPlan
from goondan.errors import DeliveryCode
from tools_base import JsonObject, Message, ToolCall

DEFAULT_KEY_ENV = PROVIDER_KEY_ENV["google"]
EXTRA = "google"
"""The optional dependency that installs the SDK: ``pip install 'goondan-py[google]'``."""
ANSWERED = frozenset({"STOP", "MAX_TOKENS"})
"""Finish reasons of an answer, even an empty one; any other with no text and no call is a
refusal (``SAFETY``, ``RECITATION``, ``MALFORMED_FUNCTION_CALL``...) and fails the call."""
MAX_SIGNATURES = 4096
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class GeminiModel:
    """A :class:`~agent_process.models.base.ChatModel` on Gemini's ``generateContent``."""

    def __init__(
        self, plan: ModelPlan, agent_name: str, environ: Mapping[str, str] | None = None
    ) -> None:
        genai = import_sdk("google.genai", "google", EXTRA)
        self._sdk = genai
        self.plan = plan
        self.agent_name = agent_name
        key, self.key_source = resolve_api_key(plan, DEFAULT_KEY_ENV, environ)
        self._missing_key = key is None and plan.base_url is None
        # With shared limits the governor retries a 429 itself, after the pool's pause.
        retries = 0 if plan.limits is not None else plan.max_retries
        options = genai.types.HttpOptions(
            base_url=plan.base_url,
            timeout=max(1, round(plan.timeout_seconds * 1000)),
            retry_options=genai.types.HttpRetryOptions(attempts=retries + 1),
        )
        # vertexai=False: GOOGLE_GENAI_USE_VERTEXAI in the environment must not move the
        # calls to Vertex AI, which wants Google Cloud credentials rather than this key.
        self.client = genai.Client(api_key=key or "unset", vertexai=False, http_options=options)
        self._signatures: OrderedDict[str, bytes] = OrderedDict()
        """Thought signatures of the function calls this process received, by call id:
        thinking models want each sent back with its call, and a ToolCall has no room."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One ``generateContent`` call (``streamGenerateContent`` when streaming)."""
        if self._missing_key:
            raise missing_key_error(self.plan, self.key_source)
        system, contents = to_gemini_contents(request.messages, self._signatures)
        config: dict[str, Any] = {"automatic_function_calling": {"disable": True}}
        if system:
            config["system_instruction"] = system
        if request.tools:
            config["tools"] = [
                {"function_declarations": [function_declaration(t) for t in request.tools]}
            ]
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if request.max_tokens is not None:
            config["max_output_tokens"] = request.max_tokens
        kwargs = {"model": self.plan.model, "contents": contents, "config": config}
        started = time.perf_counter()
        models = self.client.aio.models
        async with gemini_errors(self._sdk, self.plan, self.key_source):
            if request.on_text is None:
                reply = _Reply()
                reply.add(await models.generate_content(**kwargs), None)
            else:
                reply = await self._streamed(kwargs, request.on_text)
        return self._response(reply, started)

    async def _streamed(self, kwargs: dict[str, Any], on_text: Callable[[str], None]) -> _Reply:
        reply = _Reply()
        stream = await self.client.aio.models.generate_content_stream(**kwargs)
        async for chunk in stream:
            reply.add(chunk, on_text)
        return reply

    def _response(self, reply: _Reply, started: float) -> ModelResponse:
        name = f"Model/{self.plan.name}"
        if not reply.seen_candidate:
            blocked = f" (prompt blocked: {reply.blocked})" if reply.blocked else ""
            raise ModelCallError(
                f"{name}: the response has no candidates{blocked}", code=DeliveryCode.E_MODEL_API
            )
        calls = self._tool_calls(reply)
        text = "".join(reply.texts)
        finish = reply.finish or "STOP"
        if not text and not calls and finish not in ANSWERED:
            raise ModelCallError(
                f"{name}: empty response ({finish})", code=DeliveryCode.E_MODEL_API
            )
        latency_ms = (time.perf_counter() - started) * 1000
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish,
            usage=_usage(reply.usage),
            metadata={
                "latencyMs": round(latency_ms, 3),
                "model": reply.model or self.plan.model,
            },
        )

    def _tool_calls(self, reply: _Reply) -> list[ToolCall]:
        """The reply's function calls, each with an id (Gemini may give none), their thought
        signatures remembered to be sent back."""
        calls: list[ToolCall] = []
        for index, (call, signature) in enumerate(reply.calls):
            call_id = call.id or (
                f"call_{reply.response_id}_{index}"
                if reply.response_id
                else f"call_{uuid.uuid4().hex[:24]}"
            )
            args = dict(call.args) if isinstance(call.args, Mapping) else {}
            calls.append(ToolCall(id=call_id, name=call.name or "", args=args))
            if signature:
                self._remember(call_id, signature)
        return calls

    def _remember(self, call_id: str, signature: bytes) -> None:
        self._signatures[call_id] = signature
        self._signatures.move_to_end(call_id)
        while len(self._signatures) > MAX_SIGNATURES:
            self._signatures.popitem(last=False)


class _Reply:
    """One answer put together from one response or from a stream's chunks: text parts in
    order, function-call parts whole (Gemini never splits one), the last usage and finish."""

    __slots__ = (
        "blocked",
        "calls",
        "finish",
        "model",
        "response_id",
        "seen_candidate",
        "texts",
        "usage",
    )

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[tuple[Any, bytes | None]] = []
        self.finish: str | None = None
        self.usage: Any = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.blocked: str | None = None
        self.seen_candidate = False

    def add(self, response: Any, on_text: Callable[[str], None] | None) -> None:
        self.model = response.model_version or self.model
        self.response_id = self.response_id or response.response_id
        if response.usage_metadata is not None:
            self.usage = response.usage_metadata
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.blocked = _enum_name(feedback.block_reason)
        if not response.candidates:
            return
        self.seen_candidate = True
        candidate = response.candidates[0]
        if candidate.finish_reason is not None:
            self.finish = _enum_name(candidate.finish_reason)
        if candidate.content is not None:
            self._add_parts(candidate.content.parts or (), on_text)

    def _add_parts(self, parts: Any, on_text: Callable[[str], None] | None) -> None:
        for part in parts:
            if part.function_call is not None:
                self.calls.append((part.function_call, part.thought_signature))
            elif part.text and not part.thought:  # thought summaries are not the answer
                self.texts.append(part.text)
                if on_text is not None:
                    on_text(part.text)


def _enum_name(value: Any) -> str:
    return str(getattr(value, "value", value))


def _usage(usage: Any) -> TokenUsage | None:
    """Gemini's counts in the shared vocabulary: the prompt with what tools added to it, and
    the candidates with the thinking, which is billed as output."""
    if usage is None:
        return None
    return TokenUsage(
        prompt_tokens=(usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0),
        completion_tokens=(usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0),
    )


def to_gemini_contents(
    messages: Sequence[Message], signatures: Mapping[str, bytes] | None = None
) -> tuple[str, list[JsonObject]]:
    """``(system instruction, contents)`` in ``generateContent`` form; consecutive messages
    of one role share a content. ``signatures``: thought signatures by call id, sent back
    with their function calls."""
    system_parts = [m.content for m in messages if m.role == "system" and m.content]
    out: list[JsonObject] = []
    for message in messages:
        if message.role == "system":
            continue
        role, parts = _content_of(message, signatures or {})
        if parts:
            add_merged(out, role, "parts", parts)
    return "\n\n".join(system_parts), out


def _content_of(message: Message, signatures: Mapping[str, bytes]) -> tuple[str, list[Any]]:
    """The role and parts of a message other than a system one (no parts: nothing to send)."""
    if message.role == "tool":
        result = message.tool_result or {}
        response = {
            "id": message.source.tool_call_id or "",
            "name": message.source.tool_name or str(result.get("toolName", "")),
            "response": result,
        }
        return "user", [{"function_response": response}]
    if message.role != "assistant":
        return "user", [{"text": message.content}] if message.content else []
    parts: list[Any] = [{"text": message.content}] if message.content else []
    for call in message.tool_calls:
        part: dict[str, Any] = {
            "function_call": {"id": call.id, "name": call.name, "args": call.args}
        }
        signature = signatures.get(call.id)
        if signature:
            part["thought_signature"] = signature
        parts.append(part)
    return "model", parts


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """``(timeouts, other connection failures)`` of the HTTP libraries the SDK loaded: it
    sends with httpx, httpx2 or aiohttp, whichever is installed."""
    timeouts: list[type[BaseException]] = [TimeoutError]
    failures: list[type[BaseException]] = [ConnectionError]
    for module in ("httpx", "httpx2"):
        loaded = sys.modules.get(module)
        if loaded is not None:
            timeouts.append(loaded.TimeoutException)
            failures.append(loaded.TransportError)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        failures.append(aiohttp.ClientError)
    return tuple(timeouts), tuple(failures)


def _api_error(exc: Any, name: str, key_source: str) -> ModelCallError:
    """The :class:`ModelCallError` of the SDK's ``APIError`` ``exc``, by its HTTP status."""
    code = int(exc.code or 0)
    if code in (401, 403) or _reason(exc.details) == "API_KEY_INVALID":
        return ModelCallError(
            f"{name}: the API rejected the key from {key_source} (HTTP {code})",
            code=DeliveryCode.E_MODEL_AUTH,
        )
    if code == 429:
        return ModelCallError(
            f"{name}: rate limited after retries (HTTP 429)",
            code=RATE_LIMITED,
            retry_after=retry_after(getattr(exc, "response", None)) or _retry_delay(exc.details),
        )
    return ModelCallError(
        f"{name}: API error HTTP {code}: {_short(str(exc.message or exc.status or ''))}",
        code=DeliveryCode.E_MODEL_API,
    )


@asynccontextmanager
async def gemini_errors(sdk: Any, plan: ModelPlan, key_source: str) -> AsyncIterator[None]:
    """What the SDK raises (after its own retries) as a :class:`ModelCallError` with a code."""
    name = f"Model/{plan.name}"
    timeouts, failures = _transport_errors()
    try:
        yield
    except sdk.errors.APIError as exc:
        raise _api_error(exc, name, key_source) from None
    except timeouts:
        raise ModelCallError(
            f"{name}: the API did not answer within {plan.timeout_seconds:g}s",
            code=DeliveryCode.E_MODEL_CONNECTION,
        ) from None
    except failures as exc:
        raise ModelCallError(
            f"{name}: cannot reach the API: {_short(str(exc) or type(exc).__name__)}",
            code=DeliveryCode.E_MODEL_CONNECTION,
        ) from None
    except ValueError as exc:  # an unparsable or unexpected response body
        raise ModelCallError(
            f"{name}: invalid API response: {_short(str(exc))}", code=DeliveryCode.E_MODEL_API
        ) from None


def _error_details(body: Any) -> list[Any]:
    error = body.get("error", body) if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return details if isinstance(details, list) else []


def _reason(body: Any) -> str | None:
    """The ``google.rpc.ErrorInfo`` reason of an error body (Gemini answers a bad key with
    HTTP 400 and ``API_KEY_INVALID``)."""
    for detail in _error_details(body):
        if isinstance(detail, dict) and isinstance(detail.get("reason"), str):
            return str(detail["reason"])
    return None


def _retry_delay(body: Any) -> float | None:
    """Seconds a 429's ``google.rpc.RetryInfo`` asks to wait (``retryDelay: "37s"``)."""
    for detail in _error_details(body):
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        found = _DURATION.match(delay) if isinstance(delay, str) else None
        if found:
            return min(float(found.group(1)), MAX_RETRY_AFTER_SECONDS)
    return None
