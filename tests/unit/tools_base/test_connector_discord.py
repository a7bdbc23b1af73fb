"""discord connector: interactions signed with a real Ed25519 key, over real sockets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.support.http_connector import HttpConnectorContext, run_until_error, serving
from tools_base import ConnectorError
from tools_base.connectors import discord

EVENTS = {"slash_command", "component_interaction"}


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def context(
    key: Ed25519PrivateKey | None,
    where: str = "secrets",
    state_dir: Path | None = None,
    **config: str,
) -> HttpConnectorContext:
    settings = {"DISCORD_PUBLIC_KEY": public_hex(key)} if key else {}
    if where == "config":
        return HttpConnectorContext(
            "DISCORD_WEBHOOK", config={**settings, **config}, declared=EVENTS, state_dir=state_dir
        )
    return HttpConnectorContext(
        "DISCORD_WEBHOOK", secrets=settings, config=config, declared=EVENTS, state_dir=state_dir
    )


def signed(key: Ed25519PrivateKey, body: bytes, timestamp: str | None = None) -> dict[str, str]:
    timestamp = timestamp or str(int(time.time()))
    return {
        "X-Signature-Ed25519": key.sign(timestamp.encode() + body).hex(),
        "X-Signature-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


async def interact(
    client: httpx2.AsyncClient, key: Ed25519PrivateKey, payload: dict[str, Any]
) -> httpx2.Response:
    body = json.dumps(payload).encode()
    return await client.post("/", content=body, headers=signed(key, body))


SLASH = {
    "id": "1111",
    "application_id": "2222",
    "type": 2,
    "token": "aW50ZXJhY3Rpb24tdG9rZW4",
    "channel_id": "C-42",
    "guild_id": "G-1",
    "member": {"user": {"id": "U-7", "username": "ferris"}},
    "data": {
        "name": "ask",
        "options": [
            {
                "name": "docs",
                "type": 1,
                "options": [
                    {"name": "question", "type": 3, "value": "how do I deploy?"},
                    {"name": "private", "type": 5, "value": True},
                ],
            }
        ],
    },
}


@pytest.mark.parametrize("where", ["secrets", "config"])
async def test_a_signed_ping_is_answered_pong(key: Ed25519PrivateKey, where: str) -> None:
    async with serving(discord.run, context(key, where)) as client:
        response = await interact(client, key, {"type": 1, "id": "p"})
        assert (response.status_code, response.json()) == (200, {"type": 1})


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(lambda key, body: {}, id="unsigned"),
        pytest.param(
            lambda key, body: signed(Ed25519PrivateKey.generate(), body), id="another-key"
        ),
        pytest.param(lambda key, body: signed(key, body + b" "), id="other-body"),
        pytest.param(
            lambda key, body: {**signed(key, body), "X-Signature-Timestamp": "1"},
            id="other-timestamp",
        ),
        pytest.param(
            lambda key, body: {**signed(key, body), "X-Signature-Ed25519": "zz"}, id="not-hex"
        ),
        # signed, but not now
        pytest.param(lambda key, body: signed(key, body, "1500000000"), id="2017"),
        pytest.param(lambda key, body: signed(key, body, str(int(time.time()) - 301)), id="stale"),
        pytest.param(lambda key, body: signed(key, body, str(int(time.time()) + 900)), id="future"),
        pytest.param(lambda key, body: signed(key, body, "9" * 5000), id="5000-digits"),
        pytest.param(lambda key, body: signed(key, body, "-1"), id="negative"),
    ],
)
async def test_unsigned_or_wrongly_signed_requests_are_401(
    key: Ed25519PrivateKey, headers: Any
) -> None:
    ctx = context(key)
    body = json.dumps({"type": 1}).encode()
    async with serving(discord.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers(key, body))).status_code == 401
        assert (await interact(client, key, SLASH)).status_code == 200
    assert (await ctx.next_event()).name == "slash_command"  # the forged ping emitted nothing


async def test_a_slash_command_is_deferred_and_emitted(key: Ed25519PrivateKey) -> None:
    ctx = context(key)
    async with serving(discord.run, ctx) as client:
        response = await interact(client, key, SLASH)
        assert (response.status_code, response.json()) == (200, {"type": 5})
    event = await ctx.next_event()
    assert event.name == "slash_command"
    assert event.instance_key == "discord:C-42"
    assert event.text() == "/ask docs question:how do I deploy? private:true"
    assert event.properties == {
        "interaction_id": "1111",
        "interaction_token": "aW50ZXJhY3Rpb24tdG9rZW4",
        "application_id": "2222",
        "channel_id": "C-42",
        "guild_id": "G-1",
        "user_id": "U-7",
        "username": "ferris",
        "command_name": "ask",
        "option_question": "how do I deploy?",
        "option_private": "true",
    }
    assert "aW50ZXJhY3Rpb24tdG9rZW4" not in ctx.log.text()


async def test_a_component_is_acknowledged_as_a_deferred_update(key: Ed25519PrivateKey) -> None:
    ctx = context(key)
    component = {
        "id": "3333",
        "type": 3,
        "channel": {"id": "DM-9"},
        "user": {"id": "U-8", "username": "dm-user"},
        "data": {"custom_id": "pick_color", "component_type": 3, "values": ["red", "blue"]},
    }
    async with serving(discord.run, ctx) as client:
        response = await interact(client, key, component)
        assert (response.status_code, response.json()) == (200, {"type": 6})
    event = await ctx.next_event()
    assert (event.name, event.instance_key, event.text()) == (
        "component_interaction",
        "discord:DM-9",
        "pick_color red blue",
    )
    assert event.properties["custom_id"] == "pick_color"
    assert event.properties["values"] == "red,blue"
    assert event.properties["user_id"] == "U-8"


async def test_autocomplete_other_types_and_bad_json(key: Ed25519PrivateKey) -> None:
    ctx = context(key)
    async with serving(discord.run, ctx) as client:
        auto = await interact(client, key, {"type": 4, "data": {"name": "ask"}})
        assert auto.json() == {"type": 8, "data": {"choices": []}}
        assert (await interact(client, key, {"type": 99})).status_code == 400
        bad = b"{nope"
        assert (await client.post("/", content=bad, headers=signed(key, bad))).status_code == 400
        # a malformed body that is not signed is refused for the signature first
        assert (await client.post("/", content=bad)).status_code == 401


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "DISCORD_PUBLIC_KEY is not set"),
        ({"DISCORD_PUBLIC_KEY": "not-hex"}, "64 hexadecimal characters"),
        ({"DISCORD_PUBLIC_KEY": "ab" * 31}, "64 hexadecimal characters"),
    ],
)
async def test_a_missing_or_bad_public_key_stops_the_start(
    settings: dict[str, str], message: str
) -> None:
    ctx = HttpConnectorContext("DISCORD_WEBHOOK", secrets=settings)
    error = await run_until_error(discord.run, ctx)
    assert isinstance(error, ConnectorError)
    assert message in str(error)


def test_without_cryptography_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric.ed25519", None)
    with pytest.raises(ConnectorError, match=r"goondan-py\[connectors\]"):
        discord.public_key("ab" * 32)


async def test_the_same_signed_interaction_four_times_is_one_event(key: Ed25519PrivateKey) -> None:
    ctx = context(key)
    body = json.dumps(SLASH).encode()
    headers = signed(key, body)
    async with serving(discord.run, ctx) as client:
        first = await client.post("/", content=body, headers=headers)
        assert (first.status_code, first.json()) == (200, {"type": 5})
        for _ in range(3):
            again = await client.post("/", content=body, headers=headers)
            assert again.status_code == 409
        # an old copy signed over a timestamp long gone, replayed: refused before anything else
        old = signed(key, body, "1500000000")
        assert (await client.post("/", content=body, headers=old)).status_code == 401
        assert (await interact(client, key, {**SLASH, "id": "1112"})).status_code == 200
    # in order: had a copy been emitted, it would come before the second interaction
    first_event, second_event = await ctx.next_event(), await ctx.next_event()
    assert first_event.properties["interaction_id"] == "1111"
    assert second_event.properties["interaction_id"] == "1112"


async def test_an_interaction_is_refused_by_the_next_run_of_the_connector(
    key: Ed25519PrivateKey, tmp_path: Path
) -> None:
    body = json.dumps(SLASH).encode()
    headers = signed(key, body)
    first = context(key, state_dir=tmp_path)
    async with serving(discord.run, first) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 200
    assert (await first.next_event()).name == "slash_command"
    second = context(key, state_dir=tmp_path)
    async with serving(discord.run, second) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 409
        # the same interaction signed again (a new timestamp): its id is what it is
        again = signed(key, body, str(int(time.time()) + 1))
        assert (await client.post("/", content=body, headers=again)).status_code == 409
        # pings carry no event: answered every time
        assert (await interact(client, key, {"type": 1, "id": "p"})).json() == {"type": 1}
        assert (await interact(client, key, {"type": 1, "id": "p"})).json() == {"type": 1}
    assert second.events.empty()


async def test_the_window_is_a_setting(key: Ed25519PrivateKey) -> None:
    ctx = context(key, DISCORD_SIGNATURE_WINDOW_SECONDS="20")
    body = json.dumps(SLASH).encode()
    async with serving(discord.run, ctx) as client:
        late = signed(key, body, str(int(time.time()) - 40))
        assert (await client.post("/", content=body, headers=late)).status_code == 401
        assert (await client.post("/", content=body, headers=signed(key, body))).status_code == 200
    assert (await ctx.next_event()).name == "slash_command"
    error = await run_until_error(discord.run, context(key, DISCORD_SIGNATURE_WINDOW_SECONDS="0"))
    assert isinstance(error, ConnectorError)
    assert "DISCORD_SIGNATURE_WINDOW_SECONDS" in str(error)
