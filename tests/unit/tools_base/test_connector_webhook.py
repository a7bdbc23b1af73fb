"""webhook connector: payload → event, the timestamped HMAC-SHA256 signature and its window,
and replays refused, over real sockets."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.support.http_connector import (
    HttpConnectorContext,
    hmac_hex,
    run_until_error,
    serving,
)
from tools_base import ConnectorError, TextMessage
from tools_base.connectors import webhook

SECRET = "whsec-7c1d0e55-very-secret"


def context(
    secret: str | None = None, state_dir: Path | None = None, **config: str
) -> HttpConnectorContext:
    return HttpConnectorContext(
        "WEBHOOK",
        config=config,
        secrets={"signingSecret": secret} if secret else {},
        declared={"webhook_message", "order_created"},
        state_dir=state_dir,
    )


def signed(
    body: bytes,
    *,
    at: int | str | None = None,
    secret: str = SECRET,
    prefix: str = "sha256=",
    delivery: str | None = None,
) -> dict[str, str]:
    """What a sender adds: ``X-Goondan-Timestamp`` and the HMAC of ``<timestamp>.<body>``."""
    timestamp = str(int(time.time()) if at is None else at)
    headers = {
        "X-Goondan-Timestamp": timestamp,
        "X-Goondan-Signature": prefix + hmac_hex(secret, timestamp.encode() + b"." + body),
    }
    if delivery is not None:
        headers["X-Goondan-Delivery"] = delivery
    return headers


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
        headers = signed(body, prefix=prefix)
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
    assert (await ctx.next_event()).text() == "signed"


FORGED = b'{"text": "forged"}'


def ago(seconds: int) -> int:
    return int(time.time()) - seconds


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(dict, id="unsigned"),
        pytest.param(lambda: {**signed(FORGED), "X-Goondan-Signature": ""}, id="blank"),
        pytest.param(lambda: signed(FORGED, secret="another secret"), id="another-secret"),
        pytest.param(lambda: signed(b'{"text": "something else"}'), id="other-body"),
        pytest.param(lambda: signed(FORGED, prefix="sha1="), id="sha1"),
        pytest.param(
            lambda: {"X-Other-Signature": signed(FORGED)["X-Goondan-Signature"]},
            id="other-header",
        ),
        pytest.param(
            lambda: {**signed(FORGED, at=ago(1)), "X-Goondan-Timestamp": str(ago(0))},
            id="other-timestamp",
        ),
        # the scheme before timestamps: refused unless WEBHOOK_ALLOW_BODY_SIGNATURE says so
        pytest.param(lambda: {"X-Goondan-Signature": hmac_hex(SECRET, FORGED)}, id="body-only"),
        pytest.param(lambda: signed(FORGED, at=ago(301)), id="stale"),
        pytest.param(lambda: signed(FORGED, at=ago(-330)), id="future"),  # clear of rounding
        pytest.param(lambda: signed(FORGED, at=1500000000), id="2017"),
        pytest.param(lambda: signed(FORGED, at="9" * 5000), id="5000-digits"),
        pytest.param(lambda: signed(FORGED, at="-1"), id="negative"),
        pytest.param(
            lambda: {
                **{name.encode(): value.encode() for name, value in signed(FORGED).items()},
                b"X-Goondan-Timestamp": "1²".encode("latin-1"),
            },
            id="not-ascii-digits",
        ),
    ],
)
async def test_unsigned_wrongly_signed_or_stale_requests_are_401(
    headers: Callable[[], Mapping[str, str] | Mapping[bytes, bytes]],
) -> None:
    ctx = context(SECRET)
    async with serving(webhook.run, ctx) as client:
        response = await client.post("/", content=FORGED, headers=headers())
        assert response.status_code == 401
        good = b'{"text": "genuine"}'
        # within the window, even four minutes old, it is taken
        sig = signed(good, at=ago(240))
        assert (await client.post("/", content=good, headers=sig)).status_code == 202
    assert (await ctx.next_event()).text() == "genuine"  # the forged one never arrived
    assert SECRET not in ctx.log.text()
    assert sig["X-Goondan-Signature"].removeprefix("sha256=") not in ctx.log.text()


async def test_the_signature_header_is_configurable_and_the_secret_may_come_from_config() -> None:
    ctx = HttpConnectorContext(
        "WEBHOOK",
        config={"WEBHOOK_SIGNATURE_HEADER": "X-Hook-Sig", "WEBHOOK_SIGNING_SECRET": SECRET},
    )
    body = b'{"text": "custom header"}'
    async with serving(webhook.run, ctx) as client:
        wrong = signed(body)
        assert (await client.post("/", content=body, headers=wrong)).status_code == 401
        headers = signed(body)
        right = {
            "X-Goondan-Timestamp": headers["X-Goondan-Timestamp"],
            "X-Hook-Sig": headers["X-Goondan-Signature"],
        }
        assert (await client.post("/", content=body, headers=right)).status_code == 202
    assert (await ctx.next_event()).text() == "custom header"
    assert ctx.log.records[0][2]["signed"] is True


def test_signature_check_without_a_server() -> None:
    body = b"raw bytes, not re-serialised"
    good = hmac_hex(SECRET, b"1700000000." + body)
    assert webhook.signature_matches(body, good, SECRET, "1700000000")
    assert webhook.signature_matches(body, "sha256=" + good.upper(), SECRET, "1700000000")
    assert not webhook.signature_matches(body, good, SECRET, "1700000001")
    assert not webhook.signature_matches(body, good, SECRET)  # not a body-only signature
    assert not webhook.signature_matches(body + b" ", good, SECRET, "1700000000")
    assert not webhook.signature_matches(body, good[:-1], SECRET, "1700000000")
    body_only = hmac_hex(SECRET, body)
    assert webhook.signature_matches(body, body_only, SECRET)
    assert not webhook.signature_matches(body, body_only, SECRET, "1700000000")


async def test_the_same_signed_request_four_times_is_one_event() -> None:
    ctx = context(SECRET)
    body = b'{"text": "deploy finished"}'
    headers = signed(body)
    async with serving(webhook.run, ctx) as client:
        first = await client.post("/", content=body, headers=headers)
        assert first.status_code == 202
        for _ in range(3):
            again = await client.post("/", content=body, headers=headers)
            assert (again.status_code, again.json()) == (200, {"ok": True, "duplicate": True})
        # another delivery id on the same signed request changes nothing: the id is not signed
        relabelled = await client.post(
            "/", content=body, headers={**headers, "X-Goondan-Delivery": "new"}
        )
        assert relabelled.status_code == 200
        fresh = b'{"text": "next"}'
        assert (await client.post("/", content=fresh, headers=signed(fresh))).status_code == 202
    # the events arrive in order: had a copy been emitted, it would come before "next"
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["deploy finished", "next"]


async def test_a_delivery_id_newly_signed_is_the_same_delivery() -> None:
    ctx = context(SECRET)
    body = b'{"text": "build 812 green"}'
    async with serving(webhook.run, ctx) as client:
        first = signed(body, at=ago(10), delivery="build-812")
        assert (await client.post("/", content=body, headers=first)).status_code == 202
        retry = signed(body, delivery="build-812")  # the sender's retry, signed again
        assert retry["X-Goondan-Signature"] != first["X-Goondan-Signature"]
        assert (await client.post("/", content=body, headers=retry)).json()["duplicate"] is True
        other = signed(body, delivery="build-813")
        assert (await client.post("/", content=body, headers=other)).status_code == 202
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["build 812 green"] * 2


async def test_unsigned_deliveries_are_told_apart_by_their_id() -> None:
    ctx = context()
    body = b'{"text": "no secret here"}'
    async with serving(webhook.run, ctx) as client:
        once = {"X-Goondan-Delivery": "d-1"}
        assert (await client.post("/", content=body, headers=once)).status_code == 202
        assert (await client.post("/", content=body, headers=once)).status_code == 200
        assert (await client.post("/", content=body)).status_code == 202  # no id: each taken
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["no secret here"] * 2


async def test_a_body_only_signature_is_taken_once_when_allowed() -> None:
    ctx = context(SECRET, WEBHOOK_ALLOW_BODY_SIGNATURE="true")
    body = b'{"text": "old sender"}'
    headers = {"X-Goondan-Signature": hmac_hex(SECRET, body)}
    async with serving(webhook.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
        assert (await client.post("/", content=body, headers=headers)).status_code == 200
        # a timestamp, when sent, must still be signed and fresh
        stale = signed(body, at=ago(301))
        assert (await client.post("/", content=body, headers=stale)).status_code == 401
        both = {**signed(body), "X-Goondan-Signature": hmac_hex(SECRET, body)}
        assert (await client.post("/", content=body, headers=both)).status_code == 401
    assert (await ctx.next_event()).text() == "old sender"
    assert ctx.events.empty()


async def test_the_window_is_a_setting() -> None:
    ctx = context(SECRET, WEBHOOK_SIGNATURE_WINDOW_SECONDS="30")
    body = b'{"text": "tight"}'
    async with serving(webhook.run, ctx) as client:
        late = signed(body, at=ago(60))
        assert (await client.post("/", content=body, headers=late)).status_code == 401
        assert (await client.post("/", content=body, headers=signed(body))).status_code == 202
    assert (await ctx.next_event()).text() == "tight"


@pytest.mark.parametrize("window", ["0", "3601", "five minutes", "-5"])
async def test_a_window_out_of_bounds_stops_the_start(window: str) -> None:
    error = await run_until_error(
        webhook.run, context(SECRET, WEBHOOK_SIGNATURE_WINDOW_SECONDS=window)
    )
    assert isinstance(error, ConnectorError)
    assert "WEBHOOK_SIGNATURE_WINDOW_SECONDS" in str(error)


async def test_a_replay_is_refused_by_the_next_run_of_the_connector(tmp_path: Path) -> None:
    body = b'{"text": "only once"}'
    headers = signed(body, delivery="abc-123")
    first = context(SECRET, state_dir=tmp_path)
    async with serving(webhook.run, first) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
    assert (await first.next_event()).text() == "only once"
    stored = tmp_path / "deliveries.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    # hashed: neither the sender's id nor the signature is written down as sent
    assert "abc-123" not in stored.read_text()
    assert headers["X-Goondan-Signature"].removeprefix("sha256=") not in stored.read_text()
    second = context(SECRET, state_dir=tmp_path)
    async with serving(webhook.run, second) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 200
        fresh = b'{"text": "then this"}'
        assert (await client.post("/", content=fresh, headers=signed(fresh))).status_code == 202
    assert (await second.next_event()).text() == "then this"


async def test_a_delivery_that_cannot_be_recorded_is_still_taken_once(tmp_path: Path) -> None:
    state = tmp_path / "connection"
    state.mkdir()
    ctx = context(SECRET, state_dir=state)
    body = b'{"text": "retried"}'
    headers = signed(body)
    async with serving(webhook.run, ctx) as client:
        state.rmdir()  # the state directory gone: nothing can be written there
        # The event was emitted (journaled) before the record failed: it is taken.
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
        assert (await client.post("/", content=body, headers=headers)).status_code == 200
        state.mkdir()
        fresh = b'{"text": "later"}'
        assert (await client.post("/", content=fresh, headers=signed(fresh))).status_code == 202
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["retried", "later"]
    assert ctx.events.empty()
    assert ("error", "deliveries not recorded") in [(lv, ev) for lv, ev, _ in ctx.log.records]
    # The write that worked took the first delivery to disk too: a restart refuses it.
    again = context(SECRET, state_dir=state)
    async with serving(webhook.run, again) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 200
    assert again.events.empty()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{torn", "is not a delivery cache"),
        (b'{"formatVersion": 1, "entries": {"k": "soon"}}', "is not a delivery cache"),
        (b'{"formatVersion": 99, "entries": {}}', "upgrade goondan"),
    ],
)
async def test_a_delivery_file_that_cannot_be_read_stops_the_start(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "deliveries.json").write_bytes(content)
    error = await run_until_error(webhook.run, context(SECRET, state_dir=tmp_path))
    assert isinstance(error, ConnectorError)
    assert message in str(error)
