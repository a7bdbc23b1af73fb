"""JSON over HTTPS for the tools that answer where a Turn came from (``discord``, ``github``).

One request through :class:`~tools_base.tools._chat.ChatHttp` (the chat tools' address and
token policy: vetted, pinned addresses, ``allowedHosts``, one deadline, no redirects), its
answer read within :data:`~tools_base.tools._chat.MAX_API_ANSWER_BYTES` and parsed. Each tool
turns a non-2xx answer into its own structured error; what they share is here: the answer, the
inbound property lookup, and the scrubbing of every secret of a call from what escapes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from tools_base import JsonObject, JsonValue, ToolContext, ToolError
from tools_base.tools._chat import (
    BAD_RESPONSE,
    MAX_API_ANSWER_BYTES,
    ChatHttp,
    TooLarge,
    call_safely,
    redact,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """An API answer: its status, lower-case headers, and body as JSON (``None`` if not)."""

    status: int
    headers: dict[str, str]
    data: JsonValue

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    def field(self, key: str) -> JsonValue:
        """``data[key]`` when the body is a JSON object, else ``None``."""
        return self.data.get(key) if isinstance(self.data, dict) else None


def request_json(
    http: ChatHttp,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str],
    payload: JsonObject | None,
    deadline: float,
    action: str,
) -> JsonAnswer:
    """Send ``payload`` (JSON) to ``path`` under the API base URL and read the JSON answer.

    ``action`` names the call in messages (``[discord] followup: ...``); messages never name
    the path, which may hold a token.
    """
    body = None
    sent = dict(headers)
    if payload is not None:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        sent["content-type"] = "application/json"
    try:
        answer = http.exchange(
            method,
            http.url(path),
            headers=sent,
            body=body,
            deadline=deadline,
            max_bytes=MAX_API_ANSWER_BYTES,
        )
    except TooLarge:
        raise ToolError(
            f"[{http.config.tool}] {action}: the answer is over {MAX_API_ANSWER_BYTES} bytes",
            code=BAD_RESPONSE,
        ) from None
    data: JsonValue = None
    if answer.body:
        try:
            data = json.loads(answer.body)
        except ValueError:
            data = None
    return JsonAnswer(answer.status, answer.headers, data)


def inbound(ctx: ToolContext, connector: str, key: str) -> str | None:
    """The property ``key`` of the event that started this Turn, when a Connection of the
    ``connector`` connector started it (so a tool answers where the Turn came from)."""
    if ctx.inbound.get("connector_name") != connector:
        return None
    value = ctx.inbound.get(key)
    return value if isinstance(value, str) and value else None


def scrubbed(tool: str, secrets: tuple[str, ...], fn: Callable[[], T]) -> T:
    """Run ``fn`` with every one of ``secrets`` masked in what escapes it (no chain kept)."""
    run = fn
    for secret in secrets:
        run = _masking(tool, secret, run)
    return run()


def _masking(tool: str, secret: str, fn: Callable[[], T]) -> Callable[[], T]:
    return lambda: call_safely(tool, secret, fn)


def mask(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each of ``secrets`` masked (for what is logged before an error leaves)."""
    for secret in secrets:
        text = redact(text, secret)
    return text


def short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters (an API's message may be long)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
