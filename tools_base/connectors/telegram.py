"""``telegram``: receive a Telegram bot's messages by long polling ``getUpdates``.

No public URL is needed: the connector asks the Bot API for new updates, waiting up to the poll
timeout for one to arrive, and confirms each batch by asking from the last ``update_id`` + 1,
so an update is seen once. The offset is kept in memory only: after a crash Telegram sends the
updates not confirmed yet again, and since an event's id derives from its ``update_id``
(:func:`update_delivery_id`) such an update is the event journaled already, run once.
Telegram refuses ``getUpdates`` (409, naming the webhook) while the bot has a webhook set: the
connector then calls ``deleteWebhook`` (a Connection switched back from webhook mode) and
polls again. Replies go out through the ``telegram`` tool (``telegram__send``), which reads
the same ``TELEGRAM_API_BASE_URL`` and ``TELEGRAM_ALLOWED_HOSTS``.

``TELEGRAM_MODE=webhook`` receives updates on a listener of its own instead (``setWebhook``
with a secret token): see :mod:`tools_base.connectors._telegram_webhook` for its settings.

Settings (each looked up in the Connection's ``secrets``, then its ``config``, then the
environment, see ``ConnectorContext.setting``):

``TELEGRAM_BOT_TOKEN`` / ``BOT_TOKEN`` / ``TELEGRAM_TOKEN``
    The bot token, first one set; required. Keep it in ``secrets`` (``valueFrom.env``).
``TELEGRAM_API_BASE_URL``
    Default ``https://api.telegram.org``; a local Bot API server works. Plain ``http:`` is
    accepted only for a loopback host, a host listed in ``TELEGRAM_ALLOWED_HOSTS``, or with
    ``TELEGRAM_ALLOW_PLAIN_HTTP=true`` (the token would cross the network in clear text).
``TELEGRAM_ALLOWED_HOSTS``
    ``host[:port]`` entries, comma or space separated: servers of the operator's the
    connector and the ``telegram`` tool may reach (over plain http too).
``TELEGRAM_POLL_TIMEOUT_SECONDS``
    How long one ``getUpdates`` may wait for an update; default 30 (0 to 600).
``TELEGRAM_REQUEST_TIMEOUT_MS``
    Deadline of one request, connecting and reading included; default the poll timeout + 5 s.
``TELEGRAM_RETRY_DELAY_MS``
    Pause after a failed poll (network error, HTTP 5xx, ``ok: false``); default 1000. A 429
    waits its ``parameters.retry_after`` seconds instead (this delay when it gives none).
``TELEGRAM_INITIAL_OFFSET``
    The ``offset`` of the first poll; default 0 (every update Telegram still holds).
    ``-1`` starts from the newest one.

A bad value stops the connector with ``E_CONNECTOR_CONFIG`` naming the setting. After it starts,
nothing stops it but cancellation: every failure is logged and the poll retried.

Event ``telegram_message``, instance key ``telegram:<chat id>``, for every ``message`` update
not written by a bot (other update kinds and messages with no text, caption, photo or document
are skipped). Properties (strings; absent when Telegram does not give them): ``update_id``,
``chat_id``, ``chat_type``, ``chat_title``, ``chat_username``, ``message_id``, ``date``,
``from_id``, ``from_username``, ``from_first_name``, ``from_last_name``, ``caption``; for a
photo, or a document whose MIME type is ``image/*``: ``image_file_id``,
``image_file_unique_id``, ``image_source`` (``photo`` or ``document``), ``image_width``,
``image_height``, ``image_file_size``, ``image_mime_type``, ``image_file_name`` (the largest
size of a photo is taken); for any other document: ``file_id``, ``file_unique_id``,
``file_name``, ``file_mime_type``, ``file_size``.

Message: the text as a text message; a photo or image document without a caption as an image
``telegram-file:<file id>``; another document without a caption as a file of that URL and its
name; media with a caption as a text message of the caption followed by a line
``[image] telegram-file:<file id>`` (or ``[file:<name>] ...``). The file URL holds no token: an
agent fetches the file with ``telegram__download_file`` and that ``fileId``.

The token never appears in a log line or an error: it is only ever part of a request path, no
message of ours names a path, errors of the HTTP client (``httpx2``) are reduced to their kind and
scrubbed of the token, and the client's own request log masks the token in the URL it names.
Requests go over ``httpx2`` with no proxy from the environment, no redirects followed, the
answer streamed and refused past :data:`~tools_base.tools._chat.MAX_API_ANSWER_BYTES`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from goondan.loopback import is_loopback
from tools_base import (
    ConnectorContext,
    ConnectorError,
    ToolError,
)
from tools_base.connectors._telegram_updates import EVENT as EVENT
from tools_base.connectors._telegram_updates import FILE_URL_SCHEME as FILE_URL_SCHEME
from tools_base.connectors._telegram_updates import update_event as update_event
from tools_base.tools._chat import MAX_API_ANSWER_BYTES, REDACTED, redact
from tools_base.tools.http_fetch import Url, parse_host_entry, parse_url

TOKEN_NAMES = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN")
DEFAULT_API_BASE = "https://api.telegram.org"
DEFAULT_POLL_TIMEOUT_SECONDS = 30
MAX_POLL_TIMEOUT_SECONDS = 600
DEFAULT_RETRY_DELAY_MS = 1000
REQUEST_SLACK_SECONDS = 5
"""The request deadline's margin over the poll timeout, by default."""
MAX_DELAY_MS = 7 * 24 * 3600 * 1000
USER_AGENT = "goondan-connectors/0.1"

_TOKEN = re.compile(r"^[A-Za-z0-9:_.~-]+$")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class PollSettings:
    """What ``run`` polls with, read once from the context."""

    token: str
    api_base: Url
    poll_timeout: int
    """Seconds one ``getUpdates`` may wait."""
    request_timeout: float
    """Seconds one request may take."""
    retry_delay: float
    """Seconds to wait after a failed poll."""
    initial_offset: int


def read_settings(ctx: ConnectorContext) -> PollSettings:
    """The settings of this connection; raises :class:`ConnectorError` for a bad one."""
    token = (ctx.setting(*TOKEN_NAMES) or "").strip()
    if not token:
        raise ConnectorError(
            f"telegram: no bot token; set one of {', '.join(TOKEN_NAMES)} in the "
            "Connection's secrets (valueFrom: {env: ...}) or the environment"
        )
    if not _TOKEN.match(token):
        # It goes into the request path; never echo it.
        raise ConnectorError(
            "telegram: the bot token holds characters a Telegram token never has "
            "(a token looks like 123456:ABC-def_...)"
        )
    base_text = (ctx.setting("TELEGRAM_API_BASE_URL") or DEFAULT_API_BASE).strip().rstrip("/")
    try:
        base = parse_url(base_text)
    except ToolError as exc:
        raise ConnectorError(f"telegram: TELEGRAM_API_BASE_URL: {exc.message}") from None
    allow_http = _flag(ctx, "TELEGRAM_ALLOW_PLAIN_HTTP") or _listed(ctx, base)
    if base.scheme == "http" and not allow_http and not is_loopback(base.host):
        raise ConnectorError(
            f"telegram: TELEGRAM_API_BASE_URL {base_text!r} uses plain http off this machine, "
            "so the bot token would travel unencrypted; use https, list the host in "
            "TELEGRAM_ALLOWED_HOSTS, or set TELEGRAM_ALLOW_PLAIN_HTTP=true for a trusted network"
        )
    poll_timeout = _integer(
        ctx,
        "TELEGRAM_POLL_TIMEOUT_SECONDS",
        DEFAULT_POLL_TIMEOUT_SECONDS,
        0,
        MAX_POLL_TIMEOUT_SECONDS,
    )
    request_ms = _integer(
        ctx,
        "TELEGRAM_REQUEST_TIMEOUT_MS",
        (poll_timeout + REQUEST_SLACK_SECONDS) * 1000,
        1,
        MAX_DELAY_MS,
    )
    retry_ms = _integer(ctx, "TELEGRAM_RETRY_DELAY_MS", DEFAULT_RETRY_DELAY_MS, 0, MAX_DELAY_MS)
    offset = _integer(ctx, "TELEGRAM_INITIAL_OFFSET", 0, -(2**53), 2**53)
    if request_ms <= poll_timeout * 1000:
        ctx.logger.warning(
            "telegram request timeout is not longer than the poll timeout; quiet polls will "
            "time out",
            request_timeout_ms=request_ms,
            poll_timeout_seconds=poll_timeout,
        )
    return PollSettings(
        token=token,
        api_base=base,
        poll_timeout=poll_timeout,
        request_timeout=request_ms / 1000,
        retry_delay=retry_ms / 1000,
        initial_offset=offset,
    )


def _listed(ctx: ConnectorContext, base: Url) -> bool:
    """Whether ``TELEGRAM_ALLOWED_HOSTS`` (the ``telegram`` tool's too) lists ``base``'s host."""
    raw = ctx.setting("TELEGRAM_ALLOWED_HOSTS") or ""
    try:
        hosts = {parse_host_entry(e) for e in re.split(r"[\s,]+", raw) if e}
    except ValueError as exc:
        raise ConnectorError(f"telegram: TELEGRAM_ALLOWED_HOSTS: {exc}") from None
    return (base.host, None) in hosts or (base.host, base.port) in hosts


def _integer(ctx: ConnectorContext, name: str, default: int, low: int, high: int) -> int:
    raw = ctx.setting(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConnectorError(f"telegram: {name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ConnectorError(f"telegram: {name} must be between {low} and {high}, got {value}")
    return value


def _flag(ctx: ConnectorContext, name: str) -> bool:
    raw = (ctx.setting(name) or "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConnectorError(f"telegram: {name} must be true or false, got {raw!r}")


def update_delivery_id(settings: PollSettings, update_id: int) -> str:
    """The ``delivery_id`` of update ``update_id``: an update fetched or posted again (after
    a crash before Telegram heard it was taken) is then the same event, run once. Telegram
    numbers updates per bot, so the bot's id (the token's part before ``:``, which is no
    secret) keeps two bots of one Connection apart."""
    bot = settings.token.split(":", 1)[0]
    return f"telegram-update:{bot}:{update_id}"


# -- HTTP --------------------------------------------------------------------------------

_BOT_PATH = re.compile(r"/bot[^/\s\"']+")
"""``/bot<token>`` in a URL."""


class _MaskBotTokens(logging.Filter):
    """Masks ``/bot<token>`` in the request lines ``httpx2`` logs (at INFO, URL included), for a
    host application that turns the standard library's logging on."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _BOT_PATH.sub("/bot" + REDACTED, message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def _mask_client_log() -> None:
    logger = logging.getLogger("httpx2")
    if not any(isinstance(f, _MaskBotTokens) for f in logger.filters):
        logger.addFilter(_MaskBotTokens())


class RequestFailed(Exception):
    """A request got no usable answer; the message names host and port, never the path."""


@dataclass(frozen=True, slots=True)
class BotAnswer:
    """One Bot API answer, read whole (within its cap)."""

    status: int
    headers: httpx2.Headers
    body: bytes


def open_client(settings: PollSettings) -> httpx2.AsyncClient:
    """The client of one connection: one kept-alive connection, no proxy or ``.netrc`` from the
    environment, no redirects followed (a redirect is answered as it came), no compression."""
    _mask_client_log()
    return httpx2.AsyncClient(
        verify=ssl.create_default_context(),
        timeout=httpx2.Timeout(settings.request_timeout),
        follow_redirects=False,
        trust_env=False,
        limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1),
        headers={"user-agent": USER_AGENT, "accept-encoding": "identity"},
    )


async def post_json(
    client: httpx2.AsyncClient, url: httpx2.URL, payload: bytes, max_bytes: int
) -> BotAnswer:
    """POST ``payload`` (JSON) to ``url`` and read the answer, refusing one over ``max_bytes``
    as soon as it is announced or read. Raises :class:`RequestFailed`; its cause is dropped,
    since an ``httpx2`` error holds the request and so the URL with the token."""
    where = f"{url.host}:{url.port}"
    try:
        async with client.stream(
            "POST", url, content=payload, headers={"content-type": "application/json"}
        ) as response:
            too_large = RequestFailed(f"{where} sent an answer over {max_bytes} bytes")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise too_large
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise too_large
                chunks.append(chunk)
            return BotAnswer(response.status_code, response.headers, b"".join(chunks))
    except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
        failure = f"cannot connect to {where}: {_reason(exc)}"
    except httpx2.TimeoutException:
        raise TimeoutError from None
    except httpx2.HTTPError as exc:
        failure = f"connection to {where} failed: {_reason(exc)}"
    except httpx2.InvalidURL:  # its message quotes the URL
        failure = f"the request URL for {where} is not valid"
    # Raised outside the handlers, so it carries no context holding the request either.
    raise RequestFailed(failure)


def bot_ok(answer: BotAnswer) -> bool:
    """Whether ``answer`` is a Bot API success (``{"ok": true, ...}``)."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("ok") is True


def method_url(settings: PollSettings, method: str) -> httpx2.URL:
    """The URL of the Bot API ``method`` (it holds the token: never log it)."""
    base = settings.api_base
    prefix = base.target.split("?", 1)[0].rstrip("/")
    return httpx2.URL(
        scheme=base.scheme,
        host=base.host,
        port=base.port,
        raw_path=f"{prefix}/bot{settings.token}/{method}".encode(),
    )


def _reason(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- polling -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollFailure:
    """Why a poll brought no updates, and how long to wait before the next one."""

    reason: str
    wait: float
    rate_limited: bool = False
    webhook_set: bool = False
    """Telegram answered 409: the bot has a webhook, which blocks ``getUpdates``."""


class Poller:
    """The ``getUpdates`` loop of one connection."""

    def __init__(self, ctx: ConnectorContext, settings: PollSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.offset = settings.initial_offset
        self._url = method_url(settings, "getUpdates")
        self._client = open_client(settings)

    async def run(self) -> None:
        """Poll until cancelled."""
        s = self.settings
        self.ctx.logger.info(
            "telegram polling started",
            api=f"{s.api_base.scheme}://{s.api_base.host}:{s.api_base.port}",
            offset=self.offset,
            poll_timeout_seconds=s.poll_timeout,
        )
        try:
            while True:
                outcome = await self.poll()
                if isinstance(outcome, PollFailure) and outcome.webhook_set:
                    await self.delete_webhook()
                    continue
                if isinstance(outcome, PollFailure):
                    self.ctx.report_failure(f"telegram getUpdates: {outcome.reason}")
                    self.ctx.logger.warning(
                        "telegram rate limited" if outcome.rate_limited else "telegram poll failed",
                        reason=outcome.reason,
                        retry_in_seconds=outcome.wait,
                        offset=self.offset,
                    )
                    await asyncio.sleep(outcome.wait)
                    continue
                self.ctx.report_success()
                for update in outcome:
                    await self.deliver(update)
        finally:
            await self._client.aclose()

    async def delete_webhook(self) -> None:
        """``deleteWebhook``, so ``getUpdates`` works again; a failure waits the retry delay
        (the next poll tells whether the webhook is still there)."""
        s = self.settings
        url = method_url(s, "deleteWebhook")
        try:
            async with asyncio.timeout(s.request_timeout):
                answer = await post_json(self._client, url, b"{}", MAX_API_ANSWER_BYTES)
            ok = bot_ok(answer)
            reason = "" if ok else f"HTTP {answer.status}"
        except TimeoutError:
            ok, reason = False, f"no answer within {s.request_timeout:g} s"
        except RequestFailed as exc:
            ok, reason = False, redact(str(exc), s.token)
        if ok:
            self.ctx.logger.warning("telegram webhook deleted to poll for updates")
            return
        self.ctx.logger.warning(
            "telegram deleteWebhook failed", reason=reason, retry_in_seconds=s.retry_delay
        )
        await asyncio.sleep(s.retry_delay)

    async def poll(self) -> list[Mapping[str, Any]] | PollFailure:
        """One ``getUpdates``: the updates, or why there are none."""
        s = self.settings
        payload: dict[str, int] = {"timeout": s.poll_timeout}
        if self.offset:
            payload["offset"] = self.offset
        try:
            async with asyncio.timeout(s.request_timeout):
                answer = await post_json(
                    self._client, self._url, json.dumps(payload).encode(), MAX_API_ANSWER_BYTES
                )
        except TimeoutError:
            return PollFailure(f"no answer within {s.request_timeout:g} s", s.retry_delay)
        except RequestFailed as exc:
            return PollFailure(redact(str(exc), s.token), s.retry_delay)
        return self._updates(answer)

    def _updates(self, answer: BotAnswer) -> list[Mapping[str, Any]] | PollFailure:
        s = self.settings
        try:
            data = json.loads(answer.body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            data = {}
        code = data.get("error_code")
        if answer.status == 429 or code == 429:
            parameters = data.get("parameters")
            after = parameters.get("retry_after") if isinstance(parameters, dict) else None
            header = answer.headers.get("retry-after", "")
            if not isinstance(after, int | float) and header.isdigit():
                after = int(header)
            wait = float(after) if isinstance(after, int | float) and after >= 0 else None
            reason = "HTTP 429" + (f", retry_after={after}" if wait is not None else "")
            return PollFailure(
                reason, wait if wait is not None else s.retry_delay, rate_limited=True
            )
        description = data.get("description")
        if (answer.status == 409 or code == 409) and "webhook" in str(description).lower():
            # Not every 409: "terminated by other getUpdates request" is another poller.
            return PollFailure("HTTP 409: a webhook is set", 0.0, webhook_set=True)
        if data.get("ok") is not True:
            what = f"HTTP {answer.status}"
            if isinstance(code, int):
                what += f", error_code {code}"
            if isinstance(description, str) and description:
                what += f": {description[:300]}"
            elif not data:
                what += ": the answer is not Bot API JSON"
            return PollFailure(redact(what, s.token), s.retry_delay)
        result = data.get("result")
        if not isinstance(result, list):
            return PollFailure("getUpdates gave no list of updates", s.retry_delay)
        return [u for u in result if isinstance(u, dict)]

    async def deliver(self, update: Mapping[str, Any]) -> None:
        """Advance the offset past ``update`` and emit its event, if it has one.

        An update below the offset was already seen (a server that ignored the offset) and is
        skipped, so nothing is emitted twice; one seen again after a restart is the same event
        (:func:`update_delivery_id`), which the runtime runs once.
        """
        update_id = update.get("update_id")
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return
        if self.offset > 0 and update_id < self.offset:
            return
        self.offset = update_id + 1
        event = update_event(update)
        if event is None:
            self.ctx.logger.debug("telegram update skipped", update_id=update_id)
            return
        # The offset lives in memory: after a crash Telegram sends the update again, and the
        # delivery id makes that the event already journaled.
        delivery_id = update_delivery_id(self.settings, update_id)
        await self.ctx.emit(dataclasses.replace(event, delivery_id=delivery_id))


async def run(ctx: ConnectorContext) -> None:
    """Poll the Bot API (or, with ``TELEGRAM_MODE=webhook``, serve its webhook) and emit
    ``telegram_message`` events until cancelled."""
    mode = (ctx.setting("TELEGRAM_MODE", "mode") or "polling").strip().lower()
    if mode not in ("polling", "webhook"):
        raise ConnectorError(f"telegram: TELEGRAM_MODE must be polling or webhook, got {mode!r}")
    settings = read_settings(ctx)
    if mode == "webhook":
        from tools_base.connectors import _telegram_webhook

        await _telegram_webhook.run(ctx, settings)
        return
    await Poller(ctx, settings).run()
