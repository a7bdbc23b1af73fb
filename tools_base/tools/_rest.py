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
from typing import ClassVar, TypeVar

from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._chat import (
    BAD_RESPONSE,
    MAX_API_ANSWER_BYTES,
    ChatConfig,
    ChatHttp,
    SharedSettings,
    TooLarge,
    call_safely,
    read_chat_config,
    redact,
)
from tools_base.tools._common import ConfigReader

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


class RestTool:
    """The handlers of a tool over one JSON API, bound to one config: its HTTP client, and one
    exchange that scrubs the call's secrets from what escapes it and turns a non-2xx answer
    into the tool's own error (:meth:`refusal`).

    A subclass names its tool in its class line: ``class GitHubTool(RestTool, tool="github",
    default_base=..., shared=...)``.
    """

    tool: ClassVar[str]
    """The tool's name (in messages, and the config's)."""
    default_base: ClassVar[str]
    """The API's base URL unless the config's ``apiBaseUrl`` says another."""
    shared: ClassVar[SharedSettings]
    """The settings of the environment the tool's connector reads too."""

    def __init_subclass__(cls, *, tool: str, default_base: str, shared: SharedSettings) -> None:
        super().__init_subclass__()
        cls.tool, cls.default_base, cls.shared = tool, default_base, shared

    def __init__(self, config: ChatConfig) -> None:
        self.config = config
        self.http = ChatHttp(config)

    @classmethod
    def configure(cls, config: JsonObject) -> dict[str, ToolHandler]:
        """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
        reader = ConfigReader(cls.tool, config)
        parsed = read_chat_config(reader, cls.tool, cls.default_base, cls.shared)
        reader.finish()
        return cls(parsed).handlers()

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        raise NotImplementedError

    def authorization(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The headers that authenticate a call, and the secrets in them."""
        raise NotImplementedError

    def refusal(self, export: str, answer: JsonAnswer, text: str) -> ToolError:
        """The error of a non-2xx ``answer`` to ``export``; ``text`` is its message, masked."""
        raise NotImplementedError

    def exchange(
        self,
        ctx: ToolContext,
        export: str,
        method: str,
        path: str,
        payload: JsonObject,
        deadline: float,
        auth: tuple[dict[str, str], tuple[str, ...]] | None = None,
    ) -> JsonAnswer:
        """Send ``payload`` to ``path`` for ``export``: its 2xx answer, else the tool's error.
        ``auth`` (headers, and the secrets of the call) defaults to :meth:`authorization`; no
        secret appears in what escapes."""
        headers, secrets = self.authorization() if auth is None else auth

        def run() -> JsonAnswer:
            answer = request_json(
                self.http,
                method,
                path,
                headers=headers,
                payload=payload,
                deadline=deadline,
                action=export,
            )
            if answer.ok:
                return answer
            message = answer.field("message")
            # Masked before it is logged: an API may quote what it was sent.
            text = (
                short(mask(message, secrets))
                if isinstance(message, str) and message
                else "no message"
            )
            code = answer.field("code")
            ctx.logger.warning(
                f"{self.tool} api error",
                export=export,
                status=answer.status,
                code=code,
                message=text,
            )
            raise self.refusal(export, answer, text)

        return scrubbed(self.tool, secrets, run)
