"""Answering a webhook delivery: its Turn's answer POSTed, signed, to a callback URL.

A sender that posts an event often wants the answer back (a CI job asking a question, a form
waiting for a reply). The ``webhook`` connector waits for the Turn an event started
(``ConnectorContext.emit_awaiting_answer``) and POSTs the answer to a callback URL the
Connection allows. Settings (secrets, then config, then the environment):

``WEBHOOK_REPLY_URL``
    Where every answer goes, unless a delivery names its own.
``WEBHOOK_REPLY_ALLOWED_URLS``
    URL prefixes, comma or space separated, under which a delivery may name its own callback
    in the body's ``replyTo``. A callback URL from a request is an attacker's way into the
    network (SSRF), so nothing else is called: the scheme, host and port must be a prefix's,
    and the path the prefix's path or below it (at a ``/``); no user info, no ``..``, no
    encoded dots or backslashes. A ``replyTo`` outside them is refused (422) and no event
    is emitted.
``WEBHOOK_REPLY_ATTEMPTS`` (5, 1 to 10), ``WEBHOOK_REPLY_RETRY_DELAY_MS`` (1000),
``WEBHOOK_REPLY_TIMEOUT_MS`` (10000)
    A callback that cannot be reached or answers 408, 429 or 5xx is tried again, the pause
    doubling from the retry delay (at most 60 s), up to the attempts; another answer, a
    redirect included, ends it. Each attempt is signed anew.

Plain ``http`` is accepted only for a loopback host (an answer may be private). Replies need
the webhook's signing secret: the callback is signed as the webhook's deliveries are, the hex
HMAC-SHA256 of ``<timestamp>.<body>`` in ``X-Goondan-Signature`` (``sha256=``-prefixed) with
the Unix time in ``X-Goondan-Timestamp``, and ``X-Goondan-Delivery`` the reply's id (the same
for every attempt, so a receiver can drop a repeat). The body::

    {"ok": true, "event": "webhook_message", "instanceKey": "ci:main", "delivery": "<id>",
     "text": "<the answer>", "error": null}

(``ok`` false and ``error`` set when the Turn failed or the event was not delivered.) At most
:data:`MAX_PENDING` replies wait at once; past that a delivery asking for one is answered 503.
A reply still waiting when the connector stops is lost, and an event sent again after a
restart is answered no more. Logs name the callback's origin, never its path, query or the
secret.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx2

from goondan.loopback import is_loopback
from tools_base._connector import ConnectorContext, ConnectorError, ConnectorEvent, TurnAnswer
from tools_base.connectors import _http

MAX_PENDING = 256
"""Replies waiting for their Turn or their callback, per Connection."""
MAX_RETRY_DELAY_SECONDS = 60.0
RETRIED_STATUSES = frozenset({408, 429})
USER_AGENT = "goondan-webhook-reply/0.1"
TIMESTAMP_HEADER = "X-Goondan-Timestamp"
DELIVERY_HEADER = "X-Goondan-Delivery"
REPLY_FIELD = "replyTo"

_SUSPICIOUS_PATH = re.compile(r"(^|/)\.\.?(/|$)|%2e|%2f|%5c|\\", re.IGNORECASE)


class CallbackRefused(ValueError):
    """A callback URL is not one the Connection allows; the message says why (never the URL's
    query, which may hold a token)."""


@dataclass(frozen=True, slots=True)
class Prefix:
    """An allowed callback URL prefix."""

    scheme: str
    host: str
    port: int
    path: str

    def admits(self, url: SplitResult) -> bool:
        """Whether ``url`` (checked by :func:`parse_callback`) lies under this prefix."""
        if (url.scheme, url.hostname, _port(url)) != (self.scheme, self.host, self.port):
            return False
        path = url.path or "/"
        if self.path.endswith("/"):
            return path.startswith(self.path)
        return path == self.path or path.startswith(self.path + "/")


def _port(url: SplitResult) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def parse_callback(raw: str, what: str) -> SplitResult:
    """``raw`` as a callback URL, or :class:`CallbackRefused` naming ``what`` and why."""
    text = raw.strip()
    try:
        url = urlsplit(text)
        url.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise CallbackRefused(f"{what} is not a valid URL") from None
    for refuses, why in _CALLBACK_RULES:
        if refuses(url, text):
            raise CallbackRefused(f"{what} {why}")
    return url


def _not_web(url: SplitResult, text: str) -> bool:
    return url.scheme not in ("http", "https") or not url.hostname


def _user_info(url: SplitResult, text: str) -> bool:
    return url.username is not None or url.password is not None or "@" in url.netloc


def _fragment_or_controls(url: SplitResult, text: str) -> bool:
    return bool(url.fragment) or any(ord(c) < 0x21 for c in text)


def _suspicious_path(url: SplitResult, text: str) -> bool:
    return _SUSPICIOUS_PATH.search(url.path) is not None


def _plain_http_off_machine(url: SplitResult, text: str) -> bool:
    return url.scheme == "http" and not is_loopback(url.hostname or "")


_CALLBACK_RULES: tuple[tuple[Callable[[SplitResult, str], bool], str], ...] = (
    (_not_web, "must be an http(s) URL with a host"),
    (_user_info, "must not hold user info"),
    (_fragment_or_controls, "must not hold a fragment, spaces or control characters"),
    (
        _suspicious_path,
        "must not hold '.' or '..' segments, encoded dots or slashes, or backslashes",
    ),
    (_plain_http_off_machine, "uses plain http off this machine; use https"),
)
"""What refuses a callback URL, in the order checked, with why."""


@dataclass(frozen=True, slots=True)
class ReplyTo:
    """What a Turn's answer is delivered as, and where."""

    event: ConnectorEvent
    """The event the Turn answers."""
    delivery: str | None
    """The sender's delivery id, when it gave one."""
    callback: str
    """The URL the answer is posted to."""


@dataclass(frozen=True, slots=True)
class ReplySettings:
    """Where and how answers go back."""

    default_url: str | None
    prefixes: tuple[Prefix, ...]
    attempts: int
    retry_delay: float
    timeout: float

    def callback_for(self, payload: Mapping[str, Any]) -> str | None:
        """The callback of a delivery: its ``replyTo`` when allowed, else the default
        (``None``: no reply). Raises :class:`CallbackRefused` for a ``replyTo`` not allowed."""
        asked = payload.get(REPLY_FIELD)
        if asked is None:
            return self.default_url
        if not isinstance(asked, str) or not asked.strip():
            raise CallbackRefused(f"{REPLY_FIELD} must be a URL string")
        url = parse_callback(asked, REPLY_FIELD)
        if not any(prefix.admits(url) for prefix in self.prefixes):
            raise CallbackRefused(
                f"{REPLY_FIELD} is not under a URL this Connection allows "
                "(WEBHOOK_REPLY_ALLOWED_URLS)"
            )
        return url.geturl()


def read_reply_settings(ctx: ConnectorContext, secret: str | None) -> ReplySettings | None:
    """The reply settings, ``None`` when the Connection asks for no replies; raises
    :class:`ConnectorError` naming a bad setting."""
    default, allowed = _reply_urls(ctx)
    if default is None and not allowed:
        return None
    if not secret:
        raise ConnectorError(
            "webhook replies need a signing secret (secrets.signingSecret or "
            "WEBHOOK_SIGNING_SECRET): the receiver could not tell them from forgeries"
        )
    try:
        if default is not None:
            default = parse_callback(default, "WEBHOOK_REPLY_URL").geturl()
        prefixes = [_prefix(entry) for entry in allowed]
    except CallbackRefused as exc:
        raise ConnectorError(f"webhook: {exc}") from None
    return ReplySettings(
        default_url=default,
        prefixes=tuple(prefixes),
        attempts=_integer(ctx, "WEBHOOK_REPLY_ATTEMPTS", 5, 1, 10),
        retry_delay=_integer(ctx, "WEBHOOK_REPLY_RETRY_DELAY_MS", 1000, 0, 600_000) / 1000,
        timeout=_integer(ctx, "WEBHOOK_REPLY_TIMEOUT_MS", 10_000, 1, 600_000) / 1000,
    )


def _reply_urls(ctx: ConnectorContext) -> tuple[str | None, list[str]]:
    """``WEBHOOK_REPLY_URL`` and the entries of ``WEBHOOK_REPLY_ALLOWED_URLS``, as written."""
    default = (ctx.setting("WEBHOOK_REPLY_URL") or "").strip() or None
    allowed = [e for e in re.split(r"[\s,]+", ctx.setting("WEBHOOK_REPLY_ALLOWED_URLS") or "") if e]
    return default, allowed


def _prefix(entry: str) -> Prefix:
    """One ``WEBHOOK_REPLY_ALLOWED_URLS`` entry."""
    url = parse_callback(entry, "WEBHOOK_REPLY_ALLOWED_URLS")
    if url.query:
        raise CallbackRefused("WEBHOOK_REPLY_ALLOWED_URLS entries must have no query")
    assert url.hostname is not None
    return Prefix(url.scheme, url.hostname, _port(url), url.path or "/")


def _integer(ctx: ConnectorContext, name: str, default: int, low: int, high: int) -> int:
    raw = (ctx.setting(name) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConnectorError(f"webhook: {name} must be a whole number from {low} to {high}")
    return int(raw)


def reply_body(event: ConnectorEvent, delivery: str | None, answer: TurnAnswer) -> bytes:
    """The JSON a callback receives."""
    return json.dumps(
        {
            "ok": answer.ok,
            "event": event.name,
            "instanceKey": event.instance_key,
            "delivery": delivery,
            "text": answer.text,
            "error": answer.error,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def signed_headers(
    secret: str, body: bytes, reply_id: str, signature_header: str, now: float
) -> dict[str, str]:
    """The headers of one attempt: the webhook's own signature scheme over ``body``."""
    timestamp = str(int(now))
    signature = _http.hmac_sha256_hex(secret, timestamp.encode(), b".", body)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        TIMESTAMP_HEADER: timestamp,
        signature_header: "sha256=" + signature,
        DELIVERY_HEADER: reply_id,
    }


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{_port(parts)}"


class Replier:
    """Sends the answers of one webhook Connection's events to their callbacks."""

    def __init__(
        self,
        ctx: ConnectorContext,
        settings: ReplySettings,
        secret: str,
        signature_header: str,
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self._secret = secret
        self._signature_header = signature_header
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx2.AsyncClient | None = None

    @property
    def has_room(self) -> bool:
        """Whether another reply may wait (else the delivery is answered 503)."""
        return len(self._tasks) < MAX_PENDING

    def start(self, answer: Awaitable[TurnAnswer], to: ReplyTo) -> None:
        """Wait for ``answer`` in the background, then deliver it to ``to.callback``."""
        task = asyncio.ensure_future(self._reply(answer, to))
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            # The kind only: the text of an error could quote the callback URL's query.
            self.ctx.logger.error("webhook reply failed", reason=type(error).__name__)

    async def aclose(self) -> None:
        """Cancel the replies still waiting and close the client."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
        if self._tasks:
            self.ctx.logger.warning("webhook replies lost at stop", count=len(self._tasks))
        if self._client is not None:
            await self._client.aclose()

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(
                verify=ssl.create_default_context(),
                timeout=httpx2.Timeout(self.settings.timeout),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def _reply(self, answer: Awaitable[TurnAnswer], to: ReplyTo) -> None:
        outcome = await answer
        body = reply_body(to.event, to.delivery, outcome)
        reply_id = uuid.uuid4().hex
        callback = to.callback
        # What every line about this reply names (the callback's origin only: its query may
        # hold a token).
        about = {"callback": _origin(callback), "reply_id": reply_id}
        delay = self.settings.retry_delay
        for attempt in range(1, self.settings.attempts + 1):
            headers = signed_headers(
                self._secret, body, reply_id, self._signature_header, time.time()
            )
            status, reason = await self._post(callback, body, headers)
            if status is not None and 200 <= status < 300:
                self.ctx.logger.info(
                    "webhook reply delivered", **about, status=status, attempt=attempt
                )
                return
            retry = status is None or status in RETRIED_STATUSES or status >= 500
            if not retry or attempt == self.settings.attempts:
                self.ctx.logger.warning(
                    "webhook reply failed", **about, reason=reason, attempts=attempt
                )
                return
            self.ctx.logger.info(
                "webhook reply retried", **about, reason=reason, retry_in_seconds=delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_SECONDS)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
        """One attempt: the status (``None`` without an answer) and what to log of it. An
        ``httpx2`` error is reduced to its kind: its text names the URL, which may hold a
        token in its query."""
        try:
            async with asyncio.timeout(self.settings.timeout):
                # Streamed and left unread: only the status counts, whatever the body's size.
                async with self._http().stream("POST", url, content=body, headers=headers) as r:
                    status: int = r.status_code
        except TimeoutError:
            return None, f"no answer within {self.settings.timeout:g} s"
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            return None, type(exc).__name__
        return status, f"HTTP {status}"
