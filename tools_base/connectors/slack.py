"""The ``slack`` connector: the Slack Events API as swarm events.

Point the Slack app's Event Subscriptions "Request URL" at ``SLACK_WEBHOOK_PATH`` (subscribe to
``app_mention`` and ``message.im``, plus ``message.channels`` for every channel message).

* ``url_verification`` is answered with its ``challenge`` (text/plain).
* ``app_mention`` → event ``app_mention``; ``message`` → event ``message_im``, as upstream
  (whatever the channel type; ``properties.channel_type`` tells). ``SLACK_MESSAGE_MODE``:
  ``all`` (default) takes both, ``mention`` only ``app_mention``; ``channel_and_threads`` takes
  both, like ``all`` (upstream's behaviour).
* Bot messages (``bot_id``, subtype ``bot_message``) and messages with neither text nor files
  are ignored.
* instanceKey ``slack:<channel>:<thread_ts or ts>``: one conversation per thread.
* Properties: ``channel_id``, ``ts``, ``thread_ts``, ``user_id``, ``team_id``, ``channel_type``,
  ``subtype``, ``event_id`` when present; files, attachments and image blocks add a line
  ``[image:<name>] <url>`` / ``[file:<name>] <url>`` each to the text, and
  ``attachment_count``, ``image_url``, ``file_url``, ``file_name`` (the first of each kind).

Every accepted request is answered 200 ``{"ok": true}`` at once (Slack retries after 3 s), the
event emitted behind it; ignored ones ``{"ok": true, "ignored": true}``.

With a signing secret (``secrets.SLACK_SIGNING_SECRET`` or ``secrets.signingSecret``) every
request, ``url_verification`` included, must carry a valid ``X-Slack-Signature``
(``v0=`` + hex HMAC-SHA256 of ``v0:<timestamp>:<body>``) with an ``X-Slack-Request-Timestamp``
(Unix seconds) within ``SLACK_SIGNATURE_WINDOW_SECONDS`` (300) of now; 401 otherwise.

Replays: an event taken is remembered by its ``event_id`` and its signature, on disk in the
Connection's state directory, for an hour (Slack retries for minutes, each retry newly signed)
or until its window is over if that is later; the same event again is answered 200
``{"ok": true, "ignored": true}`` and not emitted (Slack retries on anything but a 2xx).

Settings: ``SLACK_WEBHOOK_HOST`` (127.0.0.1), ``SLACK_WEBHOOK_PORT`` → ``PORT`` → 8787,
``SLACK_WEBHOOK_PATH`` (``/``), ``SLACK_WEBHOOK_MAX_BODY_BYTES`` (1 MiB), ``SLACK_MESSAGE_MODE``,
``SLACK_ALLOW_UNSIGNED`` (listening off loopback needs a secret unless true),
``SLACK_SIGNATURE_WINDOW_SECONDS`` (300; 1 to 3600).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any, Literal

from starlette.responses import PlainTextResponse, Response

from tools_base._connector import ConnectorContext, ConnectorError, ConnectorEvent, TextMessage
from tools_base.connectors import _http, _replay

DEFAULT_PORT = 8787
SIGNATURE_WINDOW_SECONDS = _replay.WINDOW_SECONDS
"""Slack's replay window by default: a timestamp further from now than this is refused."""
RETRY_SECONDS = 60 * 60
"""How long an ``event_id`` is remembered: longer than Slack goes on retrying one."""
MessageMode = Literal["mention", "all", "channel_and_threads"]
MESSAGE_MODES: tuple[MessageMode, ...] = ("mention", "all", "channel_and_threads")

_IMAGE_TYPES = frozenset(
    {"png", "jpg", "jpeg", "gif", "webp", "bmp", "svg", "tif", "tiff", "heic", "heif", "avif"}
)
_URL_KEYS = (
    "url_private_download",
    "url_private",
    "permalink_public",
    "permalink",
    "image_url",
    "thumb_url",
    "from_url",
    "original_url",
)


def expected_signature(body: bytes, timestamp: str, secret: str) -> str:
    """Slack's ``v0`` signature of ``body`` at ``timestamp``."""
    return "v0=" + _http.hmac_sha256_hex(secret, b"v0:", timestamp.encode(), b":", body)


def signature_matches(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    now: float,
    window: int = SIGNATURE_WINDOW_SECONDS,
) -> bool:
    """Whether ``signature`` is Slack's ``v0`` signature of ``body`` at ``timestamp``, and
    ``timestamp`` is a Unix time within ``window`` seconds of ``now``."""
    seconds = _replay.unix_seconds(timestamp)
    if seconds is None or not _replay.within(seconds, now, window):
        return False
    return _http.same_text(signature.strip(), expected_signature(body, timestamp.strip(), secret))


@dataclass(frozen=True, slots=True)
class _Attachment:
    kind: Literal["image", "file"]
    url: str
    name: str


def _url(record: dict[str, Any]) -> str | None:
    for key in _URL_KEYS:
        url = _http.text_of(record.get(key))
        if url is not None:
            return url
    return None


def _name(record: dict[str, Any], fallback: str) -> str:
    for key in ("title", "name", "alt_text", "id"):
        name = _http.text_of(record.get(key))
        if name is not None:
            return name
    return fallback


def _attachments(event: dict[str, Any]) -> list[_Attachment]:
    """Files, legacy attachments and image blocks, each once."""
    found = [
        *_files(_records(event.get("files"))),
        *_legacy(_records(event.get("attachments"))),
        *_image_blocks(_records(event.get("blocks"))),
    ]
    unique: dict[tuple[str, str], _Attachment] = {}
    for attachment in found:
        unique.setdefault((attachment.kind, attachment.url), attachment)
    return list(unique.values())


def _files(items: list[dict[str, Any]]) -> list[_Attachment]:
    found: list[_Attachment] = []
    for item in items:
        url = _url(item)
        if url is not None:
            mimetype = str(item.get("mimetype") or "").lower()
            filetype = str(item.get("filetype") or "").lower()
            image = mimetype.startswith("image/") or filetype in _IMAGE_TYPES
            found.append(_kind_of(image, url, _name(item, "image" if image else "file")))
    return found


def _legacy(items: list[dict[str, Any]]) -> list[_Attachment]:
    found: list[_Attachment] = []
    for item in items:
        url = _url(item)
        if url is not None:
            image = bool(
                _http.text_of(item.get("image_url")) or _http.text_of(item.get("thumb_url"))
            )
            found.append(_kind_of(image, url, _name(item, "image" if image else "attachment")))
    return found


def _kind_of(image: bool, url: str, name: str) -> _Attachment:
    return _Attachment("image" if image else "file", url, name)


def _image_blocks(blocks: list[dict[str, Any]]) -> list[_Attachment]:
    found: list[_Attachment] = []
    for block in blocks:
        if block.get("type") != "image":
            continue
        direct = _http.text_of(block.get("image_url"))
        if direct is not None:
            found.append(_Attachment("image", direct, _name(block, "image")))
            continue
        slack_file = _http.mapping_of(block.get("slack_file"))
        url = _url(slack_file)
        if url is not None:
            found.append(_Attachment("image", url, _name(slack_file, "image")))
    return found


def _records(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def event_from_callback(payload: dict[str, Any], mode: MessageMode) -> ConnectorEvent | None:
    """The event an Events API callback carries, or ``None`` when it is to be ignored."""
    event = _http.mapping_of(payload.get("event"))
    kind = event.get("type")
    if not _wanted(event, kind, mode):
        return None
    channel = _http.text_of(event.get("channel"))
    ts = _http.text_of(event.get("ts"))
    attachments = _attachments(event)
    text = _message_text(event, attachments)
    if channel is None or ts is None or not text:
        return None
    thread_ts = _http.text_of(event.get("thread_ts"))
    properties = {
        "channel_id": channel,
        "ts": ts,
        **_optional_properties(payload, event),
        **_attachment_properties(attachments),
    }
    return ConnectorEvent(
        name="app_mention" if kind == "app_mention" else "message_im",
        message=TextMessage(text),
        instance_key=f"slack:{channel}:{thread_ts or ts}",
        properties=properties,
    )


def _message_text(event: dict[str, Any], attachments: list[_Attachment]) -> str:
    """The event's text, then a line per attachment."""
    lines = [_http.text_of(event.get("text")) or ""]
    lines += [f"[{item.kind}:{item.name}] {item.url}" for item in attachments]
    return "\n".join(line for line in lines if line)


def _optional_properties(payload: dict[str, Any], event: dict[str, Any]) -> dict[str, str]:
    """The properties the callback may lack, those it has."""
    optional = {
        "thread_ts": _http.text_of(event.get("thread_ts")),
        "user_id": _http.text_of(event.get("user")),
        "team_id": _http.text_of(payload.get("team_id")) or _http.text_of(event.get("team")),
        "channel_type": _http.text_of(event.get("channel_type")),
        "subtype": _http.text_of(event.get("subtype")),
        "event_id": _http.text_of(payload.get("event_id")),
    }
    return {key: value for key, value in optional.items() if value is not None}


def _wanted(event: dict[str, Any], kind: object, mode: MessageMode) -> bool:
    """Whether the mode takes this kind of event, and a person (not a bot) wrote it."""
    if kind not in ("app_mention", "message") or (mode == "mention" and kind != "app_mention"):
        return False
    subtype = _http.text_of(event.get("subtype"))
    return subtype != "bot_message" and not _http.text_of(event.get("bot_id"))


def _attachment_properties(attachments: list[_Attachment]) -> dict[str, str]:
    """How many attachments, and the first image's and the first file's URL (and name)."""
    if not attachments:
        return {}
    properties = {"attachment_count": str(len(attachments))}
    image = next((item for item in attachments if item.kind == "image"), None)
    file = next((item for item in attachments if item.kind == "file"), None)
    if image is not None:
        properties["image_url"] = image.url
    if file is not None:
        properties["file_url"] = file.url
        properties["file_name"] = file.name
    return properties


def message_mode(value: str | None) -> MessageMode:
    """``SLACK_MESSAGE_MODE``, default ``all``; ConnectorError for an unknown mode."""
    mode = (value or "all").strip().lower()
    for known in MESSAGE_MODES:
        if mode == known:
            return known
    raise ConnectorError(
        f"SLACK_MESSAGE_MODE must be one of {', '.join(MESSAGE_MODES)}, got {value!r}"
    )


async def run(ctx: ConnectorContext) -> None:
    """Serve the Events API endpoint until cancelled."""
    listen = _http.listen_settings(ctx, "SLACK_WEBHOOK", DEFAULT_PORT)
    secret = ctx.setting("SLACK_SIGNING_SECRET", "signingSecret")
    mode = message_mode(ctx.setting("SLACK_MESSAGE_MODE"))
    _http.require_secret_off_loopback(
        listen,
        secret,
        what="a signing secret (secrets.SLACK_SIGNING_SECRET)",
        allow_setting="SLACK_ALLOW_UNSIGNED",
        allowed=_http.flag(ctx.setting("SLACK_ALLOW_UNSIGNED")),
    )
    window = _replay.window_setting(ctx, "SLACK_SIGNATURE_WINDOW_SECONDS")
    outbox = _http.Outbox(ctx)
    deliveries = _replay.Deliveries.open(ctx)

    async def handle(request: _http.Inbound) -> Response:
        now = time.time()
        keys: list[str] = []
        until = now + RETRY_SECONDS
        if secret is not None:
            signature = request.headers.get("x-slack-signature", "")
            timestamp = request.headers.get("x-slack-request-timestamp", "").strip()
            if not (
                signature
                and timestamp
                and signature_matches(request.body, timestamp, signature, secret, now, window)
            ):
                ctx.logger.warning("slack signature rejected", present=bool(signature))
                return _http.answer(401, error="missing, stale or invalid signature")
            keys.append("signature:" + signature.strip())
            until = max(until, int(timestamp) + window + _replay.MARGIN_SECONDS)
        payload = _http.json_object(request.body)
        if payload is None:
            return _http.answer(400, error="the body must be a JSON object")
        if payload.get("type") == "url_verification":
            return PlainTextResponse(_http.text_of(payload.get("challenge")) or "")
        event = event_from_callback(payload, mode)
        if event is None:
            return _http.answer(200, ignored=True)
        event_id = _http.text_of(payload.get("event_id"))
        if event_id is not None:
            keys.append("event:" + event_id)
        if keys:  # Slack retries an event_id newly signed: the id, else the signature
            event = dataclasses.replace(event, delivery_id=keys[-1])
        outcome = await _replay.accept_once(
            deliveries, keys, until=until, accept=functools.partial(outbox.accept, event)
        )
        if outcome is _replay.Outcome.REPLAY:
            return _http.answer(200, ignored=True)
        if outcome is _replay.Outcome.REFUSED:
            return _http.answer(503, error="too many events waiting; retry later")
        return _http.answer(200)

    await _http.serve(ctx, listen, handle, connector="slack", signed=secret is not None, mode=mode)
