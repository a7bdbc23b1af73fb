"""The Telegram connector's settings (documented in :mod:`tools_base.connectors.telegram`),
read once from the connection's context and checked."""

from __future__ import annotations

import re
from dataclasses import dataclass

from goondan.loopback import is_loopback
from tools_base import ConnectorContext, ConnectorError, ToolError
from tools_base.tools.http_fetch import Url, parse_host_entry, parse_url

TOKEN_NAMES = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN")
DEFAULT_API_BASE = "https://api.telegram.org"
DEFAULT_POLL_TIMEOUT_SECONDS = 30
MAX_POLL_TIMEOUT_SECONDS = 600
DEFAULT_RETRY_DELAY_MS = 1000
REQUEST_SLACK_SECONDS = 5
"""The request deadline's margin over the poll timeout, by default."""
MAX_DELAY_MS = 7 * 24 * 3600 * 1000

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
    token = _token(ctx)
    base = _api_base(ctx)
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


def _token(ctx: ConnectorContext) -> str:
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
    return token


def _api_base(ctx: ConnectorContext) -> Url:
    """``TELEGRAM_API_BASE_URL``, refused in plain http off this machine unless allowed."""
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
    return base


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
