"""The telegram connector against a local Bot API server: offsets, retries, rate limits, events.

The server keeps updates and honours ``offset`` as Telegram does, so a wrong offset shows up as
a duplicate or a missing event; its request times show how long the connector waited.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog

from tests.support.chat_server import (
    DROP,
    HANG,
    BotUpdates,
    ChatApiServer,
    serve,
    telegram_error,
    telegram_ok,
    telegram_update,
)
from tests.support.connector_harness import RecordingContext
from tests.support.connector_run import STOP_SECONDS, LoggingContext, running
from tests.support.wire_server import Reply
from tools_base import ConnectorError, FileMessage, ImageMessage, TextMessage
from tools_base.connectors import telegram
from tools_base.connectors.telegram import TOKEN_NAMES, read_settings, run, update_event

TOKEN = "123456:AAH-secret_Token-value"
WAIT = 10.0
"""Bound of every wait for the server or an event."""


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*TOKEN_NAMES, "TELEGRAM_API_BASE_URL", "TELEGRAM_ALLOW_PLAIN_HTTP"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


def feed(server: ChatApiServer, *updates: dict[str, Any], **options: Any) -> BotUpdates:
    route = BotUpdates(server, list(updates), **options)
    server.routes[f"/bot{TOKEN}/getUpdates"] = route
    return route


def context(server: ChatApiServer, **config: str) -> RecordingContext:
    settings = {"TELEGRAM_API_BASE_URL": server.url, "TELEGRAM_RETRY_DELAY_MS": "20", **config}
    return RecordingContext(
        config=settings, secrets={"TELEGRAM_BOT_TOKEN": TOKEN}, declared={"telegram_message"}
    )


async def parked(route: BotUpdates) -> None:
    """Until the connector waits in a poll with nothing left to give it."""
    assert await asyncio.to_thread(route.parked.wait, WAIT), "the connector never caught up"


async def texts(ctx: RecordingContext, n: int) -> list[str]:
    return [(await ctx.next_event(WAIT)).text() for _ in range(n)]


# -- polling -------------------------------------------------------------------------------


async def test_updates_arrive_in_order_and_each_once(server: ChatApiServer) -> None:
    route = feed(server, *(telegram_update(100 + i, f"m{i}") for i in range(5)), batch=2)
    ctx = context(server)
    async with running(run, ctx):
        assert await texts(ctx, 5) == ["m0", "m1", "m2", "m3", "m4"]
        await parked(route)
        assert ctx.events.empty()
    # Each poll confirms the previous batch: the last update_id + 1.
    assert route.offsets() == [0, 102, 104, 105]
    first = route.polls[0]
    assert first.method == "POST"
    assert first.body == {"timeout": 30}


async def test_a_stale_batch_is_not_emitted_twice(server: ChatApiServer) -> None:
    updates = [telegram_update(1, "a"), telegram_update(2, "b"), telegram_update(3, "c")]
    route = feed(server, *updates, batch=2)
    # The second poll gets the first batch again, as from a server that ignored the offset.
    route.scripted = {1: telegram_ok(updates)}
    ctx = context(server)
    async with running(run, ctx):
        assert await texts(ctx, 3) == ["a", "b", "c"]
        await parked(route)
        assert ctx.events.empty()
    assert route.offsets() == [0, 3, 4]


async def test_the_poll_asks_for_the_configured_timeout_and_offset(server: ChatApiServer) -> None:
    route = feed(server, telegram_update(7, "old"), telegram_update(9, "new"))
    ctx = context(server, TELEGRAM_POLL_TIMEOUT_SECONDS="1", TELEGRAM_INITIAL_OFFSET="8")
    async with running(run, ctx):
        assert await texts(ctx, 1) == ["new"]
        await parked(route)
    assert route.polls[0].body == {"timeout": 1, "offset": 8}
    assert route.offsets()[-1] == 10


async def test_a_rate_limit_waits_retry_after(server: ChatApiServer) -> None:
    limited = telegram_error(429, "Too Many Requests: retry after 1", retry_after=1)
    route = feed(server, telegram_update(1, "a"), telegram_update(2, "b"), batch=1)
    route.scripted = {1: limited}
    ctx = context(server)  # the retry delay is 20 ms: only retry_after explains a 1 s pause
    with structlog.testing.capture_logs() as logs:
        async with running(run, ctx):
            assert await texts(ctx, 2) == ["a", "b"]
            await parked(route)
    waited = route.polls[2].at - route.polls[1].at
    assert waited >= 1.0  # retry_after is honoured; how soon after is no promise
    assert route.offsets()[1:3] == [2, 2]  # the refused poll is asked again, same offset
    warning = next(e for e in logs if e["event"] == "telegram rate limited")
    assert warning["retry_in_seconds"] == 1.0


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(DROP, id="connection-dropped"),
        pytest.param(Reply(status=502, raw=b"<html>bad gateway</html>"), id="http-502"),
        pytest.param(telegram_error(409, "Conflict: other getUpdates"), id="ok-false"),
        pytest.param(Reply(body={"ok": True, "result": {"not": "a list"}}), id="bad-result"),
    ],
)
async def test_polling_resumes_after_an_error(server: ChatApiServer, failure: Reply) -> None:
    route = feed(server, telegram_update(1, "a"), telegram_update(2, "b"), batch=1)
    route.scripted = {1: failure}
    ctx = context(server, TELEGRAM_RETRY_DELAY_MS="150")
    with structlog.testing.capture_logs() as logs:
        async with running(run, ctx):
            assert await texts(ctx, 2) == ["a", "b"]
            await parked(route)
            assert ctx.events.empty()
    assert route.offsets()[:3] == [0, 2, 2]
    # Order and count, not speed: the server stamps a poll when it reads it, which a loaded
    # machine delays by any amount after the client sent it.
    assert route.polls[1].at <= route.polls[2].at
    assert [e["event"] for e in logs].count("telegram poll failed") == 1


async def test_a_poll_with_no_answer_times_out_and_is_retried(server: ChatApiServer) -> None:
    route = feed(server, telegram_update(1, "a"))
    route.scripted = {0: HANG}
    ctx = context(server, TELEGRAM_POLL_TIMEOUT_SECONDS="0", TELEGRAM_REQUEST_TIMEOUT_MS="300")
    with structlog.testing.capture_logs() as logs:
        async with running(run, ctx):
            assert await texts(ctx, 1) == ["a"]
    assert len(route.polls) >= 2
    assert route.polls[0].at <= route.polls[1].at
    failed = next(e for e in logs if e["event"] == "telegram poll failed")
    assert failed["reason"] == "no answer within 0.3 s"


async def test_server_gone_keeps_retrying() -> None:
    with ChatApiServer() as gone:
        url = gone.url
    ctx = LoggingContext(
        config={"TELEGRAM_API_BASE_URL": url, "TELEGRAM_RETRY_DELAY_MS": "10"},
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
    )
    async with running(run, ctx) as task:
        await ctx.log.wait_for("telegram poll failed", count=3)
        assert not task.done()
    assert "cannot connect" in ctx.log.named("telegram poll failed")[0]["reason"]


async def test_bot_messages_are_ignored(server: ChatApiServer) -> None:
    route = feed(
        server,
        telegram_update(1, "from a person"),
        telegram_update(2, "from a bot", is_bot=True, user_id=99),
        {"update_id": 3, "edited_message": {"chat": {"id": 5}, "text": "edited"}},
        telegram_update(4, "again a person"),
    )
    ctx = context(server)
    async with running(run, ctx):
        assert await texts(ctx, 2) == ["from a person", "again a person"]
        await parked(route)
        assert ctx.events.empty()
    assert route.offsets()[-1] == 5  # skipped updates are confirmed too


async def test_event_shape(server: ChatApiServer) -> None:
    update = telegram_update(11, "hello", chat_id=-100123, user_id=42, username="ann")
    update["message"]["chat"].update(type="supergroup", title="Team")
    feed(server, update)
    ctx = context(server)
    async with running(run, ctx):
        event = await ctx.next_event(WAIT)
    assert event.name == "telegram_message"
    assert event.instance_key == "telegram:-100123"
    assert event.message == TextMessage("hello")
    assert event.properties == {
        "update_id": "11",
        "chat_id": "-100123",
        "chat_type": "supergroup",
        "chat_title": "Team",
        "chat_username": "ann",
        "message_id": "110",
        "date": "1700000011",
        "from_id": "42",
        "from_username": "ann",
        "from_first_name": "Ann",
    }
    # Fetched again after a crash, the update is the same delivery: the same event.
    assert event.delivery_id == "telegram-update:123456:11"


# -- images and files ------------------------------------------------------------------------

PHOTO = [
    {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 60, "file_size": 900},
    {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 853, "file_size": 99000},
    {"file_id": "mid", "file_unique_id": "m", "width": 320, "height": 213, "file_size": 9000},
]


async def test_a_photo_is_an_image_event(server: ChatApiServer) -> None:
    feed(server, telegram_update(1, photo=PHOTO))
    ctx = context(server)
    async with running(run, ctx):
        event = await ctx.next_event(WAIT)
    assert event.message == ImageMessage("telegram-file:big")
    assert event.text() == "[image] telegram-file:big"
    assert {k: v for k, v in event.properties.items() if k.startswith("image_")} == {
        "image_source": "photo",
        "image_file_id": "big",
        "image_file_unique_id": "b",
        "image_width": "1280",
        "image_height": "853",
        "image_file_size": "99000",
    }


def test_a_captioned_photo_keeps_caption_and_image() -> None:
    event = update_event(telegram_update(1, photo=PHOTO, caption="what is this?"))
    assert event is not None
    assert event.message == TextMessage("what is this?\n[image] telegram-file:big")
    assert event.properties["caption"] == "what is this?"
    assert event.properties["image_file_id"] == "big"


def test_an_image_document() -> None:
    document = {
        "file_id": "doc1",
        "file_unique_id": "d1",
        "file_name": "scan.png",
        "mime_type": "image/png",
        "file_size": 1234,
    }
    event = update_event(telegram_update(1, document=document))
    assert event is not None
    assert event.message == ImageMessage("telegram-file:doc1")
    assert event.properties["image_source"] == "document"
    assert event.properties["image_mime_type"] == "image/png"
    assert event.properties["image_file_name"] == "scan.png"
    assert "file_id" not in event.properties


def test_another_document_is_a_file() -> None:
    document = {"file_id": "f9", "file_name": "report.pdf", "mime_type": "application/pdf"}
    event = update_event(telegram_update(1, document=document))
    assert event is not None
    assert event.message == FileMessage("telegram-file:f9", "report.pdf")
    assert event.text() == "[file:report.pdf] telegram-file:f9"
    assert event.properties["file_mime_type"] == "application/pdf"
    captioned = update_event(telegram_update(2, document=document, caption="read it"))
    assert captioned is not None
    assert captioned.text() == "read it\n[file:report.pdf] telegram-file:f9"


def test_messages_with_nothing_to_say_are_skipped() -> None:
    assert update_event(telegram_update(1, sticker={"file_id": "x"})) is None
    assert update_event({"update_id": 2, "message": {"text": "no chat"}}) is None
    assert update_event({"update_id": 3}) is None


# -- stopping ---------------------------------------------------------------------------------


async def test_cancel_stops_a_waiting_long_poll_at_once(server: ChatApiServer) -> None:
    route = feed(server)
    ctx = context(server)  # the poll may wait 30 s; cancel must not
    async with running(run, ctx) as task:
        await parked(route)
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)  # far short of the poll's 30 s
        assert task.cancelled()


async def test_cancel_stops_a_retry_wait(server: ChatApiServer) -> None:
    route = feed(server)
    route.scripted = {0: telegram_error(429, "slow down", retry_after=3600)}
    ctx = LoggingContext(
        config={"TELEGRAM_API_BASE_URL": server.url}, secrets={"TELEGRAM_BOT_TOKEN": TOKEN}
    )
    async with running(run, ctx) as task:
        await ctx.log.wait_for("telegram rate limited")
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)
        assert task.cancelled()
    assert ctx.log.named("telegram rate limited")[0]["retry_in_seconds"] == 3600


# -- the token --------------------------------------------------------------------------------


async def test_the_token_never_leaks(server: ChatApiServer) -> None:
    route = feed(server, telegram_update(1, "a"), telegram_update(2, "b"), batch=1)
    route.scripted = {
        1: telegram_error(401, f"Unauthorized: token {TOKEN} is bad"),
        2: DROP,
        3: telegram_error(429, f"too many for /bot{TOKEN}/getUpdates", retry_after=0),
        4: Reply(status=500, raw=f"oops /bot{TOKEN}/getUpdates".encode()),
    }
    ctx = context(server, TELEGRAM_RETRY_DELAY_MS="1")
    with structlog.testing.capture_logs() as logs:
        async with running(run, ctx):
            await texts(ctx, 2)
            await parked(route)
    assert len(route.polls) >= 6
    assert all(p.path == f"/bot{TOKEN}/getUpdates" for p in route.polls)
    text = json.dumps(logs, default=str)
    assert "Unauthorized" in text
    assert TOKEN not in text
    assert TOKEN.split(":")[1] not in text


async def test_an_unreachable_api_leaks_the_token_nowhere(
    server: ChatApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    with ChatApiServer() as gone:
        gone_url = gone.url
    feed(server, telegram_update(1, "a"))
    dead = LoggingContext(
        config={"TELEGRAM_API_BASE_URL": gone_url, "TELEGRAM_RETRY_DELAY_MS": "10"},
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
    )
    live = context(server)
    # Every standard-library logger, the HTTP client's included, as verbose as it gets.
    with caplog.at_level(logging.DEBUG), structlog.testing.capture_logs() as logs:
        async with running(run, dead):
            await dead.log.wait_for("telegram poll failed", count=2)
        async with running(run, live):
            assert await texts(live, 1) == ["a"]
    reasons = [e["reason"] for e in dead.log.named("telegram poll failed")]
    assert all(r.startswith("cannot connect to 127.0.0.1:") for r in reasons), reasons
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx2"]
    assert any("/bot[REDACTED]/getUpdates" in line for line in requests), requests
    text = json.dumps([dead.log.entries, logs], default=str) + caplog.text
    assert TOKEN not in text
    assert TOKEN.split(":")[1] not in text


@contextlib.asynccontextmanager
async def raw_api(answer: bytes) -> AsyncIterator[str]:
    """A Bot API stand-in that answers every request with the bytes ``answer`` (status line,
    headers, body as given), then closes the connection; yields its base URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def chunked(body: bytes, size: int) -> bytes:
    """``body`` as a chunked HTTP/1.1 answer, in chunks of ``size`` bytes (one with an
    extension), with a trailer."""
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    encoded = b"".join(
        f"{len(part):x}{';ext=1' if i == 0 else ''}\r\n".encode() + part + b"\r\n"
        for i, part in enumerate(parts)
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n"
    return head + b"\r\n" + encoded + b"0\r\nx-trailer: 1\r\n\r\n"


async def test_a_chunked_answer_is_read_whole() -> None:
    updates = [telegram_update(1, "first " * 50), telegram_update(2, "second")]
    body = json.dumps({"ok": True, "result": updates}).encode()
    async with raw_api(chunked(body, 7)) as url:
        ctx = RecordingContext(
            config={"TELEGRAM_API_BASE_URL": url}, secrets={"TELEGRAM_BOT_TOKEN": TOKEN}
        )
        async with running(run, ctx):
            assert await texts(ctx, 2) == ["first " * 50, "second"]


@pytest.mark.parametrize("framing", ["chunked", "content-length", "until-close"])
async def test_an_answer_over_the_limit_is_refused(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telegram, "MAX_API_ANSWER_BYTES", 1000)
    body = json.dumps({"ok": True, "result": [telegram_update(1, "x" * 5000)]}).encode()
    if framing == "chunked":
        answer = chunked(body, 256)
    else:
        length = f"content-length: {len(body)}\r\n" if framing == "content-length" else ""
        answer = f"HTTP/1.1 200 OK\r\n{length}connection: close\r\n\r\n".encode() + body
    async with raw_api(answer) as url:
        ctx = LoggingContext(
            config={"TELEGRAM_API_BASE_URL": url, "TELEGRAM_RETRY_DELAY_MS": "10"},
            secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
        )
        async with running(run, ctx):
            await ctx.log.wait_for("telegram poll failed", count=2)
    reason = ctx.log.named("telegram poll failed")[0]["reason"]
    assert reason == f"127.0.0.1:{url.rsplit(':', 1)[1]} sent an answer over 1000 bytes"
    assert ctx.events.empty()


@pytest.mark.parametrize(
    "token", [f"{TOKEN}/../x", f"{TOKEN} tail", f"{TOKEN}?q", f"{TOKEN}\x00", f"{TOKEN}#"]
)
def test_a_malformed_token_is_refused_without_echoing_it(token: str) -> None:
    ctx = RecordingContext(secrets={"TELEGRAM_BOT_TOKEN": token})
    with pytest.raises(ConnectorError) as raised:
        read_settings(ctx)
    assert raised.value.code == "E_CONNECTOR_CONFIG"
    assert TOKEN not in str(raised.value)
    assert TOKEN.split(":")[1] not in str(raised.value)


# -- settings ----------------------------------------------------------------------------------


def test_no_token_is_a_config_error() -> None:
    with pytest.raises(ConnectorError, match="TELEGRAM_BOT_TOKEN, BOT_TOKEN, TELEGRAM_TOKEN"):
        read_settings(RecordingContext())


def test_token_lookup_order(monkeypatch: pytest.MonkeyPatch) -> None:
    both = RecordingContext(secrets={"BOT_TOKEN": "2:b", "TELEGRAM_TOKEN": "3:c"})
    assert read_settings(both).token == "2:b"
    first = RecordingContext(secrets={"TELEGRAM_BOT_TOKEN": "1:a", "BOT_TOKEN": "2:b"})
    assert read_settings(first).token == "1:a"
    monkeypatch.setenv("TELEGRAM_TOKEN", "4:env")
    assert read_settings(RecordingContext()).token == "4:env"


def test_defaults() -> None:
    settings = read_settings(RecordingContext(secrets={"TELEGRAM_BOT_TOKEN": TOKEN}))
    assert settings.api_base.host == "api.telegram.org"
    assert settings.api_base.scheme == "https"
    assert settings.poll_timeout == 30
    assert settings.request_timeout == 35
    assert settings.retry_delay == 1.0
    assert settings.initial_offset == 0


def test_settings_from_secrets_come_before_config() -> None:
    ctx = RecordingContext(
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_POLL_TIMEOUT_SECONDS": "10"},
        config={"TELEGRAM_POLL_TIMEOUT_SECONDS": "20", "TELEGRAM_REQUEST_TIMEOUT_MS": "12000"},
    )
    settings = read_settings(ctx)
    assert (settings.poll_timeout, settings.request_timeout) == (10, 12.0)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TELEGRAM_POLL_TIMEOUT_SECONDS", "soon", "must be an integer"),
        ("TELEGRAM_POLL_TIMEOUT_SECONDS", "-1", "between 0 and 600"),
        ("TELEGRAM_REQUEST_TIMEOUT_MS", "0", "between 1 and"),
        ("TELEGRAM_RETRY_DELAY_MS", "1.5", "must be an integer"),
        ("TELEGRAM_INITIAL_OFFSET", "x", "must be an integer"),
        ("TELEGRAM_API_BASE_URL", "ftp://example.org", "Unsupported protocol"),
        ("TELEGRAM_API_BASE_URL", "http://bots.example.org", "plain http"),
        ("TELEGRAM_ALLOW_PLAIN_HTTP", "maybe", "true or false"),
    ],
)
def test_bad_settings_name_themselves(name: str, value: str, message: str) -> None:
    ctx = RecordingContext(secrets={"TELEGRAM_BOT_TOKEN": TOKEN}, config={name: value})
    with pytest.raises(ConnectorError, match=message) as raised:
        read_settings(ctx)
    assert name in str(raised.value)


def test_plain_http_off_loopback_needs_the_opt_in() -> None:
    ctx = RecordingContext(
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
        config={
            "TELEGRAM_API_BASE_URL": "http://bot-api.internal:8081",
            "TELEGRAM_ALLOW_PLAIN_HTTP": "true",
        },
    )
    assert read_settings(ctx).api_base.port == 8081


async def test_a_config_error_stops_run_before_any_request() -> None:
    with pytest.raises(ConnectorError):
        await telegram.run(RecordingContext())
