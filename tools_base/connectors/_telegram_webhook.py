"""Telegram webhook mode: Telegram posts each update to a listener of the connector's own.

Chosen with ``TELEGRAM_MODE=webhook`` (or the config key ``mode``) in the Connection; the
default, ``polling``, needs no public URL. On start the connector calls ``setWebhook`` with the
public URL and a secret token, then serves the updates Telegram posts there. Switching the
Connection back to polling is enough: the poller deletes the webhook when Telegram answers
``getUpdates`` 409.

Settings (secrets, then config, then the environment), besides the token and
``TELEGRAM_API_BASE_URL`` of the polling mode:

``TELEGRAM_WEBHOOK_PUBLIC_URL`` (or ``publicUrl``)
    The URL Telegram posts to (https, reaching this listener through a proxy or tunnel);
    required.
``TELEGRAM_WEBHOOK_SECRET`` (or ``webhookSecret``)
    The ``secret_token`` given to ``setWebhook``: 1 to 256 of ``A-Z a-z 0-9 _ -``; required.
    Telegram sends it back in ``X-Telegram-Bot-Api-Secret-Token``; a request without it is
    answered 401, one with another value 403 (compared in constant time).
``TELEGRAM_WEBHOOK_HOST`` (127.0.0.1), ``TELEGRAM_WEBHOOK_PORT`` → ``PORT`` → 8791,
``TELEGRAM_WEBHOOK_PATH`` (``/``), ``TELEGRAM_WEBHOOK_MAX_BODY_BYTES`` (1 MiB)
    The listener, as the HTTP connectors' (same server, limits and refusals).

A ``setWebhook`` that Telegram refuses (a bad URL or token) stops the connector with
``E_CONNECTOR_CONFIG``; a network failure or a 5xx/429 is retried after
``TELEGRAM_RETRY_DELAY_MS`` (a 429's ``retry_after``).

Telegram resends an update until it gets a 2xx, so each ``update_id`` taken is remembered in the
Connection's state directory (:mod:`tools_base.connectors._replay`): the same update again is
answered 200 with no second event. Events are the polling mode's (``telegram_message``); each
is journaled (``ctx.accept``) before Telegram gets its answer, so an answered update is
delivered even if the connector is killed first, and its id is the polling mode's too (from
the ``update_id``), so an update Telegram sends again after such a kill is the same event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import re
import time
from dataclasses import dataclass

from starlette.responses import Response

from tools_base import ConnectorContext, ConnectorError
from tools_base.connectors import _http, _replay
from tools_base.connectors._telegram_api import (
    PollSettings,
    RequestFailed,
    bot_ok,
    method_url,
    open_client,
    post_json,
    update_delivery_id,
    update_event,
)
from tools_base.tools._chat import MAX_API_ANSWER_BYTES, redact

DEFAULT_PORT = 8791
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
ALLOWED_UPDATES = ("message",)
"""What the connector turns into events; Telegram is asked for nothing else."""
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """Where Telegram is told to post, and the secret it must send back."""

    public_url: str
    secret: str


def read_webhook_settings(ctx: ConnectorContext) -> WebhookSettings:
    """The webhook settings; raises :class:`ConnectorError` naming a missing or bad one."""
    public_url = (ctx.setting("TELEGRAM_WEBHOOK_PUBLIC_URL", "publicUrl") or "").strip()
    if not public_url:
        raise ConnectorError(
            "telegram: webhook mode needs TELEGRAM_WEBHOOK_PUBLIC_URL (or publicUrl), the https "
            "URL at which Telegram reaches this listener"
        )
    if not public_url.lower().startswith(("https://", "http://")):
        raise ConnectorError(
            f"telegram: TELEGRAM_WEBHOOK_PUBLIC_URL must be an https URL, got {public_url!r}"
        )
    secret = (ctx.setting("TELEGRAM_WEBHOOK_SECRET", "webhookSecret") or "").strip()
    if not secret:
        raise ConnectorError(
            "telegram: webhook mode needs TELEGRAM_WEBHOOK_SECRET (or webhookSecret) in the "
            "Connection's secrets: without it anyone could post updates"
        )
    if not _SECRET.fullmatch(secret):
        # Never echo it.
        raise ConnectorError(
            "telegram: TELEGRAM_WEBHOOK_SECRET must be 1 to 256 characters of A-Z, a-z, 0-9, "
            "_ and - (what Telegram accepts as secret_token)"
        )
    return WebhookSettings(public_url=public_url, secret=secret)


async def set_webhook(ctx: ConnectorContext, poll: PollSettings, hook: WebhookSettings) -> None:
    """Call ``setWebhook`` until Telegram takes it; raise ConnectorError when it refuses."""
    payload = json.dumps(
        {
            "url": hook.public_url,
            "secret_token": hook.secret,
            "allowed_updates": list(ALLOWED_UPDATES),
        }
    ).encode()
    url = method_url(poll, "setWebhook")
    secrets = (poll.token, hook.secret)
    async with open_client(poll) as client:
        while True:
            wait = poll.retry_delay
            try:
                async with asyncio.timeout(poll.request_timeout):
                    answer = await post_json(client, url, payload, MAX_API_ANSWER_BYTES)
            except TimeoutError:
                reason = f"no answer within {poll.request_timeout:g} s"
            except RequestFailed as exc:
                reason = _scrub(str(exc), secrets)
            else:
                if bot_ok(answer):
                    ctx.logger.info("telegram webhook set", allowed_updates=list(ALLOWED_UPDATES))
                    return
                data = _http.json_object(answer.body) or {}
                code = data.get("error_code")
                status = code if isinstance(code, int) else answer.status
                description = _scrub(str(data.get("description") or "no description"), secrets)
                if 400 <= status < 500 and status != 429:
                    raise ConnectorError(
                        f"telegram: setWebhook refused (code {status}): {description}"
                    )
                parameters = _http.mapping_of(data.get("parameters"))
                after = parameters.get("retry_after")
                if status == 429 and isinstance(after, int | float) and after >= 0:
                    wait = float(after)
                reason = f"HTTP {answer.status}: {description}"
            ctx.logger.warning("telegram setWebhook failed", reason=reason, retry_in_seconds=wait)
            ctx.report_failure(f"telegram setWebhook: {reason}")
            await asyncio.sleep(wait)


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = redact(text, secret)
    return text[:300]


async def run(ctx: ConnectorContext, poll: PollSettings) -> None:
    """Set the webhook, then serve the updates Telegram posts until cancelled."""
    hook = read_webhook_settings(ctx)
    listen = _http.listen_settings(ctx, "TELEGRAM_WEBHOOK", DEFAULT_PORT)
    outbox = _http.Outbox(ctx)
    deliveries = _replay.Deliveries.open(ctx)

    async def handle(request: _http.Inbound) -> Response:
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            ctx.logger.warning("telegram webhook request without its secret token refused")
            return _http.answer(401, error=f"missing {SECRET_HEADER}")
        if not _http.same_text(given, hook.secret):
            ctx.logger.warning("telegram webhook request with a wrong secret token refused")
            return _http.answer(403, error=f"wrong {SECRET_HEADER}")
        update = _http.json_object(request.body)
        update_id = None if update is None else update.get("update_id")
        if update is None or not isinstance(update_id, int) or isinstance(update_id, bool):
            return _http.answer(400, error="the body must be a Telegram update")
        event = update_event(update)
        if event is None:
            ctx.logger.debug("telegram update skipped", update_id=update_id)
            return _http.answer(200, skipped=True)
        outcome = await _replay.accept_once(
            deliveries,
            [f"update:{update_id}"],
            until=time.time() + _replay.UNTIMED_SECONDS,
            accept=functools.partial(
                outbox.accept,
                dataclasses.replace(event, delivery_id=update_delivery_id(poll, update_id)),
            ),
        )
        if outcome is _replay.Outcome.REPLAY:
            return _http.answer(200, duplicate=True)
        if outcome is _replay.Outcome.REFUSED:
            return _http.answer(503, error="too many events waiting; retry later")
        return _http.answer(200)

    await set_webhook(ctx, poll, hook)
    await _http.serve(ctx, listen, handle, connector="telegram", mode="webhook")
