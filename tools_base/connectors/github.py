"""The ``github`` connector: repository webhooks as swarm events.

Add a webhook to the repository (or organisation) with payload URL ``GITHUB_WEBHOOK_PATH``,
content type ``application/json`` (``application/x-www-form-urlencoded`` works too) and a
secret. ``X-GitHub-Event`` maps to events:

============== ======================== =============================================
GitHub event   swarm event              text
============== ======================== =============================================
push           ``github_push``          ``push to <ref> by <sender>: <head commit>``
pull_request   ``github_pull_request``  ``pull request #<n> <action> by <sender>: <title>``
issues         ``github_issue``         ``issue #<n> <action> by <sender>: <title>``
issue_comment  ``github_issue_comment`` ``comment on #<n> by <sender>: <body>``
============== ======================== =============================================

(each followed by the HTML URL on its own line when the payload has one). instanceKey
``github:<owner/repo>``. Properties: ``event``, ``action``, ``repo``, ``sender``, ``number``,
``ref``, ``url``, ``delivery`` (the ``X-GitHub-Delivery`` id), those present.

An emitted event is answered 202 ``{"ok": true}`` at once, emitted behind it; every other
GitHub event (``ping`` included) 204, with nothing emitted.

With a secret (``secrets.signingSecret`` or ``GITHUB_WEBHOOK_SECRET``) every request must carry
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`` (401 if it is missing or
wrong) and an ``X-GitHub-Delivery`` id (400 without one).

Replays: GitHub signs no timestamp, so a delivery is known by its ``X-GitHub-Delivery`` id and
by its signature (the id is not signed: a copy could carry a new one). A delivery that led to
an event is remembered, on disk in the Connection's state directory, for seven days (GitHub's
"Redeliver" reaches three days back); one with the same id or the same signature is answered
204 with no event, as a redelivery should be (GitHub stops retrying on a 2xx). Without a
secret only the id is remembered, when there is one.

Settings: ``GITHUB_WEBHOOK_HOST`` (127.0.0.1), ``GITHUB_WEBHOOK_PORT`` → ``PORT`` → 8789,
``GITHUB_WEBHOOK_PATH`` (``/``), ``GITHUB_WEBHOOK_MAX_BODY_BYTES`` (1 MiB),
``GITHUB_ALLOW_UNSIGNED`` (listening off loopback needs a secret unless true).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from starlette.responses import Response

from tools_base._connector import ConnectorContext, ConnectorEvent, TextMessage
from tools_base.connectors import _http, _replay

DEFAULT_PORT = 8789
EVENTS = {
    "push": "github_push",
    "pull_request": "github_pull_request",
    "issues": "github_issue",
    "issue_comment": "github_issue_comment",
}
"""``X-GitHub-Event`` → the swarm event; any other GitHub event is ignored."""


def signature_matches(body: bytes, signature: str, secret: str) -> bool:
    """Whether ``signature`` is ``sha256=`` + the hex HMAC-SHA256 of ``body`` under ``secret``."""
    return _http.same_text(signature.strip(), "sha256=" + _http.hmac_sha256_hex(secret, body))


def payload_of(request: _http.Inbound) -> dict[str, Any] | None:
    """The JSON object sent: the body itself, or (GitHub's form content type) its ``payload``
    field. A JSON body labelled as a form (what ``curl -d`` sends) is read as JSON."""
    payload = _http.json_object(request.body)
    if payload is not None or request.content_type != "application/x-www-form-urlencoded":
        return payload
    try:
        fields = parse_qs(request.body.decode()).get("payload")
    except UnicodeDecodeError:
        return None
    return _http.json_object(fields[0].encode()) if fields else None


def _number(value: object) -> str | None:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else None


class _Summary(NamedTuple):
    """One delivery's line of text and the fields it gives."""

    text: str
    url: str | None
    number: str | None = None
    ref: str | None = None


def event_from_payload(
    github_event: str, payload: dict[str, Any], delivery: str | None = None
) -> ConnectorEvent | None:
    """The swarm event for one GitHub delivery, or ``None`` for an event not mapped."""
    name = EVENTS.get(github_event)
    if name is None:
        return None
    text = _http.text_of
    repo = text(_http.mapping_of(payload.get("repository")).get("full_name"))
    sender = text(_http.mapping_of(payload.get("sender")).get("login"))
    action = text(payload.get("action"))
    by = f" by {sender}" if sender else ""
    if github_event == "push":
        summary = _push(payload, by)
    elif github_event == "issue_comment":
        summary = _comment(payload, by)
    else:
        summary = _item(github_event, payload, action, by)
    found = {
        "event": github_event,
        "action": action,
        "repo": repo,
        "sender": sender,
        "number": summary.number,
        "ref": summary.ref,
        "url": summary.url,
        "delivery": delivery,
    }
    url = summary.url
    return ConnectorEvent(
        name=name,
        message=TextMessage(summary.text + (f"\n{url}" if url else "")),
        instance_key=f"github:{repo or github_event}",
        properties={key: value for key, value in found.items() if value is not None},
    )


def _push(payload: dict[str, Any], by: str) -> _Summary:
    text = _http.text_of
    ref = text(payload.get("ref"))
    head = _http.mapping_of(payload.get("head_commit"))
    url = text(payload.get("compare")) or text(head.get("url"))
    message = text(head.get("message"))
    summary = f"push to {ref or 'unknown ref'}{by}" + (f": {message}" if message else "")
    return _Summary(summary, url, ref=ref)


def _comment(payload: dict[str, Any], by: str) -> _Summary:
    text = _http.text_of
    issue = _http.mapping_of(payload.get("issue"))
    comment = _http.mapping_of(payload.get("comment"))
    number = _number(issue.get("number"))
    url = text(comment.get("html_url")) or text(issue.get("html_url"))
    body = text(comment.get("body"))
    summary = f"comment on #{number or '?'}{by}" + (f": {body}" if body else "")
    return _Summary(summary, url, number=number)


def _item(github_event: str, payload: dict[str, Any], action: str | None, by: str) -> _Summary:
    """An issue or pull request event."""
    text = _http.text_of
    key = "pull_request" if github_event == "pull_request" else "issue"
    item = _http.mapping_of(payload.get(key))
    number = _number(item.get("number"))
    title = text(item.get("title"))
    noun = "pull request" if key == "pull_request" else "issue"
    summary = f"{noun} #{number or '?'} {action or 'updated'}{by}" + (f": {title}" if title else "")
    return _Summary(summary, text(item.get("html_url")), number=number)


async def run(ctx: ConnectorContext) -> None:
    """Serve the webhook endpoint until cancelled."""
    listen = _http.listen_settings(ctx, "GITHUB_WEBHOOK", DEFAULT_PORT)
    secret = ctx.setting("signingSecret", "GITHUB_WEBHOOK_SECRET")
    _http.require_secret_off_loopback(
        listen,
        secret,
        what="a webhook secret (secrets.signingSecret)",
        allow_setting="GITHUB_ALLOW_UNSIGNED",
        allowed=_http.flag(ctx.setting("GITHUB_ALLOW_UNSIGNED")),
    )
    outbox = _http.Outbox(ctx)
    deliveries = _replay.Deliveries.open(ctx)

    async def handle(request: _http.Inbound) -> Response:
        keys: list[str] = []
        delivery = _http.text_of(request.headers.get("x-github-delivery", "").strip())
        if secret is not None:
            signature = request.headers.get("x-hub-signature-256", "")
            if not signature or not signature_matches(request.body, signature, secret):
                ctx.logger.warning("github signature rejected", present=bool(signature))
                return _http.answer(401, error="missing or invalid X-Hub-Signature-256")
            if delivery is None:
                ctx.logger.warning("github delivery without X-GitHub-Delivery refused")
                return _http.answer(400, error="missing X-GitHub-Delivery")
            keys.append("signature:" + signature.strip())
        if delivery is not None:
            keys.append("delivery:" + delivery)
        payload = payload_of(request)
        if payload is None:
            return _http.answer(400, error="the body must be a JSON object")
        github_event = request.headers.get("x-github-event", "").strip()
        event = event_from_payload(github_event, payload, delivery)
        if event is None:
            return Response(status_code=204)
        if keys:  # a redelivery keeps its X-GitHub-Delivery: the id, else the signature
            event = dataclasses.replace(event, delivery_id=keys[-1])
        outcome = await _replay.accept_once(
            deliveries,
            keys,
            until=time.time() + _replay.UNTIMED_SECONDS,
            accept=functools.partial(outbox.accept, event),
        )
        if outcome is _replay.Outcome.REPLAY:
            return Response(status_code=204)
        if outcome is _replay.Outcome.REFUSED:
            return _http.answer(503, error="too many events waiting; retry later")
        return _http.answer(202)

    await _http.serve(ctx, listen, handle, connector="github", signed=secret is not None)
