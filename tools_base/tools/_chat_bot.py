"""What the Slack and Telegram tools share: a bot bound to one config, its token and downloads."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from tools_base import JsonObject, JsonValue, ToolContext, ToolHandler
from tools_base.tools._chat import (
    ChatConfig,
    ChatHttp,
    DownloadOptions,
    check_save_path,
    deadline_of,
    download_options,
)
from tools_base.tools._common import optional_string, optional_string_list

T = TypeVar("T")


class ChatBot:
    """A chat platform's handlers bound to one config: its HTTP client, its bot token (from
    ``token_env`` when the config names none) and its file downloads."""

    token_env: ClassVar[tuple[str, ...]]
    """The environment variables that may hold the token, in order."""
    exports: ClassVar[tuple[str, ...]]
    """The export names; each is the name of the handler method too."""

    def __init__(self, config: ChatConfig) -> None:
        self.config = config
        self.http = ChatHttp(config)

    def _run(self, fn: Callable[[str], T]) -> T:
        """``fn(token)``; the token never leaves in an error."""
        return self.http.with_token(self.token_env, fn)

    def _download(
        self,
        ctx: ToolContext,
        input: JsonObject,
        fetch: Callable[[str, DownloadOptions, float], JsonValue],
    ) -> JsonValue:
        """``fetch(token, options, deadline)`` for a ``download_file`` call, once its options
        are read and its save path is known to be allowed."""
        options = download_options(input, self.config)
        check_save_path(ctx, options.save_path)
        deadline = deadline_of(input)
        return self._run(lambda token: fetch(token, options, deadline))

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        handlers: dict[str, ToolHandler] = {name: getattr(self, name) for name in self.exports}
        return handlers


def requested_emojis(input: JsonObject, trim: str = "") -> list[str]:
    """The distinct emoji a ``react`` call names (``emoji`` first, then ``emojis``), each
    without the white space and the ``trim`` characters around it; empty ones left out."""
    wanted = [optional_string(input, "emoji") or "", *(optional_string_list(input, "emojis") or [])]
    return list(dict.fromkeys(e for e in (w.strip().strip(trim) for w in wanted) if e))


def reacted(message: JsonObject, emojis: list[str]) -> JsonObject:
    """A ``react`` call's answer: the ``message`` reacted to, and the emoji it was given."""
    return {"ok": True, **message, "emojis": list(emojis), "reactionCount": len(emojis)}
