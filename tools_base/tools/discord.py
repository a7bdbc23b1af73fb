"""``discord``: answer Discord interactions and post to channels through the Discord API.

The ``discord`` connector answers each slash command "deferred" (Discord shows the bot
"thinking…") and passes the interaction's ``interaction_token`` and ``application_id`` in the
event; these exports finish it. In a Turn a discord Connection started, ``interactionToken``,
``applicationId`` and ``channelId`` default to the event's, so the model passes only the text.

Exports (every one also takes ``timeoutMs``, default 15000, at most 300000):

``edit_original``: **content** → ``PATCH /webhooks/{application}/{token}/messages/@original``:
    replaces the "thinking…" of a deferred command with the answer → ``{ok, messageId,
    channelId}``.
``followup``: **content**, ``ephemeral`` (only the invoking user sees it) →
    ``POST /webhooks/{application}/{token}?wait=true``: one more message in the interaction's
    channel → ``{ok, messageId, channelId}``.
``send``: **content**, ``channelId`` → ``POST /channels/{channel}/messages`` with the bot token
    (an interaction token lasts 15 minutes; a bot can post later) → ``{ok, messageId,
    channelId}``.

Mentions in ``content`` do not ping anyone (``allowed_mentions.parse`` is empty): the model's
text must not reach ``@everyone``. ``content`` is at most 2000 characters (Discord's limit).

Settings: the bot token (``send`` only) is config ``token`` (a value source), else
``DISCORD_BOT_TOKEN``; the application id, when the event gives none, ``DISCORD_APPLICATION_ID``.
Config: ``apiBaseUrl`` (default ``DISCORD_API_BASE_URL``, else
``https://discord.com/api/v10``), ``allowedHosts`` (with the entries of
``DISCORD_ALLOWED_HOSTS``) and ``allowPrivateNetworks``, as the ``telegram`` tool's
(:mod:`tools_base.tools._chat`): the same address policy, the base URL's host vetted at every
call. The interaction token is in the request path and the bot token in a header: neither ever
appears in a result, an error or a log line.

Error codes: ``E_DISCORD_API_ERROR`` (a non-2xx answer; the message is ``[discord] <export>
failed (HTTP <status>, code <code>): <message>``), ``E_DISCORD_RATE_LIMITED`` (HTTP 429; names
``retry_after``), ``E_DISCORD_NO_INTERACTION`` (no interaction token or application id:
the Turn was not started by an interaction), ``E_CHAT_TOKEN_MISSING``,
``E_CHAT_SETTING_INVALID``, ``E_CHAT_BAD_RESPONSE``, the ``E_HTTP_*`` network codes and
``E_TOOL_INVALID_ARGS``.
"""

from __future__ import annotations

import os
import re

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._chat import (
    BAD_RESPONSE,
    SharedSettings,
    deadline_of,
    resolve_token,
)
from tools_base.tools._common import invalid_arg, optional_bool, optional_string
from tools_base.tools._rest import JsonAnswer, RestTool, inbound

TOOL = "discord"
DEFAULT_API_BASE = "https://discord.com/api/v10"
TOKEN_ENV = ("DISCORD_BOT_TOKEN",)
APPLICATION_ENV = "DISCORD_APPLICATION_ID"
SHARED = SharedSettings(base_url="DISCORD_API_BASE_URL", allowed_hosts="DISCORD_ALLOWED_HOSTS")
API_ERROR = ToolCode.E_DISCORD_API_ERROR
RATE_LIMITED = ToolCode.E_DISCORD_RATE_LIMITED
NO_INTERACTION = ToolCode.E_DISCORD_NO_INTERACTION
MAX_CONTENT = 2000
EPHEMERAL = 1 << 6
"""The message flag that shows a follow-up to the invoking user only."""

_SNOWFLAKE = re.compile(r"[0-9]{1,25}")
_INTERACTION_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,500}")


def _content(input: JsonObject) -> str:
    content = optional_string(input, "content")
    if content is None or not content.strip():
        raise invalid_arg("'content' must be a non-empty string")
    if len(content) > MAX_CONTENT:
        raise invalid_arg(
            f"'content' is {len(content)} characters; Discord takes at most {MAX_CONTENT}",
            "Shorten the text or split it over several followup calls.",
        )
    return content


def _snowflake(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not _SNOWFLAKE.fullmatch(text):
        raise invalid_arg(f"{what!r} must be a Discord id (digits only)")
    return text


def _interaction(ctx: ToolContext, input: JsonObject) -> tuple[str, str]:
    """The application id and interaction token of this call; never echoes the token."""
    token = optional_string(input, "interactionToken") or inbound(ctx, TOOL, "interaction_token")
    application = _snowflake(
        optional_string(input, "applicationId")
        or inbound(ctx, TOOL, "application_id")
        or os.environ.get(APPLICATION_ENV)
        or None,
        "applicationId",
    )
    if token is None or application is None:
        missing = "interaction token" if token is None else "application id"
        raise ToolError(
            f"[discord] no {missing}: this Turn was not started by a Discord interaction",
            code=NO_INTERACTION,
            suggestion="Use discord__send with a channelId to post outside an interaction.",
        )
    if not _INTERACTION_TOKEN.fullmatch(token):
        raise invalid_arg("'interactionToken' is not shaped like a Discord interaction token")
    return application, token


_INTERACTION_PATHS = {"edit_original": "/messages/@original", "followup": "?wait=true"}
"""What follows the interaction's token in the path of each export that answers it."""


def _message(answer: JsonAnswer, export: str) -> JsonObject:
    if not isinstance(answer.data, dict):
        raise ToolError(
            f"[discord] {export}: HTTP {answer.status} with an answer that is not a message",
            code=BAD_RESPONSE,
        )
    return {"ok": True, "messageId": answer.field("id"), "channelId": answer.field("channel_id")}


class DiscordTool(RestTool, tool=TOOL, default_base=DEFAULT_API_BASE, shared=SHARED):
    """The handlers, bound to one config."""

    def authorization(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The bot's token (``send``; the interaction exports carry theirs in the path)."""
        bot_token = resolve_token(TOOL, self.config.token, TOKEN_ENV)
        return {"authorization": f"Bot {bot_token}"}, (bot_token,)

    def refusal(self, export: str, answer: JsonAnswer, text: str) -> ToolError:
        code = answer.field("code")
        if answer.status == 429:
            after = answer.field("retry_after")
            header = answer.headers.get("retry-after", "")
            wait: float | None = None
            if isinstance(after, int | float) and not isinstance(after, bool):
                wait = float(after)
            elif header.replace(".", "", 1).isdigit():
                wait = float(header)
            when = f"retry_after={wait:g} s" if wait is not None else "no retry_after given"
            return ToolError(
                f"[discord] {export} rate limited (HTTP 429): {text}; {when}",
                code=RATE_LIMITED,
                suggestion=f"Wait {wait:g} seconds, then call again."
                if wait is not None
                else "Wait a few seconds, then call again.",
            )
        what = f"HTTP {answer.status}" + (f", code {code}" if isinstance(code, int) else "")
        suggestion = "Check the arguments; retry later if Discord itself failed."
        if answer.status in (401, 404) and export != "send":
            suggestion = "The interaction token may have expired (15 minutes); use discord__send."
        elif answer.status in (401, 403):
            suggestion = (
                "The bot may not post there; ask the operator to check its token and rights."
            )
        return ToolError(
            f"[discord] {export} failed ({what}): {text}", code=API_ERROR, suggestion=suggestion
        )

    def _to_interaction(
        self, ctx: ToolContext, input: JsonObject, export: str, method: str, payload: JsonObject
    ) -> JsonValue:
        """``payload`` to this call's interaction webhook; its token, in the path, is the call's
        only secret."""
        deadline = deadline_of(input)
        application, token = _interaction(ctx, input)
        path = f"/webhooks/{application}/{token}" + _INTERACTION_PATHS[export]
        answer = self.exchange(ctx, export, method, path, payload, deadline, ({}, (token,)))
        return _message(answer, export)

    def edit_original(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``edit_original``: replace the interaction's first answer ("thinking…")."""
        payload: JsonObject = {"content": _content(input), "allowed_mentions": {"parse": []}}
        return self._to_interaction(ctx, input, "edit_original", "PATCH", payload)

    def followup(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``followup``: one more message in the interaction."""
        payload: JsonObject = {"content": _content(input), "allowed_mentions": {"parse": []}}
        if optional_bool(input, "ephemeral", False):
            payload["flags"] = EPHEMERAL
        return self._to_interaction(ctx, input, "followup", "POST", payload)

    def send(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``send``: a message in a channel, as the bot."""
        payload: JsonObject = {"content": _content(input), "allowed_mentions": {"parse": []}}
        channel = _snowflake(
            optional_string(input, "channelId") or inbound(ctx, TOOL, "channel_id"), "channelId"
        )
        if channel is None:
            raise invalid_arg(
                "'channelId' is required (it may be left out only in a Turn a discord "
                "Connection started)"
            )
        path = f"/channels/{channel}/messages"
        return _message(
            self.exchange(ctx, "send", "POST", path, payload, deadline_of(input)), "send"
        )

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        return {
            "edit_original": self.edit_original,
            "followup": self.followup,
            "send": self.send,
        }


configure = DiscordTool.configure
handlers = configure({})
