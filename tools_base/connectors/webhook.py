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
request must carry the hex HMAC-SHA256 of the raw body under it in ``X-Goondan-Signature``
(header name ``WEBHOOK_SIGNATURE_HEADER``), ``sha256=`` prefix optional; 401 otherwise.

Settings (secrets, then config, then the environment): ``WEBHOOK_HOST`` (127.0.0.1),
``WEBHOOK_PORT`` → ``PORT`` → 8788, ``WEBHOOK_PATH`` (``/``), ``WEBHOOK_MAX_BODY_BYTES``
(1 MiB), ``WEBHOOK_ALLOW_UNSIGNED`` (listening off loopback needs a secret unless true).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from tools_base._connector import ConnectorContext, ConnectorEvent, TextMessage
from tools_base.connectors import _http

DEFAULT_PORT = 8788
DEFAULT_EVENT = "webhook_message"
DEFAULT_INSTANCE_KEY = "webhook:default"
DEFAULT_SIGNATURE_HEADER = "X-Goondan-Signature"


def signature_matches(body: bytes, signature: str, secret: str) -> bool:
    """Whether ``signature`` (hex, optionally ``sha256=``-prefixed) signs ``body``."""
    given = signature.strip().removeprefix("sha256=").lower()
    return _http.same_text(given, _http.hmac_sha256_hex(secret, body))


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
    _http.require_secret_off_loopback(
        listen,
        secret,
        what="a signing secret (secrets.signingSecret)",
        allow_setting="WEBHOOK_ALLOW_UNSIGNED",
        allowed=_http.flag(ctx.setting("WEBHOOK_ALLOW_UNSIGNED")),
    )

    async def handle(request: _http.Inbound) -> Response:
        if secret is not None:
            signature = request.headers.get(header)
            if not signature or not signature_matches(request.body, signature, secret):
                ctx.logger.warning("webhook signature rejected", present=bool(signature))
                return _http.answer(401, error="missing or invalid signature")
        payload = _http.json_object(request.body)
        if payload is None:
            return _http.answer(400, error="the body must be a JSON object")
        event = event_from_payload(payload)
        if event is None:
            return _http.answer(422, error="the payload has no text (or message)")
        try:
            await ctx.emit(event)
        except ValueError as exc:
            return _http.answer(422, error=str(exc))
        return _http.answer(202, event=event.name, instanceKey=event.instance_key)

    await _http.serve(ctx, listen, handle, connector="webhook", signed=secret is not None)
