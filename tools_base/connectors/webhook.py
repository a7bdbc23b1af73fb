"""The ``webhook`` connector: JSON posted to a URL becomes a swarm event.

``POST <WEBHOOK_PATH>`` with a JSON object::

    {"text": "deploy finished", "event": "webhook_message", "instanceKey": "ci:main",
     "properties": {"status": "green", "build": 812}}

* ``text`` (or ``message``): the input the agent gets; required (422 without it).
* ``event`` (or ``name``): the event name, default ``webhook_message``; it must be one the
  Connector declares (422 otherwise).
* ``instanceKey``: the conversation, default ``webhook:default``.
* ``properties``: string, number and boolean values become string properties (``"812"``,
  ``"true"``); anything else is dropped.

Answers 202 ``{"ok": true, "event": ..., "instanceKey": ...}`` once the event is emitted (so the
runtime's back-pressure reaches the sender), 400 for a body that is not a JSON object.

When a signing secret is set (``secrets.signingSecret`` or ``WEBHOOK_SIGNING_SECRET``), the
request must carry the Unix time it was signed at in ``X-Goondan-Timestamp`` and, in
``X-Goondan-Signature`` (header name ``WEBHOOK_SIGNATURE_HEADER``), the hex HMAC-SHA256 under
the secret of ``<timestamp>.<raw body>``, ``sha256=`` prefix optional (Stripe's scheme). A
timestamp more than ``WEBHOOK_SIGNATURE_WINDOW_SECONDS`` (300) from now is refused: 401, as is
a missing or wrong signature. ``WEBHOOK_ALLOW_BODY_SIGNATURE=true`` also takes a request
without a timestamp signed over the body alone (the scheme before timestamps); nothing limits
when such a copy may be replayed except the delivery cache below.

Replays: a request that led to an event is remembered (``X-Goondan-Delivery``, the sender's id
for the delivery, if given, and the signature), on disk in the Connection's state directory,
until its window is over (seven days for a body-only signature); the same delivery again, the
same id or the same signature, is answered 200 ``{"ok": true, "duplicate": true}`` with no
event, so a sender retrying after a lost answer stops. Two deliveries of one body signed in
the same second are the same signature: give each its own id in the body.

Answers back: with ``WEBHOOK_REPLY_URL`` (or a body's ``replyTo`` under
``WEBHOOK_REPLY_ALLOWED_URLS``) the answer of the Turn an event started is POSTed there, signed
with the signing secret; a ``replyTo`` the Connection does not allow is refused (422). See
:mod:`tools_base.connectors._reply`.

Settings (secrets, then config, then the environment): ``WEBHOOK_HOST`` (127.0.0.1),
``WEBHOOK_PORT`` → ``PORT`` → 8788, ``WEBHOOK_PATH`` (``/``), ``WEBHOOK_MAX_BODY_BYTES``
(1 MiB), ``WEBHOOK_ALLOW_UNSIGNED`` (listening off loopback needs a secret unless true),
``WEBHOOK_SIGNATURE_WINDOW_SECONDS`` (300; 1 to 3600), ``WEBHOOK_ALLOW_BODY_SIGNATURE``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from tools_base._connector import ConnectorContext, ConnectorEvent, TextMessage
from tools_base.connectors import _http, _replay, _reply

DEFAULT_PORT = 8788
DEFAULT_EVENT = "webhook_message"
DEFAULT_INSTANCE_KEY = "webhook:default"
DEFAULT_SIGNATURE_HEADER = "X-Goondan-Signature"
TIMESTAMP_HEADER = "X-Goondan-Timestamp"
DELIVERY_HEADER = "X-Goondan-Delivery"


def expected_signature(secret: str, body: bytes, timestamp: str | None) -> str:
    """The hex HMAC-SHA256 under ``secret`` of ``<timestamp>.<body>``, or of ``body`` alone
    when ``timestamp`` is ``None`` (the body-only scheme)."""
    if timestamp is None:
        return _http.hmac_sha256_hex(secret, body)
    return _http.hmac_sha256_hex(secret, timestamp.encode(), b".", body)


def signature_matches(
    body: bytes, signature: str, secret: str, timestamp: str | None = None
) -> bool:
    """Whether ``signature`` (hex, optionally ``sha256=``-prefixed) signs ``timestamp`` and
    ``body`` (``body`` alone when ``timestamp`` is ``None``)."""
    given = signature.strip().removeprefix("sha256=").lower()
    return _http.same_text(given, expected_signature(secret, body, timestamp))


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    *,
    signature_header: str,
    window: int,
    allow_body_signature: bool,
    now: float,
) -> tuple[str, float] | str:
    """A signed request's signature and the Unix second until which it must be remembered,
    or why it is refused."""
    signature = headers.get(signature_header, "").strip()
    if not signature:
        return "no signature"
    raw = headers.get(TIMESTAMP_HEADER)
    if raw is None:
        if not allow_body_signature:
            return f"no {TIMESTAMP_HEADER}"
        if not signature_matches(body, signature, secret):
            return "wrong signature"
        return expected_signature(secret, body, None), now + _replay.UNTIMED_SECONDS
    timestamp = _replay.unix_seconds(raw)
    if timestamp is None:
        return f"{TIMESTAMP_HEADER} is not a Unix time"
    if not _replay.within(timestamp, now, window):
        return "timestamp outside the window"
    if not signature_matches(body, signature, secret, raw.strip()):
        return "wrong signature"
    expected = expected_signature(secret, body, raw.strip())
    return expected, timestamp + window + _replay.MARGIN_SECONDS


def event_from_payload(payload: dict[str, Any]) -> ConnectorEvent | None:
    """The event a payload describes, or ``None`` when it has no text."""
    text = _http.text_of(payload.get("text")) or _http.text_of(payload.get("message"))
    if text is None:
        return None
    name = _http.text_of(payload.get("event")) or _http.text_of(payload.get("name"))
    key = _http.text_of(payload.get("instanceKey"))
    properties: dict[str, str] = {}
    for prop, value in _http.mapping_of(payload.get("properties")).items():
        if isinstance(value, bool):
            properties[prop] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            properties[prop] = str(value)
    return ConnectorEvent(
        name=name or DEFAULT_EVENT,
        message=TextMessage(text),
        instance_key=key or DEFAULT_INSTANCE_KEY,
        properties=properties,
    )


async def run(ctx: ConnectorContext) -> None:
    """Serve the webhook until cancelled."""
    listen = _http.listen_settings(ctx, "WEBHOOK", DEFAULT_PORT)
    secret = ctx.setting("signingSecret", "WEBHOOK_SIGNING_SECRET")
    header = ctx.setting("WEBHOOK_SIGNATURE_HEADER") or DEFAULT_SIGNATURE_HEADER
    window = _replay.window_setting(ctx, "WEBHOOK_SIGNATURE_WINDOW_SECONDS")
    allow_body_signature = _http.flag(ctx.setting("WEBHOOK_ALLOW_BODY_SIGNATURE"))
    _http.require_secret_off_loopback(
        listen,
        secret,
        what="a signing secret (secrets.signingSecret)",
        allow_setting="WEBHOOK_ALLOW_UNSIGNED",
        allowed=_http.flag(ctx.setting("WEBHOOK_ALLOW_UNSIGNED")),
    )
    deliveries = _replay.Deliveries.open(ctx)
    reply_settings = _reply.read_reply_settings(ctx, secret)
    replier = None
    if reply_settings is not None and secret is not None:
        replier = _reply.Replier(ctx, reply_settings, secret, header)

    async def handle(request: _http.Inbound) -> Response:
        now = time.time()
        keys: list[str] = []
        until = now + _replay.UNTIMED_SECONDS
        if secret is not None:
            verdict = verify(
                request.headers,
                request.body,
                secret,
                signature_header=header,
                window=window,
                allow_body_signature=allow_body_signature,
                now=now,
            )
            if isinstance(verdict, str):
                ctx.logger.warning("webhook signature rejected", reason=verdict)
                return _http.answer(401, error="missing, stale or invalid signature")
            signature, until = verdict
            keys.append("signature:" + signature)
        payload = _http.json_object(request.body)
        if payload is None:
            return _http.answer(400, error="the body must be a JSON object")
        event = event_from_payload(payload)
        if event is None:
            return _http.answer(422, error="the payload has no text (or message)")
        try:
            callback = reply_settings.callback_for(payload) if reply_settings else None
            if callback is None and _reply.REPLY_FIELD in payload:
                raise _reply.CallbackRefused("this Connection sends no replies (replyTo)")
        except _reply.CallbackRefused as exc:
            ctx.logger.warning("webhook callback refused", reason=str(exc))
            return _http.answer(422, error=str(exc))
        if callback is not None and replier is not None and not replier.has_room:
            return _http.answer(503, error="too many replies waiting; retry later")
        delivery = _http.text_of(request.headers.get(DELIVERY_HEADER))
        if delivery is not None:
            # A sender may retry one id, newly signed, for days; a signature alone needs
            # remembering only while a copy of it would pass the window.
            keys.append("delivery:" + delivery)
            until = max(until, now + _replay.UNTIMED_SECONDS)
        # The sender's id, else the signature: what its retry after a lost answer carries.
        taken = dataclasses.replace(event, delivery_id=keys[-1]) if keys else event

        async def accept() -> bool:
            if callback is not None and replier is not None:
                answer = await ctx.emit_awaiting_answer(taken)
                replier.start(answer, _reply.ReplyTo(taken, delivery, callback))
            else:
                await ctx.emit(taken)
            return True

        try:
            outcome = await _replay.accept_once(deliveries, keys, until=until, accept=accept)
        except ValueError as exc:
            return _http.answer(422, error=str(exc))
        if outcome is _replay.Outcome.REPLAY:
            return _http.answer(200, duplicate=True)
        return _http.answer(202, event=event.name, instanceKey=event.instance_key)

    try:
        await _http.serve(ctx, listen, handle, connector="webhook", signed=secret is not None)
    finally:
        if replier is not None:
            await replier.aclose()
