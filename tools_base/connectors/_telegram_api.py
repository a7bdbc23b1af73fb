"""The Telegram Bot API as the ``telegram`` connector speaks it: its settings, the shape of an
update as an event, and one request (see :mod:`tools_base.connectors.telegram`).

Shared by the polling loop (:mod:`~tools_base.connectors.telegram`) and the webhook server
(:mod:`~tools_base.connectors._telegram_webhook`), which the connector starts: neither imports
the other for these.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
from dataclasses import dataclass

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
from tools_base.tools._chat import REDACTED
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
