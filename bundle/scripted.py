"""The rules of the offline ``scripted`` model provider (``Model.spec.script``).

A scripted model answers each Step from the first rule whose ``when`` matches the
conversation's newest message, so a swarm can exercise tools and handoffs deterministically,
with no network and no API key::

    script:
      rules:
        - when: { input: "^write (?P<file>\\S+) (?P<text>.+)$" }   # the user's text
          call: { tool: file-system__write, args: { path: "{file}", content: "{text}" } }
        - when: { toolResult: file-system__write, status: ok }    # a tool result came back
          reply: "wrote {result.size} bytes"
        - reply: "I only write files."                            # no `when`: the fallback

Templates: ``{name}`` is a named group of the matching regex (``{0}`` the whole match, ``{1}``
the first group), ``{input}`` the user's text, ``{result}`` / ``{result.a.b}`` /
``{result.items[0]}`` the newest tool result's output, ``{error}`` / ``{errorCode}`` its error message and code, ``{agent}``
the agent's name. ``{{`` and ``}}`` are literal braces. An argument that is exactly one
placeholder keeps the JSON type of its value (``count: "{result.n}"`` passes a number), and a
conversion turns text into a value: ``{ms:int}``, ``{x:number}``, ``{x:json}``, ``{x:str}``.

Streaming: when the caller streams, a reply is handed out in chunks, by default one word at a
time (a word with the whitespace after it). ``stream`` says how to split, for the whole script
or for one rule (the rule's wins)::

    script:
      stream: { by: chars, size: 8 }     # 8 characters a chunk; { by: word, size: 3 }: 3 words
      rules:
        - reply: "one chunk please"
          stream: { by: chars, size: 1000 }

The chunks put together are always the reply itself; a caller that does not stream gets the
reply whole.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from bundle.spec_base import RegexText


class _ScriptModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ScriptCondition(_ScriptModel):
    """When a rule applies. Every given field must match; an empty ``when`` always matches."""

    input: RegexText | None = Field(
        default=None,
        description="Regex searched in the user's text; only matches when the newest message "
        "is the user's input (the first Step of a Turn).",
    )
    tool_result: str | None = Field(
        default=None,
        description="Full tool name; matches when the newest message is a result of this tool.",
    )
    status: Literal["ok", "error", "pending"] | None = Field(
        default=None, description="With toolResult: the result's status must be this."
    )
    output: RegexText | None = Field(
        default=None,
        description="Regex searched in the newest tool result's output rendered as JSON text "
        "(or plain text for a string output).",
    )


class ScriptToolCall(_ScriptModel):
    """A tool call the scripted model makes."""

    tool: str = Field(description="Full tool name, e.g. `bash__exec`.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments; string values are templates."
    )


class ScriptStream(_ScriptModel):
    """How a reply is split into chunks when the caller streams."""

    by: Literal["word", "chars"] = Field(
        default="word",
        description="`word`: whole words, each with the whitespace after it; `chars`: fixed "
        "runs of characters.",
    )
    size: int = Field(
        default=1, ge=1, le=1_000_000, description="Words, or characters, in one chunk."
    )

    def split(self, text: str) -> list[str]:
        """``text`` in chunks; ``"".join(chunks) == text`` always."""
        if self.by == "chars":
            pieces = [text[i : i + self.size] for i in range(0, len(text), self.size)]
        else:
            words = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
            pieces = ["".join(words[i : i + self.size]) for i in range(0, len(words), self.size)]
        return pieces


class ScriptRule(_ScriptModel):
    """One rule: a condition and what the model answers."""

    name: str | None = Field(default=None, description="A label shown in errors and logs.")
    when: ScriptCondition | None = Field(
        default=None, description="When the rule applies; omitted means always (a fallback)."
    )
    reply: str | None = Field(default=None, description="Text answer (a template).")
    call: ScriptToolCall | None = Field(default=None, description="One tool call.")
    calls: list[ScriptToolCall] | None = Field(
        default=None, description="Several tool calls in one response, run in order."
    )
    fail: str | None = Field(
        default=None, description="Simulate a failed model call with this message (for tests)."
    )
    stream: ScriptStream | None = Field(
        default=None, description="How this rule's reply is chunked when streamed."
    )

    @model_validator(mode="after")
    def _one_action(self) -> ScriptRule:
        if self.call is not None and self.calls is not None:
            raise ValueError("give either `call` or `calls`, not both")
        if self.fail is not None and (self.reply, self.call, self.calls) != (None, None, None):
            raise ValueError("`fail` cannot be combined with `reply`, `call` or `calls`")
        if (self.reply, self.call, self.calls, self.fail) == (None, None, None, None):
            raise ValueError("a rule needs `reply`, `call`, `calls` or `fail`")
        if self.calls is not None and not self.calls:
            raise ValueError("`calls` must list at least one tool call")
        return self


class ScriptSpec(_ScriptModel):
    """``Model.spec.script`` of a ``provider: scripted`` model."""

    rules: list[ScriptRule] = Field(
        min_length=1, description="Tried in order; the first whose `when` matches answers."
    )
    stream: ScriptStream | None = Field(
        default=None,
        description="How replies are chunked when streamed (default: one word a chunk).",
    )
