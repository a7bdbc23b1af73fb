"""The one small interface every LLM provider implements.

A provider turns the conversation and this Step's catalog into one model response: text, tool
calls, or both. It never runs tools and never touches the conversation store.

Streaming is the caller's choice, per call: a request with ``on_text`` set is streamed (each
piece of text is handed to ``on_text`` as the model produces it), one without is not. Either
way the provider returns the same :class:`ModelResponse`, assembled from the stream exactly as
the non-streaming call would have produced it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

import goondan.errors
from agent_process.tools.catalog import ToolCatalogItem
from goondan.errors import DeliveryCode
from ipc.runtime_events import UNSET, TokenCounts
from tools_base import JsonObject, Message, ToolCall

RATE_LIMITED = DeliveryCode.E_MODEL_RATE_LIMITED
"""The code of a provider's 429: the governor pauses a Model's pool on it and retries."""


class ModelCallError(goondan.errors.ModelFailure):
    """A model call failed for good (after the provider's own retries); the Turn ends with it."""

    code: str = DeliveryCode.E_MODEL

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.retry_after = retry_after
        """Seconds the provider asked to wait (``retry-after`` of a 429), when it said."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenUsage:
    """Tokens one model call consumed, as the provider reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    """What the tokens cost, by the Model's price (``None`` without one, see
    :mod:`bundle.prices`)."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        cost = (
            None
            if self.cost is None and other.cost is None
            else ((self.cost or 0.0) + (other.cost or 0.0))
        )
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=cost,
        )

    def counts(self) -> TokenCounts:
        """The runtime events' token counts (``cost`` only when priced)."""
        return TokenCounts(
            input_tokens=self.prompt_tokens,
            output_tokens=self.completion_tokens,
            total_tokens=self.total_tokens,
            cost=UNSET if self.cost is None else round(self.cost, 6),
        )

    def to_json(self) -> JsonObject:
        """The runtime-event form of :meth:`counts`."""
        out: JsonObject = msgspec.to_builtins(self.counts())
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one call."""

    messages: Sequence[Message]
    """The conversation so far, oldest first. The agent's system prompt is its first message
    (role ``system``); providers send system messages as their system prompt."""
    tools: Sequence[ToolCatalogItem]
    """This Step's final catalog; names go to the provider unchanged."""
    temperature: float | None = None
    max_tokens: int | None = None
    on_text: Callable[[str], None] | None = None
    """Set when the caller streams: called with each non-empty piece of the answer's text, in
    order, as it arrives (it must not block or raise). ``None``: one non-streaming call."""
    conversation: str | None = None
    """The instance key of the conversation asking (what a cassette files the call under);
    providers do not send it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelResponse:
    """One model answer: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: TokenUsage | None = None
    metadata: JsonObject = field(default_factory=dict)


class ChatModel(Protocol):
    """A configured model (provider + model name + options)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one Step; raise :class:`ModelCallError` when the call fails for good."""
        ...
