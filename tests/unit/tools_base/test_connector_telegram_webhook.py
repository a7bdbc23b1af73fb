"""The telegram connector's webhook mode against a local Bot API, and the way back to polling.

Telegram's side is played by a real HTTP server (``setWebhook``, ``deleteWebhook``,
``getUpdates``) and by a client posting updates to the connector's listener with the
``X-Telegram-Bot-Api-Secret-Token`` header, as Telegram does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chat_server import (
    BotUpdates,
    ChatApiServer,
    serve,
    telegram_error,
    telegram_ok,
    telegram_update,
)
from tests.support.connector_harness import RecordingContext
from tests.support.connector_run import running
from tests.support.http_connector import HttpConnectorContext, run_until_error, serving
from tools_base import ConnectorError
from tools_base.connectors.telegram import TOKEN_NAMES, read_settings, run

TOKEN = "123456:AAH-secret_Token-value"
SECRET = "s3cret_Value-of-the-hook"
PUBLIC_URL = "https://bot.example.com/telegram/hook"
HEADER = "X-Telegram-Bot-Api-Secret-Token"
WAIT = 10.0


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*TOKEN_NAMES, "TELEGRAM_API_BASE_URL", "TELEGRAM_ALLOWED_HOSTS", "PORT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


def webhook_context(
    server: ChatApiServer, state_dir: Path | None = None, secret: str = SECRET, **config: str
) -> HttpConnectorContext:
    settings = {
        "TELEGRAM_API_BASE_URL": server.url,
        "TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_PUBLIC_URL": PUBLIC_URL,
        "TELEGRAM_RETRY_DELAY_MS": "20",
        **config,
    }
    return HttpConnectorContext(
        "TELEGRAM_WEBHOOK",
        config=settings,
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": secret},
        declared={"telegram_message"},
        state_dir=state_dir,
    )


def set_webhook_ok(server: ChatApiServer) -> None:
    server.routes[f"/bot{TOKEN}/setWebhook"] = telegram_ok(True)


async def test_webhook_mode_sets_the_webhook_with_its_secret_and_routes_updates(
    server: ChatApiServer, tmp_path: Path
) -> None:
    set_webhook_ok(server)
    ctx = webhook_context(server, state_dir=tmp_path)
    async with serving(run, ctx) as client:
        [call] = [r for r in server.requests if r.path == f"/bot{TOKEN}/setWebhook"]
        assert call.method == "POST"
        assert call.body == {
            "url": PUBLIC_URL,
            "secret_token": SECRET,
            "allowed_updates": ["message"],
        }
        answer = await client.post(
            "/", json=telegram_update(7, "hello hook", chat_id=42), headers={HEADER: SECRET}
        )
        assert answer.status_code == 200
        event = await ctx.next_event(WAIT)
        assert event.name == "telegram_message"
        assert event.text() == "hello hook"
        assert event.instance_key == "telegram:42"
        assert event.properties["update_id"] == "7"
        assert event.delivery_id == "telegram-update:123456:7"  # as the polling mode's
    # Neither secret was logged.
    assert SECRET not in ctx.log.text()
    assert TOKEN not in ctx.log.text()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="missing"),
        pytest.param({HEADER: "not-the-secret"}, 403, id="wrong"),
        pytest.param({HEADER: SECRET + "x"}, 403, id="longer"),
        pytest.param({HEADER: ""}, 403, id="empty"),
    ],
)
async def test_an_update_without_the_right_secret_is_refused(
    server: ChatApiServer, headers: dict[str, str], status: int
) -> None:
    set_webhook_ok(server)
    ctx = webhook_context(server)
    async with serving(run, ctx) as client:
        answer = await client.post("/", json=telegram_update(1, "forged"), headers=headers)
        assert answer.status_code == status
        # A correctly signed update after it still arrives, and is the only event.
        ok = await client.post("/", json=telegram_update(2, "real"), headers={HEADER: SECRET})
        assert ok.status_code == 200
        assert (await ctx.next_event(WAIT)).text() == "real"
        assert ctx.events.empty()


async def test_a_replayed_update_id_is_not_routed_twice(
    server: ChatApiServer, tmp_path: Path
) -> None:
    set_webhook_ok(server)
    update = telegram_update(9, "once")
    ctx = webhook_context(server, state_dir=tmp_path)
    async with serving(run, ctx) as client:
        first = await client.post("/", json=update, headers={HEADER: SECRET})
        again = await client.post("/", json=update, headers={HEADER: SECRET})
        assert first.status_code == again.status_code == 200
        assert again.json().get("duplicate") is True
        assert (await ctx.next_event(WAIT)).text() == "once"
    assert ctx.events.empty()
    # A restarted connector (same state directory) still knows it.
    ctx = webhook_context(server, state_dir=tmp_path)
    async with serving(run, ctx) as client:
        answer = await client.post("/", json=update, headers={HEADER: SECRET})
        assert answer.json().get("duplicate") is True
        later = await client.post("/", json=telegram_update(10, "new"), headers={HEADER: SECRET})
        assert later.status_code == 200
        assert (await ctx.next_event(WAIT)).text() == "new"
    assert ctx.events.empty()


async def test_a_body_that_is_not_an_update_is_refused(server: ChatApiServer) -> None:
    set_webhook_ok(server)
    ctx = webhook_context(server)
    async with serving(run, ctx) as client:
        answer = await client.post("/", json={"message": {}}, headers={HEADER: SECRET})
        assert answer.status_code == 400
        assert ctx.events.empty()


async def test_a_refused_set_webhook_stops_the_connector_naming_why(
    server: ChatApiServer,
) -> None:
    server.routes[f"/bot{TOKEN}/setWebhook"] = telegram_error(
        400, f"Bad Request: bad webhook: secret {SECRET} HTTPS url must be provided"
    )
    ctx = webhook_context(server)
    error = await run_until_error(run, ctx)
    assert isinstance(error, ConnectorError)
    assert "setWebhook refused (code 400)" in str(error)
    assert SECRET not in str(error)


async def test_a_set_webhook_failing_for_now_is_retried(server: ChatApiServer) -> None:
    answers = [telegram_error(502, "Bad Gateway"), telegram_ok(True)]
    server.routes[f"/bot{TOKEN}/setWebhook"] = lambda request: answers.pop(0)
    ctx = webhook_context(server)
    async with serving(run, ctx):
        calls = [r for r in server.requests if r.path.endswith("/setWebhook")]
        assert len(calls) == 2
    # The failure in between is the Connection's health, as status shows it.
    assert ctx.health[0] == "telegram setWebhook: HTTP 502: Bad Gateway"


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        pytest.param({"TELEGRAM_WEBHOOK_PUBLIC_URL": ""}, "TELEGRAM_WEBHOOK_PUBLIC_URL", id="url"),
        pytest.param({"TELEGRAM_MODE": "push"}, "TELEGRAM_MODE", id="mode"),
    ],
)
async def test_webhook_settings_are_checked(
    server: ChatApiServer, config: dict[str, str], needle: str
) -> None:
    ctx = webhook_context(server, **config)
    error = await run_until_error(run, ctx)
    assert isinstance(error, ConnectorError)
    assert needle in str(error)
    assert not server.requests


@pytest.mark.parametrize("secret", ["", "has space", "x" * 257])
async def test_the_webhook_secret_must_be_one_telegram_takes(
    server: ChatApiServer, secret: str
) -> None:
    ctx = webhook_context(server, secret=secret)
    error = await run_until_error(run, ctx)
    assert isinstance(error, ConnectorError)
    assert "TELEGRAM_WEBHOOK_SECRET" in str(error)
    if secret:
        assert secret not in str(error)


# -- back to polling -------------------------------------------------------------------------


async def test_polling_deletes_a_webhook_left_set_and_then_polls(server: ChatApiServer) -> None:
    conflict = telegram_error(
        409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook"
    )
    route = BotUpdates(server, [telegram_update(1, "after the switch")], scripted={0: conflict})
    server.routes[f"/bot{TOKEN}/getUpdates"] = route
    server.routes[f"/bot{TOKEN}/deleteWebhook"] = telegram_ok(True)
    ctx = RecordingContext(
        config={"TELEGRAM_API_BASE_URL": server.url, "TELEGRAM_RETRY_DELAY_MS": "20"},
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
        declared={"telegram_message"},
    )
    async with running(run, ctx):
        assert (await ctx.next_event(WAIT)).text() == "after the switch"
    paths = [r.path.rsplit("/", 1)[1] for r in server.requests]
    assert paths[:3] == ["getUpdates", "deleteWebhook", "getUpdates"]


async def test_another_pollers_conflict_does_not_delete_anything(server: ChatApiServer) -> None:
    conflict = telegram_error(409, "Conflict: terminated by other getUpdates request")
    route = BotUpdates(server, [telegram_update(1, "a")], scripted={0: conflict})
    server.routes[f"/bot{TOKEN}/getUpdates"] = route
    ctx = RecordingContext(
        config={"TELEGRAM_API_BASE_URL": server.url, "TELEGRAM_RETRY_DELAY_MS": "20"},
        secrets={"TELEGRAM_BOT_TOKEN": TOKEN},
        declared={"telegram_message"},
    )
    async with running(run, ctx):
        assert (await ctx.next_event(WAIT)).text() == "a"
    assert not [r for r in server.requests if r.path.endswith("/deleteWebhook")]


# -- the allowed hosts shared with the telegram tool -------------------------------------------


def test_plain_http_to_a_listed_host_is_accepted() -> None:
    base = {"TELEGRAM_API_BASE_URL": "http://bot-api.invalid:8081"}
    secrets = {"TELEGRAM_BOT_TOKEN": TOKEN}
    with pytest.raises(ConnectorError, match="TELEGRAM_ALLOWED_HOSTS"):
        read_settings(RecordingContext(config=base, secrets=secrets))
    listed = {**base, "TELEGRAM_ALLOWED_HOSTS": "other.invalid, bot-api.invalid:8081"}
    settings = read_settings(RecordingContext(config=listed, secrets=secrets))
    assert settings.api_base.host == "bot-api.invalid"
    wrong_port = {**base, "TELEGRAM_ALLOWED_HOSTS": "bot-api.invalid:9999"}
    with pytest.raises(ConnectorError):
        read_settings(RecordingContext(config=wrong_port, secrets=secrets))
