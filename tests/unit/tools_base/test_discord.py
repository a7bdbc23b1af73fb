"""discord: finishing an interaction (and posting as the bot) against a local Discord API.

The server speaks Discord's wire format: message objects on success, ``{"message", "code"}``
errors, ``retry_after`` on 429. Neither the interaction token nor the bot token may show up
anywhere but in the request path or header.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.support.chat_server import ChatApiServer, serve
from tests.support.wire_server import Reply
from tools_base import ToolContext, ToolError, ToolHandler
from tools_base.tools.discord import configure

INTERACTION_TOKEN = "aW50ZXJhY3Rpb246OTk5OkZBS0UtdG9rZW4.secret_part-42"
BOT_TOKEN = "MTIzNDU2Nzg5.fake-bot_token.value"
APP = "1122334455"
CHANNEL = "667788"
MESSAGE = {"id": "9001", "channel_id": CHANNEL, "content": "done"}
ORIGINAL = f"/webhooks/{APP}/{INTERACTION_TOKEN}/messages/@original"
FOLLOWUP = f"/webhooks/{APP}/{INTERACTION_TOKEN}"


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DISCORD_API_BASE_URL", "DISCORD_ALLOWED_HOSTS", "DISCORD_APPLICATION_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", BOT_TOKEN)


def tool(server: ChatApiServer) -> dict[str, ToolHandler]:
    return configure({"apiBaseUrl": server.url, "allowedHosts": [server.host_entry]})


def from_interaction(ctx: ToolContext) -> ToolContext:
    """``ctx`` of a Turn a discord Connection started (the event's properties)."""
    return dataclasses.replace(
        ctx,
        inbound={
            "connector_name": "discord",
            "interaction_token": INTERACTION_TOKEN,
            "application_id": APP,
            "channel_id": CHANNEL,
        },
    )


def fail(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        handlers[name](ctx, args)
    return info.value


def assert_clean(error: ToolError) -> None:
    """No token in the error, its suggestion or anything chained to it."""
    assert error.__cause__ is None
    assert error.__context__ is None
    for secret in (INTERACTION_TOKEN, BOT_TOKEN):
        assert secret not in error.message
        assert secret not in (error.suggestion or "")


def test_edit_original_answers_the_interaction_that_started_the_turn(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes[ORIGINAL] = Reply(body=MESSAGE)
    result = tool(server)["edit_original"](from_interaction(ctx), {"content": "done @everyone"})
    assert result == {"ok": True, "messageId": "9001", "channelId": CHANNEL}
    [request] = server.requests
    assert request.method == "PATCH"
    assert request.path == ORIGINAL
    assert request.body == {"content": "done @everyone", "allowed_mentions": {"parse": []}}
    # An interaction webhook needs no bot token: none is sent.
    assert "authorization" not in request.headers


def test_followup_posts_another_message_ephemeral_on_request(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes[FOLLOWUP] = Reply(body=MESSAGE)
    args = {"content": "only you", "ephemeral": True}
    assert tool(server)["followup"](from_interaction(ctx), args)["messageId"] == "9001"
    [request] = server.requests
    assert (request.method, request.path) == ("POST", FOLLOWUP + "?wait=true")
    assert request.body == {"content": "only you", "allowed_mentions": {"parse": []}, "flags": 64}


def test_send_posts_as_the_bot_in_the_turns_channel(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes[f"/channels/{CHANNEL}/messages"] = Reply(body=MESSAGE)
    assert tool(server)["send"](from_interaction(ctx), {"content": "hi"})["ok"] is True
    [request] = server.requests
    assert request.headers["authorization"] == f"Bot {BOT_TOKEN}"


def test_outside_an_interaction_there_is_nothing_to_answer(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    error = fail(tool(server), "followup", ctx, content="hello")
    assert error.code == "E_DISCORD_NO_INTERACTION"
    assert not server.requests
    error = fail(tool(server), "send", ctx, content="hello")
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert "channelId" in error.message


def test_a_non_2xx_answer_is_a_structured_error_without_the_token(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    # Discord's own message, made to quote the token: it must still come out masked.
    server.routes[ORIGINAL] = Reply(
        status=404, body={"message": f"Unknown Webhook {INTERACTION_TOKEN}", "code": 10015}
    )
    with structlog.testing.capture_logs() as logs:
        error = fail(tool(server), "edit_original", from_interaction(ctx), content="x")
    assert error.code == "E_DISCORD_API_ERROR"
    assert "edit_original failed (HTTP 404, code 10015): Unknown Webhook" in error.message
    assert "expired" in (error.suggestion or "")
    assert_clean(error)
    assert INTERACTION_TOKEN not in repr(logs)
    assert BOT_TOKEN not in repr(logs)


def test_a_bot_token_echoed_back_is_masked(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes[f"/channels/{CHANNEL}/messages"] = Reply(
        status=401, body={"message": f"401: Unauthorized ({BOT_TOKEN})", "code": 0}
    )
    error = fail(tool(server), "send", from_interaction(ctx), content="x")
    assert error.code == "E_DISCORD_API_ERROR"
    assert_clean(error)


def test_rate_limited_names_retry_after(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes[FOLLOWUP] = Reply(
        status=429,
        body={"message": "You are being rate limited.", "retry_after": 1.5, "global": False},
    )
    error = fail(tool(server), "followup", from_interaction(ctx), content="x")
    assert error.code == "E_DISCORD_RATE_LIMITED"
    assert "retry_after=1.5 s" in error.message
    assert_clean(error)


def test_an_answer_that_is_not_a_message_is_a_bad_response(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes[ORIGINAL] = Reply(raw=b"<html>ok</html>", headers={"content-type": "text/html"})
    error = fail(tool(server), "edit_original", from_interaction(ctx), content="x")
    assert error.code == "E_CHAT_BAD_RESPONSE"


def test_a_loopback_api_needs_allowed_hosts(server: ChatApiServer, ctx: ToolContext) -> None:
    handlers = configure({"apiBaseUrl": f"https://127.0.0.1:{server.port}"})
    error = fail(handlers, "edit_original", from_interaction(ctx), content="x")
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert not server.requests


def test_the_api_base_url_setting_is_shared_with_allowed_hosts(
    server: ChatApiServer, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes[ORIGINAL] = Reply(body=MESSAGE)
    monkeypatch.setenv("DISCORD_API_BASE_URL", server.url)
    assert configure({})["edit_original"](from_interaction(ctx), {"content": "x"})["ok"]


@pytest.mark.parametrize(
    "args",
    [
        {"content": ""},
        {"content": "x" * 2001},
        {"content": "x", "applicationId": "12ab"},
        {"content": "x", "interactionToken": "has space/and slash"},
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    server: ChatApiServer, ctx: ToolContext, args: dict[str, Any]
) -> None:
    error = fail(tool(server), "followup", from_interaction(ctx), **args)
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert not server.requests
