"""slack connector: the Events API over real sockets, v0 signatures and their 5-minute window,
event mapping, filters, files, retries."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.http_connector import HttpConnectorContext, hmac_hex, run_until_error, serving
from tools_base import ConnectorError
from tools_base.connectors import slack

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
EVENTS = {"app_mention", "message_im"}


def context(
    secret: str | None = SECRET, state_dir: Path | None = None, **config: str
) -> HttpConnectorContext:
    return HttpConnectorContext(
        "SLACK_WEBHOOK",
        config=config,
        secrets={"SLACK_SIGNING_SECRET": secret} if secret else {},
        declared=EVENTS,
        state_dir=state_dir,
    )


def signed(body: bytes, *, at: int | str | None = None, secret: str = SECRET) -> dict[str, str]:
    timestamp = str(int(time.time()) if at is None else at)
    base = b"v0:" + timestamp.encode() + b":" + body
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": "v0=" + hmac_hex(secret, base),
        "Content-Type": "application/json",
    }


async def post(client: httpx2.AsyncClient, payload: dict[str, Any]) -> httpx2.Response:
    body = json.dumps(payload).encode()
    return await client.post("/", content=body, headers=signed(body))


def callback(event_id: str = "Ev1", **event: Any) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": event_id,
        "event": {"type": "app_mention", "channel": "C1", "ts": "1700.01", "user": "U1", **event},
    }


async def test_url_verification_answers_the_challenge() -> None:
    ctx = context()
    async with serving(slack.run, ctx) as client:
        response = await post(client, {"type": "url_verification", "challenge": "3eZbrw1aBm"})
        assert response.status_code == 200
        assert response.text == "3eZbrw1aBm"
        assert response.headers["content-type"].startswith("text/plain")


async def test_url_verification_without_a_secret_needs_no_signature() -> None:
    async with serving(slack.run, context(secret=None)) as client:
        response = await client.post("/", json={"type": "url_verification", "challenge": "c"})
        assert (response.status_code, response.text) == (200, "c")


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(lambda body: {}, id="unsigned"),
        pytest.param(lambda body: signed(body, secret="not the secret"), id="wrong-secret"),
        pytest.param(lambda body: signed(body + b" "), id="other-body"),
        pytest.param(lambda body: signed(body, at=int(time.time()) - 301), id="stale"),
        pytest.param(lambda body: signed(body, at=int(time.time()) + 900), id="future"),
        pytest.param(lambda body: signed(body, at=1500000000), id="2017"),
        pytest.param(lambda body: signed(body, at="9" * 5000), id="5000-digits"),
        pytest.param(lambda body: signed(body, at="-1"), id="negative"),
        pytest.param(
            lambda body: {**signed(body), "X-Slack-Request-Timestamp": "1²".encode("latin-1")},
            id="not-ascii-digits",
        ),
        pytest.param(
            lambda body: {**signed(body), "X-Slack-Request-Timestamp": "soon"}, id="bad-timestamp"
        ),
        pytest.param(
            lambda body: {k: v for k, v in signed(body).items() if "Timestamp" not in k},
            id="no-timestamp",
        ),
    ],
)
async def test_unsigned_wrong_or_stale_requests_are_401(headers: Any) -> None:
    ctx = context()
    body = json.dumps({"type": "url_verification", "challenge": "c"}).encode()
    async with serving(slack.run, ctx) as client:
        response = await client.post("/", content=body, headers=headers(body))
        assert response.status_code == 401
        assert response.text != "c"
        # within the window, even four minutes old, it is taken
        fine = await client.post("/", content=body, headers=signed(body, at=int(time.time()) - 240))
        assert (fine.status_code, fine.text) == (200, "c")
    assert SECRET not in ctx.log.text()


async def test_a_mention_and_a_thread_reply_become_events() -> None:
    ctx = context()
    async with serving(slack.run, ctx) as client:
        response = await post(client, callback(text="<@UBOT> summarise this"))
        assert (response.status_code, response.json()) == (200, {"ok": True})
        reply = callback(
            "Ev2",
            type="message",
            channel_type="im",
            text="and this",
            ts="1700.09",
            thread_ts="1700.01",
        )
        assert (await post(client, reply)).status_code == 200
    mention, message = await ctx.next_event(), await ctx.next_event()
    assert mention.name == "app_mention"
    assert mention.instance_key == "slack:C1:1700.01"
    assert mention.text() == "<@UBOT> summarise this"
    assert mention.properties == {
        "channel_id": "C1",
        "ts": "1700.01",
        "user_id": "U1",
        "team_id": "T1",
        "event_id": "Ev1",
    }
    assert message.name == "message_im"
    assert message.instance_key == "slack:C1:1700.01"  # the thread's conversation
    assert message.properties["thread_ts"] == "1700.01"
    assert message.properties["channel_type"] == "im"


@pytest.mark.parametrize(
    "event",
    [
        {"bot_id": "B1", "text": "from a bot"},
        {"subtype": "bot_message", "text": "from a bot"},
        {"text": ""},
        {"text": "no channel", "channel": None},
        {"type": "reaction_added", "text": "not a message"},
    ],
)
async def test_bot_empty_and_other_events_are_ignored(event: dict[str, Any]) -> None:
    ctx = context()
    async with serving(slack.run, ctx) as client:
        response = await post(client, callback("EvIgnored", **event))
        assert (response.status_code, response.json()) == (200, {"ok": True, "ignored": True})
        assert (await post(client, callback("EvNext", text="next"))).status_code == 200
    assert (await ctx.next_event()).text() == "next"  # nothing came before it


async def test_mention_mode_takes_only_mentions() -> None:
    ctx = context(SLACK_MESSAGE_MODE="mention")
    async with serving(slack.run, ctx) as client:
        ignored = await post(client, callback("E1", type="message", text="plain"))
        assert ignored.json()["ignored"] is True
        assert (await post(client, callback("E2", text="mention"))).status_code == 200
    assert (await ctx.next_event()).text() == "mention"


async def test_a_retried_event_id_is_emitted_once() -> None:
    ctx = context()
    async with serving(slack.run, ctx) as client:
        assert (await post(client, callback("EvSame", text="once"))).json() == {"ok": True}
        retry = await post(client, callback("EvSame", text="once"))
        assert retry.json() == {"ok": True, "ignored": True}
        assert (await post(client, callback("EvOther", text="then"))).status_code == 200
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["once", "then"]


async def test_files_attachments_and_image_blocks_reach_text_and_properties() -> None:
    ctx = context()
    files = [
        {"name": "cat.png", "mimetype": "image/png", "url_private": "https://files/cat.png"},
        {"title": "report", "filetype": "pdf", "url_private_download": "https://files/r.pdf"},
        {"name": "no url"},
    ]
    blocks = [{"type": "image", "image_url": "https://img/b.jpg", "alt_text": "chart"}]
    async with serving(slack.run, ctx) as client:
        await post(client, callback(text="look", files=files, blocks=blocks))
        await post(client, callback("Ev2", text="", files=files[1:2]))
    event, only_file = await ctx.next_event(), await ctx.next_event()
    assert event.text().splitlines() == [
        "look",
        "[image:cat.png] https://files/cat.png",
        "[file:report] https://files/r.pdf",
        "[image:chart] https://img/b.jpg",
    ]
    assert event.properties["attachment_count"] == "3"
    assert event.properties["image_url"] == "https://files/cat.png"
    assert event.properties["file_url"] == "https://files/r.pdf"
    assert event.properties["file_name"] == "report"
    assert only_file.text() == "[file:report] https://files/r.pdf"


async def test_settings_path_and_errors() -> None:
    ctx = context(SLACK_WEBHOOK_PATH="/slack/events")
    async with serving(slack.run, ctx) as client:
        body = json.dumps({"type": "url_verification", "challenge": "c"}).encode()
        assert (await client.post("/", content=body, headers=signed(body))).status_code == 404
        assert (await client.post("/slack/events", content=body, headers=signed(body))).text == "c"
        assert (await client.get("/slack/events")).status_code == 405
        bad = b"{oops"
        assert (
            await client.post("/slack/events", content=bad, headers=signed(bad))
        ).status_code == 400
    error = await run_until_error(slack.run, context(SLACK_MESSAGE_MODE="everything"))
    assert isinstance(error, ConnectorError)
    assert "SLACK_MESSAGE_MODE" in str(error)
    error = await run_until_error(slack.run, context(secret=None, SLACK_WEBHOOK_HOST="0.0.0.0"))
    assert "SLACK_ALLOW_UNSIGNED" in str(error)


def test_the_signature_window_is_five_minutes() -> None:
    body = b"{}"
    sig = "v0=" + hmac_hex(SECRET, b"v0:1000:{}")
    assert slack.signature_matches(body, "1000", sig, SECRET, now=1300)
    assert slack.signature_matches(body, "1000", sig, SECRET, now=700)
    assert not slack.signature_matches(body, "1000", sig, SECRET, now=1301)
    assert not slack.signature_matches(body, "1000", sig, SECRET, now=699)
    assert not slack.signature_matches(body, "1000", sig.replace("v0=", "v1="), SECRET, now=1000)


async def test_the_same_signed_request_four_times_is_one_event() -> None:
    ctx = context()
    payload = callback(text="no event id")
    del payload["event_id"]
    body = json.dumps(payload).encode()
    headers = signed(body)
    async with serving(slack.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers)).json() == {"ok": True}
        for _ in range(3):
            again = await client.post("/", content=body, headers=headers)
            assert (again.status_code, again.json()) == (200, {"ok": True, "ignored": True})
        assert (await post(client, callback("EvNext", text="next"))).json() == {"ok": True}
    # in order: had a copy been emitted, it would come before "next"
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["no event id", "next"]


async def test_the_window_is_a_setting() -> None:
    ctx = context(SLACK_SIGNATURE_WINDOW_SECONDS="60")
    body = json.dumps(callback(text="late")).encode()
    async with serving(slack.run, ctx) as client:
        late = signed(body, at=int(time.time()) - 90)
        assert (await client.post("/", content=body, headers=late)).status_code == 401
        assert (await client.post("/", content=body, headers=signed(body))).status_code == 200
    assert (await ctx.next_event()).text() == "late"
    error = await run_until_error(slack.run, context(SLACK_SIGNATURE_WINDOW_SECONDS="86400"))
    assert isinstance(error, ConnectorError)
    assert "SLACK_SIGNATURE_WINDOW_SECONDS must be between 1 and 3600" in str(error)


async def test_a_retry_is_refused_by_the_next_run_of_the_connector(tmp_path: Path) -> None:
    body = json.dumps(callback("EvKept", text="once")).encode()
    first = context(state_dir=tmp_path)
    async with serving(slack.run, first) as client:
        sent = signed(body, at=int(time.time()) - 5)
        assert (await client.post("/", content=body, headers=sent)).json() == {"ok": True}
    assert (await first.next_event()).text() == "once"
    second = context(state_dir=tmp_path)
    async with serving(slack.run, second) as client:
        # the same request, and Slack's retry of the event signed anew: neither is taken
        for headers in (sent, signed(body)):
            again = await client.post("/", content=body, headers=headers)
            assert again.json() == {"ok": True, "ignored": True}
        assert (await post(client, callback("EvNew", text="new"))).json() == {"ok": True}
    assert (await second.next_event()).text() == "new"
