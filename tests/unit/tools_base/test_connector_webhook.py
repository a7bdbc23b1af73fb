"""webhook connector: payload → event, and the HMAC-SHA256 signature, over real sockets."""

from __future__ import annotations

import json

import pytest

from tests.support.http_connector import HttpConnectorContext, hmac_hex, serving
from tools_base import TextMessage
from tools_base.connectors import webhook

SECRET = "whsec-7c1d0e55-very-secret"


def context(secret: str | None = None, **config: str) -> HttpConnectorContext:
    return HttpConnectorContext(
        "WEBHOOK",
        config=config,
        secrets={"signingSecret": secret} if secret else {},
        declared={"webhook_message", "order_created"},
    )


async def test_a_payload_becomes_an_event_answered_202_once_emitted() -> None:
    ctx = context()
    payload = {
        "event": "order_created",
        "instanceKey": "shop:42",
        "message": "order 42 placed",
        "properties": {"total": 12.5, "paid": True, "ref": "A-1", "items": [1], "meta": {"a": 1}},
    }
    async with serving(webhook.run, ctx) as client:
        response = await client.post("/", json=payload)
        assert response.status_code == 202
        assert response.json() == {"ok": True, "event": "order_created", "instanceKey": "shop:42"}
    event = await ctx.next_event()
    assert event.name == "order_created"
    assert event.instance_key == "shop:42"
    assert event.message == TextMessage("order 42 placed")
    assert event.properties == {"total": "12.5", "paid": "true", "ref": "A-1"}


async def test_defaults_name_and_instance_key_and_prefers_text() -> None:
    ctx = context()
    async with serving(webhook.run, ctx) as client:
        assert (
            await client.post("/", json={"text": "hi", "message": "ignored"})
        ).status_code == 202
        assert (
            await client.post("/", json={"name": "order_created", "text": "b"})
        ).status_code == 202
    first, second = await ctx.next_event(), await ctx.next_event()
    assert (first.name, first.instance_key, first.text(), first.properties) == (
        "webhook_message",
        "webhook:default",
        "hi",
        {},
    )
    assert second.name == "order_created"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"event": "nope", "text": "x"}, "not declared"),
        ({"properties": {"a": "b"}}, "no text"),
        ({"text": ""}, "no text"),
    ],
)
async def test_an_event_that_cannot_be_emitted_is_422(
    payload: dict[str, object], error: str
) -> None:
    ctx = context()
    async with serving(webhook.run, ctx) as client:
        response = await client.post("/", json=payload)
        assert response.status_code == 422
        assert error in response.json()["error"]
        assert (await client.post("/", json={"text": "next"})).status_code == 202
    assert (await ctx.next_event()).text() == "next"


@pytest.mark.parametrize("prefix", ["", "sha256="])
async def test_a_signed_request_is_taken(prefix: str) -> None:
    ctx = context(SECRET)
    body = json.dumps({"text": "signed"}).encode()
    async with serving(webhook.run, ctx) as client:
        headers = {"X-Goondan-Signature": prefix + hmac_hex(SECRET, body)}
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
    assert (await ctx.next_event()).text() == "signed"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Goondan-Signature": ""},
        {"X-Goondan-Signature": hmac_hex("another secret", b'{"text": "forged"}')},
        {"X-Goondan-Signature": hmac_hex(SECRET, b'{"text": "something else"}')},
        {"X-Goondan-Signature": "sha1=" + hmac_hex(SECRET, b'{"text": "forged"}')},
        {"X-Other-Signature": hmac_hex(SECRET, b'{"text": "forged"}')},
    ],
)
async def test_unsigned_or_wrongly_signed_requests_are_401(headers: dict[str, str]) -> None:
    ctx = context(SECRET)
    async with serving(webhook.run, ctx) as client:
        response = await client.post("/", content=b'{"text": "forged"}', headers=headers)
        assert response.status_code == 401
        good = b'{"text": "genuine"}'
        sig = {"X-Goondan-Signature": hmac_hex(SECRET, good)}
        assert (await client.post("/", content=good, headers=sig)).status_code == 202
    assert (await ctx.next_event()).text() == "genuine"  # the forged one never arrived
    assert SECRET not in ctx.log.text()
    assert hmac_hex(SECRET, good) not in ctx.log.text()


async def test_the_signature_header_is_configurable_and_the_secret_may_come_from_config() -> None:
    ctx = HttpConnectorContext(
        "WEBHOOK",
        config={"WEBHOOK_SIGNATURE_HEADER": "X-Hook-Sig", "WEBHOOK_SIGNING_SECRET": SECRET},
    )
    body = b'{"text": "custom header"}'
    async with serving(webhook.run, ctx) as client:
        wrong = {"X-Goondan-Signature": hmac_hex(SECRET, body)}
        assert (await client.post("/", content=body, headers=wrong)).status_code == 401
        right = {"X-Hook-Sig": hmac_hex(SECRET, body)}
        assert (await client.post("/", content=body, headers=right)).status_code == 202
    assert (await ctx.next_event()).text() == "custom header"
    assert ctx.log.records[0][2]["signed"] is True


def test_signature_check_without_a_server() -> None:
    body = b"raw bytes, not re-serialised"
    good = hmac_hex(SECRET, body)
    assert webhook.signature_matches(body, good, SECRET)
    assert webhook.signature_matches(body, "sha256=" + good.upper(), SECRET)
    assert not webhook.signature_matches(body + b" ", good, SECRET)
    assert not webhook.signature_matches(body, good[:-1], SECRET)
