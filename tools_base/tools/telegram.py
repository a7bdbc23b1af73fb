"""``telegram``: act as a Telegram bot through the Bot API (HTTPS, JSON bodies).

Exports (required parameters in **bold**; every export also takes ``timeoutMs``, default 15000,
at most 300000, one deadline for the whole call):

``send``: **chatId** (integer or ``@channel`` string), **text**, ``parseMode`` (``markdown``,
    ``markdownv2``/``markdown-v2``, ``html``), ``disableNotification``,
    ``disableWebPagePreview``, ``replyToMessageId``, ``allowSendingWithoutReply`` →
    ``sendMessage`` → ``{ok, chatId, messageId, date, text}``.
``edit``: **chatId**, **messageId**, **text**, ``parseMode`` → ``editMessageText`` →
    ``{ok, chatId, messageId, edited}``.
``delete``: **chatId**, **messageId** → ``deleteMessage`` → ``{ok, chatId, messageId, deleted}``.
``react``: **chatId**, **messageId**, ``emoji`` or ``emojis[]`` (or ``clear: true``), ``isBig``
    → ``setMessageReaction`` → ``{ok, chatId, messageId, cleared, emojis, reactionCount}``.
``set_chat_action``: **chatId**, ``action`` (default ``typing``; kebab-case such as
    ``upload-photo`` is accepted) → ``sendChatAction`` → ``{ok, chatId, status, action}``.
``download_file``: **fileId**, ``maxBytes`` (default 3000000, at most 20000000),
    ``includeBase64``/``includeDataUrl`` (default true), ``savePath`` (inside the workdir) →
    ``getFile``, then ``GET <apiBaseUrl>/file/bot<token>/<file_path>`` → ``{ok, fileId,
    fileUniqueId, filePath, fileName, size, mimeType, base64?, dataUrl?, savedPath?}``.

Token: config ``token`` (a value source), else the first set of ``TELEGRAM_BOT_TOKEN``,
``BOT_TOKEN``, ``TELEGRAM_TOKEN``, ``BRAIN_TELEGRAM_BOT_TOKEN``. Telegram puts the token in the
URL path, so no message ever names the path (see ``tools_base.tools._chat``).

Config (``configure``): ``token``, ``apiBaseUrl`` (default ``TELEGRAM_API_BASE_URL``, else
``https://api.telegram.org``; a local Bot API server works), ``allowedHosts`` and
``allowPrivateNetworks`` (as ``http-fetch``; the base URL's host must pass them; the entries
of ``TELEGRAM_ALLOWED_HOSTS`` count too), ``maxDownloadBytes`` (upper bound of ``maxBytes``).

The environment settings are the ``telegram`` connector's, so one ``TELEGRAM_API_BASE_URL``
serves the Connection that receives and the tool that answers. The tool accepts that URL when
the connector does (https; plain http to a loopback host, to a host in
``TELEGRAM_ALLOWED_HOSTS``, or with ``TELEGRAM_ALLOW_PLAIN_HTTP=true``), and then trusts its
host like an ``allowedHosts`` entry: the operator named that server. They are read at every
call; a bad one fails the call with ``E_CHAT_SETTING_INVALID`` naming the variable.

Error codes: ``E_TELEGRAM_API_ERROR`` (``ok: false``; the message is
``[telegram] <method> failed (code N): <description>``), ``E_TELEGRAM_RATE_LIMITED`` (HTTP 429;
names ``retry_after``), ``E_CHAT_TOKEN_MISSING``, ``E_CHAT_SETTING_INVALID``, ``E_CHAT_BAD_RESPONSE``,
``E_CHAT_FILE_TOO_LARGE``, ``E_CHAT_PATH_OUTSIDE_WORKDIR``, the ``E_HTTP_*`` network codes of
``http-fetch`` and ``E_TOOL_INVALID_ARGS``.

Export names must match ``[a-z0-9_-]+``, so upstream's ``setChatAction`` and ``downloadFile``
are ``set_chat_action`` and ``download_file`` here.

Handlers are synchronous (``http.client``): the executor runs them in a worker thread.
"""

from __future__ import annotations

import json
import posixpath
from urllib.parse import quote

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._chat import (
    BAD_RESPONSE,
    DownloadOptions,
    SharedSettings,
    TooLarge,
    deadline_of,
    downloaded,
    json_body,
    not_api_json,
    read_chat_config,
    redact,
    retry_suggestion,
    too_large_error,
)
from tools_base.tools._chat_bot import ChatBot, reacted, requested_emojis
from tools_base.tools._common import (
    ConfigReader,
    invalid_arg,
    optional_bool,
    optional_number,
    optional_string,
    require_string,
)

TOOL = "telegram"
DEFAULT_API_BASE = "https://api.telegram.org"
TOKEN_ENV = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN", "BRAIN_TELEGRAM_BOT_TOKEN")
API_ERROR = ToolCode.E_TELEGRAM_API_ERROR
RATE_LIMITED = ToolCode.E_TELEGRAM_RATE_LIMITED
SHARED = SharedSettings(
    base_url="TELEGRAM_API_BASE_URL",
    allowed_hosts="TELEGRAM_ALLOWED_HOSTS",
    allow_plain_http="TELEGRAM_ALLOW_PLAIN_HTTP",
)
"""What the ``telegram`` connector reads too: one setting points both at a local Bot API."""

PARSE_MODES = {
    "markdown": "Markdown",
    "markdownv2": "MarkdownV2",
    "markdown-v2": "MarkdownV2",
    "markdown_v2": "MarkdownV2",
    "html": "HTML",
}
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)


def _chat_id(input: JsonObject, ctx: ToolContext) -> str | int:
    value = input.get("chatId")
    if value is None and ctx.inbound.get("connector_name") == "telegram":
        value = ctx.inbound.get("chat_id")  # answer the chat the Turn came from
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        return int(text) if text.lstrip("-").isdigit() else text
    raise invalid_arg(
        "'chatId' must be an integer or a non-empty string such as '@channel' "
        "(it may be left out only in a Turn a telegram Connection started)"
    )


def _message_id(input: JsonObject, key: str = "messageId", required: bool = True) -> int | None:
    value = optional_number(input, key)
    if value is None:
        if required:
            raise invalid_arg(f"{key!r} must be a positive integer")
        return None
    if value != int(value) or value < 1:
        raise invalid_arg(f"{key!r} must be a positive integer")
    return int(value)


def _parse_mode(input: JsonObject) -> str | None:
    mode = optional_string(input, "parseMode")
    if mode is None or not mode.strip():
        return None
    parsed = PARSE_MODES.get(mode.strip().lower())
    if parsed is None:
        raise invalid_arg(
            f"'parseMode' must be one of markdown, markdownv2, html; got {mode!r}",
            "Omit parseMode for plain text.",
        )
    return parsed


def _suggestion(code: int, parameters: JsonObject) -> str:
    migrate = parameters.get("migrate_to_chat_id")
    if migrate is not None:
        return f"The group became a supergroup: use chatId {migrate}."
    if code in (401, 404):
        return "Telegram refused the bot token; ask the operator to check it."
    if code == 403:
        return "The bot may not act in this chat (blocked, removed, or missing rights)."
    if code == 400:
        return "Check chatId, messageId and the text (with parseMode, its escaping)."
    return "Check the arguments; retry later if Telegram itself failed."


class TelegramTool(ChatBot):
    """The handlers, bound to one config."""

    token_env = TOKEN_ENV
    exports = ("send", "edit", "delete", "react", "set_chat_action", "download_file")

    def api(
        self, ctx: ToolContext, token: str, method: str, payload: JsonObject, deadline: float
    ) -> JsonValue:
        """Call ``method`` and return its ``result``; ``ok: false`` raises a ToolError."""
        url = self.http.url(f"/bot{token}/{method}")
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"content-type": "application/json"}
        answer = self.http.post_api(url, headers, body, deadline, method)
        data = json_body(answer)
        if data is None and answer.status == 429:  # a proxy's 429 page: Retry-After at most
            retry_after = answer.headers.get("retry-after", "")
            data = {"ok": False, "error_code": 429, "description": "Too Many Requests"}
            if retry_after.isdigit():
                data["parameters"] = {"retry_after": int(retry_after)}
        if data is None:
            raise not_api_json(TOOL, method, answer.status, "Bot API")
        if data.get("ok") is True:
            return data.get("result")
        raise self._api_error(ctx, token, method, answer.status, data)

    def _api_error(
        self, ctx: ToolContext, token: str, method: str, status: int, data: JsonObject
    ) -> ToolError:
        raw_code = data.get("error_code")
        code = raw_code if isinstance(raw_code, int) else status
        description = redact(str(data.get("description") or "no description"), token)
        parameters = data.get("parameters")
        params: JsonObject = parameters if isinstance(parameters, dict) else {}
        ctx.logger.warning(
            "telegram api error", method=method, error_code=code, description=description
        )
        if code == 429 or status == 429:
            retry_after = params.get("retry_after")
            wait = retry_after if isinstance(retry_after, int | float) else None
            when = f"retry_after={wait} s" if wait is not None else "no retry_after given"
            return ToolError(
                f"[telegram] {method} rate limited (code 429): {description}; {when}",
                code=RATE_LIMITED,
                suggestion=retry_suggestion(wait),
            )
        return ToolError(
            f"[telegram] {method} failed (code {code}): {description}",
            code=API_ERROR,
            suggestion=_suggestion(code, params),
        )

    # -- exports --------------------------------------------------------------------------

    def send(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``send``: ``sendMessage``."""
        chat_id = _chat_id(input, ctx)
        text = require_string(input, "text")
        payload: JsonObject = {"chat_id": chat_id, "text": text}
        parse_mode = _parse_mode(input)
        if parse_mode is not None:
            payload["parse_mode"] = parse_mode
        if optional_bool(input, "disableNotification", False):
            payload["disable_notification"] = True
        if optional_bool(input, "disableWebPagePreview", False):
            payload["link_preview_options"] = {"is_disabled": True}
        reply_to = _message_id(input, "replyToMessageId", required=False)
        if reply_to is not None:
            payload["reply_parameters"] = {
                "message_id": reply_to,
                "allow_sending_without_reply": optional_bool(
                    input, "allowSendingWithoutReply", False
                ),
            }
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            result = self.api(ctx, token, "sendMessage", payload, deadline)
            message = result if isinstance(result, dict) else {}
            chat = message.get("chat")
            return {
                "ok": True,
                "chatId": chat.get("id", chat_id) if isinstance(chat, dict) else chat_id,
                "messageId": message.get("message_id"),
                "date": message.get("date"),
                "text": message.get("text", text),
            }

        return self._run(run)

    def edit(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``edit``: ``editMessageText``."""
        chat_id, message_id = _chat_id(input, ctx), _message_id(input)
        payload: JsonObject = {
            "chat_id": chat_id,
            "message_id": message_id,
            "text": require_string(input, "text"),
        }
        parse_mode = _parse_mode(input)
        if parse_mode is not None:
            payload["parse_mode"] = parse_mode
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            self.api(ctx, token, "editMessageText", payload, deadline)
            return {"ok": True, "chatId": chat_id, "messageId": message_id, "edited": True}

        return self._run(run)

    def delete(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``delete``: ``deleteMessage``."""
        chat_id, message_id = _chat_id(input, ctx), _message_id(input)
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            payload: JsonObject = {"chat_id": chat_id, "message_id": message_id}
            self.api(ctx, token, "deleteMessage", payload, deadline)
            return {"ok": True, "chatId": chat_id, "messageId": message_id, "deleted": True}

        return self._run(run)

    def react(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``react``: ``setMessageReaction`` (``clear`` removes the bot's reactions)."""
        chat_id, message_id = _chat_id(input, ctx), _message_id(input)
        clear = optional_bool(input, "clear", False)
        emojis = requested_emojis(input)
        if clear:
            emojis = []
        elif not emojis:
            raise invalid_arg(
                "give 'emoji' or 'emojis', or 'clear': true",
                "For example emoji: '👍'. Telegram accepts only its reaction emoji set.",
            )
        payload: JsonObject = {
            "chat_id": chat_id,
            "message_id": message_id,
            "reaction": [{"type": "emoji", "emoji": e} for e in emojis],
        }
        if optional_bool(input, "isBig", False):
            payload["is_big"] = True
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            self.api(ctx, token, "setMessageReaction", payload, deadline)
            where: JsonObject = {"chatId": chat_id, "messageId": message_id, "cleared": clear}
            return reacted(where, emojis)

        return self._run(run)

    def set_chat_action(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``set_chat_action``: ``sendChatAction`` (the status shows for about 5 seconds)."""
        chat_id = _chat_id(input, ctx)
        raw = (optional_string(input, "action") or "typing").strip().lower()
        action = raw.replace("-", "_").replace(" ", "_")
        if action not in CHAT_ACTIONS:
            raise invalid_arg(
                f"'action' must be one of {', '.join(sorted(CHAT_ACTIONS))}; got {raw!r}"
            )
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            payload: JsonObject = {"chat_id": chat_id, "action": action}
            self.api(ctx, token, "sendChatAction", payload, deadline)
            return {"ok": True, "chatId": chat_id, "status": "sent", "action": action}

        return self._run(run)

    def download_file(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``download_file``: ``getFile``, then the file itself, within ``maxBytes``."""
        file_id = require_string(input, "fileId")

        def run(token: str, options: DownloadOptions, deadline: float) -> JsonValue:
            info = self.api(ctx, token, "getFile", {"file_id": file_id}, deadline)
            meta = info if isinstance(info, dict) else {}
            file_path = meta.get("file_path")
            if not isinstance(file_path, str) or not file_path:
                raise ToolError(
                    "[telegram] getFile gave no file_path (files over 20 MB cannot be downloaded "
                    "by bots)",
                    code=BAD_RESPONSE,
                )
            size = meta.get("file_size")
            if isinstance(size, int) and size > options.max_bytes:
                raise too_large_error(
                    TOOL, "the file", TooLarge(size, announced=True), options.max_bytes
                )
            url = self.http.url(f"/file/bot{token}/{quote(file_path, safe='/')}")
            answer = self.http.fetch_file(url, {}, deadline, options)
            if answer.status != 200:
                data = json_body(answer) or {}
                description = redact(str(data.get("description") or "no description"), token)
                ctx.logger.warning(
                    "telegram file download failed", status=answer.status, description=description
                )
                raise ToolError(
                    f"[telegram] file download failed (HTTP {answer.status}): {description}",
                    code=RATE_LIMITED if answer.status == 429 else API_ERROR,
                    suggestion="Call getFile again (a file link lasts about an hour) or retry.",
                )
            fields: JsonObject = {
                "fileId": meta.get("file_id", file_id),
                "fileUniqueId": meta.get("file_unique_id"),
                "filePath": file_path,
                "fileName": posixpath.basename(file_path),
            }
            content_type = answer.headers.get("content-type")
            return downloaded(
                ctx, answer, fields, name=file_path, content_type=content_type, options=options
            )

        return self._download(ctx, input, run)


def configure(config: JsonObject) -> dict[str, ToolHandler]:
    """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
    reader = ConfigReader(TOOL, config)
    parsed = read_chat_config(reader, TOOL, DEFAULT_API_BASE, SHARED)
    reader.finish()
    return TelegramTool(parsed).handlers()


handlers = configure({})
