"""``slack``: act as a Slack app through the Web API (HTTPS, bearer token).

Exports (required parameters in **bold**; every export also takes ``timeoutMs``, default 15000,
at most 300000, one deadline for the whole call):

``send``: **channelId**, **text**, ``threadTs``, ``mrkdwn``, ``unfurlLinks``, ``unfurlMedia``,
    ``replyBroadcast`` → ``chat.postMessage`` → ``{ok, channelId, ts, threadTs, text}``.
``read``: **channelId**, ``threadTs`` (then ``conversations.replies``, else
    ``conversations.history``), ``messageTs`` (just that message: ``latest`` = it, inclusive),
    ``latest``, ``oldest``, ``inclusive``, ``limit`` (1..1000, default 20, or 1 with
    ``messageTs``), ``cursor`` → ``{ok, channelId, threadTs, count, messages, hasMore,
    nextCursor}``; each message ``{ts, threadTs?, user?, botId?, subtype?, text, replyCount?,
    files?, reactions?}``.
``edit``: **channelId**, **messageTs**, **text** → ``chat.update`` → ``{ok, channelId, ts,
    edited}``.
``delete``: **channelId**, **messageTs** → ``chat.delete`` → ``{ok, channelId, ts, deleted}``.
``react``: **channelId**, **messageTs**, ``emoji`` or ``emojis[]`` (names, with or without
    colons) → one ``reactions.add`` per distinct name (``already_reacted`` counts as done) →
    ``{ok, channelId, messageTs, emojis, reactionCount}``.
``download_file``: **url** (a file's ``url_private``), ``maxBytes`` (default 3000000, at most
    20000000), ``includeBase64``/``includeDataUrl`` (default true), ``savePath`` (inside the
    workdir) → ``{ok, url, fileName, size, mimeType, base64?, dataUrl?, savedPath?}``.

Token: config ``token`` (a value source), else the first set of ``SLACK_BOT_TOKEN``,
``SLACK_TOKEN``, ``BRAIN_SLACK_BOT_TOKEN``. It travels only in the ``Authorization`` header,
and only to the API host or a file host: ``download_file`` refuses any other URL
(``E_SLACK_FILE_URL_REFUSED``), so the model cannot send the token elsewhere.

Config (``configure``): ``token``, ``apiBaseUrl`` (default ``https://slack.com/api``),
``fileHosts`` (hosts ``download_file`` may fetch from besides ``files.slack.com`` and the API
host), ``allowedHosts`` and ``allowPrivateNetworks`` (as ``http-fetch``), ``maxDownloadBytes``.

Error codes: ``E_SLACK_API_ERROR`` (``ok: false``; the message is ``[slack] <method> failed:
<error>``), ``E_SLACK_RATE_LIMITED`` (HTTP 429 or ``ratelimited``; names ``Retry-After``),
``E_SLACK_FILE_URL_REFUSED``, ``E_CHAT_TOKEN_MISSING``, ``E_CHAT_BAD_RESPONSE``,
``E_CHAT_FILE_TOO_LARGE``, ``E_CHAT_PATH_OUTSIDE_WORKDIR``, the ``E_HTTP_*`` network codes of
``http-fetch`` and ``E_TOOL_INVALID_ARGS``.

Handlers are synchronous (``http.client``): the executor runs them in a worker thread.
"""

from __future__ import annotations

import json
import posixpath
from urllib.parse import unquote, urlencode

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolConfigError, ToolContext, ToolError, ToolHandler
from tools_base.tools._chat import (
    Answer,
    ChatConfig,
    DownloadOptions,
    deadline_of,
    downloaded,
    json_body,
    not_api_json,
    read_chat_config,
    redact,
    retry_suggestion,
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
from tools_base.tools.http_fetch import parse_url

TOOL = "slack"
DEFAULT_API_BASE = "https://slack.com/api"
TOKEN_ENV = ("SLACK_BOT_TOKEN", "SLACK_TOKEN", "BRAIN_SLACK_BOT_TOKEN")
DEFAULT_FILE_HOSTS = ("files.slack.com",)
API_ERROR = ToolCode.E_SLACK_API_ERROR
RATE_LIMITED = ToolCode.E_SLACK_RATE_LIMITED
FILE_URL_REFUSED = ToolCode.E_SLACK_FILE_URL_REFUSED
DEFAULT_READ_LIMIT = 20
MAX_READ_LIMIT = 1000

_TOKEN_ERRORS = frozenset(
    {"not_authed", "invalid_auth", "account_inactive", "token_revoked", "token_expired"}
)
_CHANNEL_ERRORS = frozenset({"channel_not_found", "not_in_channel", "is_archived"})


def _suggestion(error: str, data: JsonObject) -> str:
    if error in _TOKEN_ERRORS:
        return "Slack refused the bot token; ask the operator to check it."
    if error == "missing_scope":
        needed = data.get("needed")
        scope = f" ({needed})" if isinstance(needed, str) else ""
        return f"The Slack app lacks a scope{scope}; ask the operator to add it."
    if error in _CHANNEL_ERRORS:
        return "Check channelId, and that the bot is a member of the channel."
    if error in ("message_not_found", "thread_not_found"):
        return "Check messageTs/threadTs: use the ts of an existing message (read it first)."
    return "Check the arguments against Slack's error; do not repeat the call unchanged."


def _channel(input: JsonObject, ctx: ToolContext) -> str:
    if input.get("channelId") is None and ctx.inbound.get("connector_name") == "slack":
        inbound = ctx.inbound.get("channel_id", "")
        if inbound:
            return inbound  # answer the channel the Turn came from
    return require_string(input, "channelId").strip()


def _emoji_names(input: JsonObject) -> list[str]:
    names = requested_emojis(input, trim=":")
    if not names:
        raise invalid_arg("give 'emoji' or 'emojis'", "For example emoji: 'thumbsup'.")
    return names


def _compact(message: JsonValue) -> JsonObject:
    """The fields of a Slack message a model needs."""
    if not isinstance(message, dict):
        return {}
    out: JsonObject = {"ts": message.get("ts"), "text": message.get("text", "")}
    for key, name in (
        ("thread_ts", "threadTs"),
        ("user", "user"),
        ("bot_id", "botId"),
        ("subtype", "subtype"),
        ("reply_count", "replyCount"),
    ):
        if message.get(key) is not None:
            out[name] = message[key]
    files = message.get("files")
    if isinstance(files, list):
        out["files"] = [
            {
                "id": f.get("id"),
                "name": f.get("name"),
                "mimetype": f.get("mimetype"),
                "size": f.get("size"),
                "urlPrivate": f.get("url_private"),
            }
            for f in files
            if isinstance(f, dict)
        ]
    reactions = message.get("reactions")
    if isinstance(reactions, list):
        out["reactions"] = [
            {"name": r.get("name"), "count": r.get("count")}
            for r in reactions
            if isinstance(r, dict)
        ]
    return out


class SlackTool(ChatBot):
    """The handlers, bound to one config."""

    token_env = TOKEN_ENV
    exports = ("send", "read", "edit", "delete", "react", "download_file")

    def __init__(self, config: ChatConfig, file_hosts: frozenset[str]) -> None:
        super().__init__(config)
        self.file_hosts = file_hosts | {config.api_base.host}

    def api(
        self,
        ctx: ToolContext,
        token: str,
        method: str,
        payload: JsonObject,
        deadline: float,
        *,
        form: bool = False,
    ) -> JsonObject:
        """Call ``method``; the whole answer when ``ok``, else a ToolError.

        Read methods take a form body: Slack's ``conversations.*`` do not all read JSON.
        """
        if form:
            fields = {k: _form_value(v) for k, v in payload.items() if v is not None}
            body = urlencode(fields).encode()
            content_type = "application/x-www-form-urlencoded"
        else:
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            content_type = "application/json; charset=utf-8"
        headers = {"authorization": f"Bearer {token}", "content-type": content_type}
        url = self.http.url(f"/{method}")
        limit_hint = "Ask for fewer messages (limit)."
        answer = self.http.post_api(url, headers, body, deadline, method, limit_hint)
        data = json_body(answer)
        if answer.status == 429 or (data is not None and data.get("error") == "ratelimited"):
            raise self._rate_limited(ctx, method, answer)
        if data is None:
            raise not_api_json(TOOL, method, answer.status, "Web API")
        if data.get("ok") is True:
            return data
        error = redact(str(data.get("error") or f"HTTP {answer.status}"), token)
        ctx.logger.warning("slack api error", method=method, error=error, status=answer.status)
        raise ToolError(
            f"[slack] {method} failed: {error}",
            code=API_ERROR,
            suggestion=_suggestion(error, data),
        )

    @staticmethod
    def _rate_limited(ctx: ToolContext, what: str, answer: Answer) -> ToolError:
        retry_after = answer.headers.get("retry-after", "").strip()
        wait = retry_after if retry_after.isdigit() else None
        ctx.logger.warning("slack rate limited", method=what, retry_after=wait)
        when = f"Retry-After: {wait} s" if wait is not None else "no Retry-After given"
        return ToolError(
            f"[slack] {what} rate limited (HTTP {answer.status}); {when}",
            code=RATE_LIMITED,
            suggestion=retry_suggestion(wait),
        )

    # -- exports --------------------------------------------------------------------------

    def send(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``send``: ``chat.postMessage``."""
        channel, text = _channel(input, ctx), require_string(input, "text")
        payload: JsonObject = {"channel": channel, "text": text}
        thread_ts = optional_string(input, "threadTs")
        if (
            not thread_ts
            and input.get("channelId") is None
            and channel == ctx.inbound.get("channel_id")
        ):
            # Answering the Turn's own channel: in the thread it came from.
            thread_ts = ctx.inbound.get("thread_ts") or ctx.inbound.get("ts")
        if thread_ts:
            payload["thread_ts"] = thread_ts
        for key, name in (
            ("mrkdwn", "mrkdwn"),
            ("unfurlLinks", "unfurl_links"),
            ("unfurlMedia", "unfurl_media"),
            ("replyBroadcast", "reply_broadcast"),
        ):
            if input.get(key) is not None:
                payload[name] = optional_bool(input, key, False)
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            data = self.api(ctx, token, "chat.postMessage", payload, deadline)
            message = data.get("message")
            posted = message if isinstance(message, dict) else {}
            return {
                "ok": True,
                "channelId": data.get("channel", channel),
                "ts": data.get("ts"),
                "threadTs": posted.get("thread_ts", thread_ts or None),
                "text": posted.get("text", text),
            }

        return self._run(run)

    def read(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``read``: ``conversations.replies`` for a thread, else ``conversations.history``."""
        channel = _channel(input, ctx)
        thread_ts = optional_string(input, "threadTs") or None
        message_ts = optional_string(input, "messageTs") or None
        limit_value = optional_number(input, "limit")
        limit = (1 if message_ts else DEFAULT_READ_LIMIT) if limit_value is None else limit_value
        if limit != int(limit) or not 1 <= limit <= MAX_READ_LIMIT:
            raise invalid_arg(f"'limit' must be an integer from 1 to {MAX_READ_LIMIT}")
        payload: JsonObject = {
            "channel": channel,
            "limit": int(limit),
            "latest": message_ts or optional_string(input, "latest") or None,
            "oldest": optional_string(input, "oldest") or None,
            "cursor": optional_string(input, "cursor") or None,
        }
        inclusive = input.get("inclusive")
        if message_ts or inclusive is not None:
            payload["inclusive"] = True if message_ts else optional_bool(input, "inclusive", False)
        method = "conversations.history"
        if thread_ts:
            payload["ts"] = thread_ts
            method = "conversations.replies"
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            data = self.api(ctx, token, method, payload, deadline, form=True)
            raw = data.get("messages")
            messages = [_compact(m) for m in raw] if isinstance(raw, list) else []
            meta = data.get("response_metadata")
            cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
            return {
                "ok": True,
                "channelId": channel,
                "threadTs": thread_ts,
                "count": len(messages),
                "messages": list(messages),
                "hasMore": bool(data.get("has_more", False)),
                "nextCursor": cursor or None,
            }

        return self._run(run)

    def edit(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``edit``: ``chat.update``."""
        channel, ts = _channel(input, ctx), require_string(input, "messageTs")
        payload: JsonObject = {"channel": channel, "ts": ts, "text": require_string(input, "text")}
        return self._on_message(ctx, input, "chat.update", payload, "edited")

    def delete(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``delete``: ``chat.delete``."""
        channel, ts = _channel(input, ctx), require_string(input, "messageTs")
        return self._on_message(
            ctx, input, "chat.delete", {"channel": channel, "ts": ts}, "deleted"
        )

    def _on_message(
        self, ctx: ToolContext, input: JsonObject, method: str, payload: JsonObject, done: str
    ) -> JsonValue:
        """Call ``method`` on the message ``payload`` names (its ``channel`` and ``ts``); the
        result says ``done``."""
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            data = self.api(ctx, token, method, payload, deadline)
            return {
                "ok": True,
                "channelId": data.get("channel", payload["channel"]),
                "ts": data.get("ts", payload["ts"]),
                done: True,
            }

        return self._run(run)

    def react(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``react``: ``reactions.add`` once per distinct emoji name."""
        channel, ts = _channel(input, ctx), require_string(input, "messageTs")
        names = _emoji_names(input)
        deadline = deadline_of(input)

        def run(token: str) -> JsonValue:
            for name in names:
                payload: JsonObject = {"channel": channel, "timestamp": ts, "name": name}
                try:
                    self.api(ctx, token, "reactions.add", payload, deadline)
                except ToolError as exc:
                    # Reacting twice is the state asked for, not a failure.
                    if not exc.message.endswith("failed: already_reacted"):
                        raise
            return reacted({"channelId": channel, "messageTs": ts}, names)

        return self._run(run)

    def download_file(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``download_file``: a file's ``url_private`` with the bot token, within ``maxBytes``."""
        raw_url = require_string(input, "url").strip()
        url = parse_url(raw_url)
        if url.host not in self.file_hosts:
            raise ToolError(
                f"[slack] refusing to send the bot token to {url.host!r}: not a Slack file host",
                code=FILE_URL_REFUSED,
                suggestion=(
                    "Pass a file's url_private from slack__read (files.slack.com). An operator "
                    "can add hosts with the Tool config fileHosts."
                ),
            )
        if url.scheme != "https" and not self.config.allows_host(url):
            raise ToolError(
                f"[slack] refusing to send the bot token over plain http to {url.host!r}",
                code=FILE_URL_REFUSED,
                suggestion="Use the https url_private of the file.",
            )

        def run(token: str, options: DownloadOptions, deadline: float) -> JsonValue:
            auth = {"authorization": f"Bearer {token}"}
            answer = self.http.fetch_file(url, auth, deadline, options)
            if answer.status == 429:
                raise self._rate_limited(ctx, "file download", answer)
            content_type = answer.headers.get("content-type", "")
            if answer.status != 200 or content_type.startswith("text/html"):
                ctx.logger.warning("slack file download failed", status=answer.status)
                what = (
                    f"redirected (HTTP {answer.status})"
                    if 300 <= answer.status < 400
                    else f"answered HTTP {answer.status}"
                    if answer.status != 200
                    else "answered with an HTML page instead of the file"
                )
                raise ToolError(
                    f"[slack] file download {what}",
                    code=API_ERROR,
                    suggestion=(
                        "The bot may lack the files:read scope or access to the file; ask the "
                        "operator, or check the url_private."
                    ),
                )
            name = posixpath.basename(unquote(url.target.split("?", 1)[0]))
            fields: JsonObject = {"url": raw_url, "fileName": name}
            return downloaded(
                ctx, answer, fields, name=name, content_type=content_type, options=options
            )

        return self._download(ctx, input, run)


def _form_value(value: JsonValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def configure(config: JsonObject) -> dict[str, ToolHandler]:
    """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
    reader = ConfigReader(TOOL, config)
    parsed = read_chat_config(reader, TOOL, DEFAULT_API_BASE)
    extra = reader.strings("fileHosts")
    reader.finish()
    hosts: set[str] = set(DEFAULT_FILE_HOSTS)
    for entry in extra:
        host = entry.strip().lower()
        if not host or "/" in host or ":" in host.strip("[]"):
            raise ToolConfigError(f"slack config 'fileHosts': {entry!r} must be a bare host name")
        hosts.add(host)
    return SlackTool(parsed, frozenset(hosts)).handlers()


handlers = configure({})
