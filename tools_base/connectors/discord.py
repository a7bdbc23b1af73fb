"""The ``discord`` connector: a Discord application's interactions endpoint.

Set the application's "Interactions Endpoint URL" to ``DISCORD_WEBHOOK_PATH``. Discord signs
every request with Ed25519; the application's public key (``DISCORD_PUBLIC_KEY``, hex, from
secrets or config) is required, and a request whose ``X-Signature-Ed25519`` does not sign
``X-Signature-Timestamp`` + body, or whose timestamp (Unix seconds) is further than
``DISCORD_SIGNATURE_WINDOW_SECONDS`` (300) from now, is answered 401 (Discord checks that too
before it saves the URL).

Replays: an interaction taken is remembered by its ``id``, on disk in the Connection's state
directory, until its window is over; the same interaction again is answered 409 and not
emitted (Discord never sends one twice, so a second one is a copy).

* PING (type 1) → ``{"type": 1}``.
* Slash command (type 2) → event ``slash_command``, text ``/<name> [<sub> ...] [<opt>:<value>
  ...]``, answered ``{"type": 5}`` (deferred: Discord shows "thinking…" until a follow-up).
* Message component (type 3: buttons, selects) → event ``component_interaction``, text the
  ``custom_id`` (and selected values), answered ``{"type": 6}`` (deferred update).
* Autocomplete (type 4) → ``{"type": 8, "data": {"choices": []}}``; any other type 400.

instanceKey ``discord:<channelId>``. Properties: ``interaction_id``, ``interaction_token``
(valid 15 minutes: what a follow-up message needs), ``application_id``, ``channel_id``,
``guild_id``, ``user_id``, ``username``, ``command_name``, ``option_<name>`` per option,
``custom_id``, ``values`` (comma-separated), those present.

Settings: ``DISCORD_WEBHOOK_HOST`` (127.0.0.1), ``DISCORD_WEBHOOK_PORT`` → ``PORT`` → 8790,
``DISCORD_WEBHOOK_PATH`` (``/``), ``DISCORD_WEBHOOK_MAX_BODY_BYTES`` (1 MiB),
``DISCORD_SIGNATURE_WINDOW_SECONDS`` (300; 1 to 3600). Needs the ``cryptography`` package
(``pip install 'goondan-py[connectors]'``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from tools_base._connector import ConnectorContext, ConnectorError, ConnectorEvent, TextMessage
from tools_base.connectors import _http, _replay

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

DEFAULT_PORT = 8790
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE = 1, 2, 3, 4
"""Interaction types (Discord's numbering)."""
PONG, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE, AUTOCOMPLETE_RESULT = 1, 5, 6, 8
"""Interaction response types (Discord's numbering)."""
_SUBCOMMAND_TYPES = (1, 2)


def public_key(hex_key: str | None) -> Ed25519PublicKey:
    """The application's Ed25519 public key from its hex form, or ConnectorError."""
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise ConnectorError(
            "the discord connector needs the cryptography package: "
            "pip install 'goondan-py[connectors]'"
        ) from None
    if not hex_key:
        raise ConnectorError(
            "DISCORD_PUBLIC_KEY is not set: copy the application's public key from the "
            "Discord developer portal into the Connection's secrets or config"
        )
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key.strip()))
    except ValueError:
        raise ConnectorError("DISCORD_PUBLIC_KEY must be 64 hexadecimal characters") from None


def signature_matches(key: Ed25519PublicKey, body: bytes, timestamp: str, signature: str) -> bool:
    """Whether ``signature`` (hex) is ``key``'s signature of ``timestamp`` + ``body``."""
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(bytes.fromhex(signature), timestamp.encode() + body)
    except (ValueError, InvalidSignature):
        return False
    return True


def _options(options: object, words: list[str], properties: dict[str, str]) -> None:
    """Flatten command options: subcommands into ``words``, values into both."""
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, dict) or not _http.text_of(option.get("name")):
            continue
        name = option["name"]
        if option.get("type") in _SUBCOMMAND_TYPES:
            words.append(name)
            _options(option.get("options"), words, properties)
        elif "value" in option:
            value = option["value"]
            shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
            words.append(f"{name}:{shown}")
            properties[f"option_{name}"] = shown


def event_from_interaction(interaction: dict[str, Any]) -> ConnectorEvent | None:
    """The event of a slash command or component interaction, else ``None``."""
    kind = interaction.get("type")
    if kind not in (APPLICATION_COMMAND, MESSAGE_COMPONENT):
        return None
    data = _http.mapping_of(interaction.get("data"))
    channel, found = _interaction_fields(interaction)
    properties = {key: value for key, value in found.items() if value is not None}
    if kind == APPLICATION_COMMAND:
        event_name, message = "slash_command", _command(data, properties)
    else:
        event_name, message = "component_interaction", _component(data, properties)
    key = channel or found["interaction_id"] or "unknown"
    return ConnectorEvent(
        name=event_name,
        message=TextMessage(message or event_name),
        instance_key=f"discord:{key}",
        properties=properties,
    )


def _interaction_fields(interaction: dict[str, Any]) -> tuple[str | None, dict[str, str | None]]:
    """The channel, and the fields every interaction may give."""
    text = _http.text_of
    channel = text(interaction.get("channel_id")) or text(
        _http.mapping_of(interaction.get("channel")).get("id")
    )
    user = _http.mapping_of(interaction.get("user")) or _http.mapping_of(
        _http.mapping_of(interaction.get("member")).get("user")
    )
    return channel, {
        "interaction_id": text(interaction.get("id")),
        "interaction_token": text(interaction.get("token")),
        "application_id": text(interaction.get("application_id")),
        "channel_id": channel,
        "guild_id": text(interaction.get("guild_id")),
        "user_id": text(user.get("id")),
        "username": text(user.get("username")),
    }


def _command(data: dict[str, Any], properties: dict[str, str]) -> str:
    """A slash command's text (``/name word option:value``); its name and options added to
    ``properties``."""
    name = _http.text_of(data.get("name")) or "command"
    properties["command_name"] = name
    words = [f"/{name}"]
    _options(data.get("options"), words, properties)
    return " ".join(words)


def _component(data: dict[str, Any], properties: dict[str, str]) -> str:
    """A component interaction's text (its ``custom_id`` and values); both added to
    ``properties``."""
    custom_id = _http.text_of(data.get("custom_id")) or ""
    properties["custom_id"] = custom_id
    values = [str(v) for v in data.get("values") or [] if isinstance(v, str | int | float)]
    if values:
        properties["values"] = ",".join(values)
    return custom_id + (f" {' '.join(values)}" if values else "")


async def run(ctx: ConnectorContext) -> None:
    """Serve the interactions endpoint until cancelled."""
    listen = _http.listen_settings(ctx, "DISCORD_WEBHOOK", DEFAULT_PORT)
    key = public_key(ctx.setting("DISCORD_PUBLIC_KEY", "publicKey"))
    window = _replay.window_setting(ctx, "DISCORD_SIGNATURE_WINDOW_SECONDS")
    outbox = _http.Outbox(ctx)
    deliveries = _replay.Deliveries.open(ctx)

    async def handle(request: _http.Inbound) -> Response:
        signature = request.headers.get("x-signature-ed25519", "").strip()
        raw_timestamp = request.headers.get("x-signature-timestamp", "").strip()
        timestamp = _replay.unix_seconds(raw_timestamp)
        if not (
            signature
            and timestamp is not None
            and _replay.within(timestamp, time.time(), window)
            and signature_matches(key, request.body, raw_timestamp, signature)
        ):
            ctx.logger.warning("discord signature rejected", present=bool(signature))
            return _http.answer(401, error="invalid request signature")
        interaction = _http.json_object(request.body)
        if interaction is None:
            return _http.answer(400, error="the body must be a JSON object")
        kind = interaction.get("type")
        if kind == PING:
            return JSONResponse({"type": PONG})
        if kind == AUTOCOMPLETE:
            return JSONResponse({"type": AUTOCOMPLETE_RESULT, "data": {"choices": []}})
        event = event_from_interaction(interaction)
        if event is None:
            return _http.answer(400, error=f"unsupported interaction type {kind!r}")
        # The id is in the signed body; without one, the signature is what this request is.
        interaction_id = _http.text_of(interaction.get("id"))
        keys = [
            "interaction:" + interaction_id if interaction_id else "signature:" + signature.lower()
        ]
        until = timestamp + window + _replay.MARGIN_SECONDS
        outcome = await _replay.accept_once(
            deliveries,
            keys,
            until=until,
            accept=functools.partial(
                outbox.accept, dataclasses.replace(event, delivery_id=keys[0])
            ),
        )
        if outcome is _replay.Outcome.REPLAY:
            return _http.answer(409, error="interaction already received")
        if outcome is _replay.Outcome.REFUSED:
            return _http.answer(503, error="too many events waiting; retry later")
        deferred = (
            DEFERRED_CHANNEL_MESSAGE if kind == APPLICATION_COMMAND else DEFERRED_UPDATE_MESSAGE
        )
        return JSONResponse({"type": deferred})

    await _http.serve(ctx, listen, handle, connector="discord")
