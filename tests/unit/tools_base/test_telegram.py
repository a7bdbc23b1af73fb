"""telegram: what goes over the wire to the Bot API, what comes back, and how it fails.

Every request goes to a local server speaking the Bot API's JSON; the token must never show up
anywhere but in the request path.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.support.chat_server import (
    DROP,
    HANG,
    ChatApiServer,
    file_reply,
    serve,
    telegram_error,
    telegram_ok,
)
from tests.support.tool_harness import Harness
from tests.support.wire_server import Reply
from tools_base import JsonObject, ToolConfigError, ToolContext, ToolError, ToolHandler
from tools_base.tools.telegram import TOKEN_ENV, configure

TOKEN = "123456:AAH-secret_Token-value"
PATH = f"/bot{TOKEN}"
MESSAGE = {"message_id": 42, "date": 1700000000, "chat": {"id": -100123}, "text": "hello"}


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets: the token comes from TELEGRAM_BOT_TOKEN by default."""
    for name in TOKEN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)


def tool(server: ChatApiServer, **config: Any) -> dict[str, ToolHandler]:
    return configure({"apiBaseUrl": server.url, "allowedHosts": [server.host_entry], **config})


def call(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> Any:
    return handlers[name](ctx, args)


def fail(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        call(handlers, name, ctx, **args)
    return info.value


def assert_no_token(error: ToolError) -> None:
    """Neither the error nor anything chained to it mentions the token."""
    assert error.__cause__ is None
    assert error.__context__ is None
    seen: BaseException | None = error
    while seen is not None:
        assert TOKEN not in str(seen)
        assert TOKEN not in (getattr(seen, "suggestion", None) or "")
        seen = seen.__cause__ or seen.__context__


# -- every export: the request sent, the result returned --------------------------------------


def test_send(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = telegram_ok(MESSAGE)
    out = call(
        tool(server),
        "send",
        ctx,
        chatId=-100123,
        text="hello",
        parseMode="markdown-v2",
        disableNotification=True,
        disableWebPagePreview=True,
        replyToMessageId=7,
        allowSendingWithoutReply=True,
    )
    assert out == {
        "ok": True,
        "chatId": -100123,
        "messageId": 42,
        "date": 1700000000,
        "text": "hello",
    }
    (request,) = server.requests
    assert request.method == "POST"
    assert request.path == f"{PATH}/sendMessage"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "chat_id": -100123,
        "text": "hello",
        "parse_mode": "MarkdownV2",
        "disable_notification": True,
        "link_preview_options": {"is_disabled": True},
        "reply_parameters": {"message_id": 7, "allow_sending_without_reply": True},
    }


def test_send_plain_to_a_channel_name(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = telegram_ok({**MESSAGE, "chat": {"id": -1009}})
    out = call(tool(server), "send", ctx, chatId="@news", text="hi")
    assert out["chatId"] == -1009
    assert server.requests[0].body == {"chat_id": "@news", "text": "hi"}


def test_edit(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/editMessageText"] = telegram_ok(MESSAGE)
    out = call(tool(server), "edit", ctx, chatId="5", messageId=42, text="new", parseMode="html")
    assert out == {"ok": True, "chatId": 5, "messageId": 42, "edited": True}
    assert server.requests[0].body == {
        "chat_id": 5,
        "message_id": 42,
        "text": "new",
        "parse_mode": "HTML",
    }


def test_delete(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/deleteMessage"] = telegram_ok(True)
    out = call(tool(server), "delete", ctx, chatId=5, messageId=42)
    assert out == {"ok": True, "chatId": 5, "messageId": 42, "deleted": True}
    assert server.requests[0].body == {"chat_id": 5, "message_id": 42}


def test_react_and_clear(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/setMessageReaction"] = telegram_ok(True)
    handlers = tool(server)
    out = call(handlers, "react", ctx, chatId=5, messageId=42, emoji="👍", emojis=["🔥", "👍"])
    assert out == {
        "ok": True,
        "chatId": 5,
        "messageId": 42,
        "cleared": False,
        "emojis": ["👍", "🔥"],
        "reactionCount": 2,
    }
    assert server.requests[0].body == {
        "chat_id": 5,
        "message_id": 42,
        "reaction": [{"type": "emoji", "emoji": "👍"}, {"type": "emoji", "emoji": "🔥"}],
    }
    cleared = call(handlers, "react", ctx, chatId=5, messageId=42, clear=True, isBig=True)
    assert cleared["cleared"] is True
    assert cleared["reactionCount"] == 0
    assert server.requests[1].body == {
        "chat_id": 5,
        "message_id": 42,
        "reaction": [],
        "is_big": True,
    }


def test_react_needs_an_emoji(ctx: ToolContext, server: ChatApiServer) -> None:
    error = fail(tool(server), "react", ctx, chatId=5, messageId=42)
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert server.requests == []


@pytest.mark.parametrize(("given", "sent"), [(None, "typing"), ("upload-photo", "upload_photo")])
def test_set_chat_action(
    ctx: ToolContext, server: ChatApiServer, given: str | None, sent: str
) -> None:
    server.routes[f"{PATH}/sendChatAction"] = telegram_ok(True)
    args: dict[str, Any] = {"chatId": 5} if given is None else {"chatId": 5, "action": given}
    out = tool(server)["set_chat_action"](ctx, args)
    assert out == {"ok": True, "chatId": 5, "status": "sent", "action": sent}
    assert server.requests[0].body == {"chat_id": 5, "action": sent}


def test_set_chat_action_refuses_an_unknown_action(ctx: ToolContext, server: ChatApiServer) -> None:
    error = fail(tool(server), "set_chat_action", ctx, chatId=5, action="dancing")
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert "upload_photo" in error.message


PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def test_download_file(ctx: ToolContext, server: ChatApiServer, workdir: Path) -> None:
    server.routes[f"{PATH}/getFile"] = telegram_ok(
        {
            "file_id": "AgAD",
            "file_unique_id": "uniq",
            "file_size": len(PHOTO),
            "file_path": "photos/file 1.png",
        }
    )
    server.routes[f"/file{PATH}/photos/file%201.png"] = file_reply(PHOTO)
    out = call(tool(server), "download_file", ctx, fileId="AgAD", savePath="in/photo.png")
    encoded = base64.b64encode(PHOTO).decode()
    assert out == {
        "ok": True,
        "fileId": "AgAD",
        "fileUniqueId": "uniq",
        "filePath": "photos/file 1.png",
        "fileName": "file 1.png",
        "size": len(PHOTO),
        "mimeType": "image/png",  # octet-stream from the server, so guessed from the name
        "base64": encoded,
        "dataUrl": f"data:image/png;base64,{encoded}",
        "savedPath": "in/photo.png",
    }
    assert (workdir / "in" / "photo.png").read_bytes() == PHOTO
    get_file, download = server.requests
    assert get_file.body == {"file_id": "AgAD"}
    assert (download.method, download.path) == ("GET", f"/file{PATH}/photos/file%201.png")


def test_download_file_without_base64(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/getFile"] = telegram_ok({"file_id": "X", "file_path": "voice/a.oga"})
    server.routes[f"/file{PATH}/voice/a.oga"] = file_reply(b"OggS", "audio/ogg")
    out = call(
        tool(server), "download_file", ctx, fileId="X", includeBase64=False, includeDataUrl=False
    )
    assert out["size"] == 4
    assert out["mimeType"] == "audio/ogg"
    assert "base64" not in out
    assert "dataUrl" not in out
    assert "savedPath" not in out


# -- failures ----------------------------------------------------------------------------


def test_ok_false_is_a_structured_error(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = telegram_error(400, "Bad Request: chat not found")
    error = fail(tool(server), "send", ctx, chatId=1, text="x")
    assert error.code == "E_TELEGRAM_API_ERROR"
    assert error.message == "[telegram] sendMessage failed (code 400): Bad Request: chat not found"
    assert error.suggestion is not None
    assert "chatId" in error.suggestion
    assert_no_token(error)


def test_a_refused_token_says_so(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/deleteMessage"] = telegram_error(401, "Unauthorized")
    error = fail(tool(server), "delete", ctx, chatId=1, messageId=2)
    assert error.code == "E_TELEGRAM_API_ERROR"
    assert error.suggestion is not None
    assert "token" in error.suggestion


def test_429_names_retry_after(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = telegram_error(
        429, "Too Many Requests: retry after 7", retry_after=7
    )
    error = fail(tool(server), "send", ctx, chatId=1, text="x")
    assert error.code == "E_TELEGRAM_RATE_LIMITED"
    assert "retry_after=7 s" in error.message
    assert error.suggestion is not None
    assert "Wait 7 seconds" in error.suggestion


def test_an_answer_that_is_not_json(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = file_reply(b"<html>502 Bad Gateway</html>", "text/html")
    error = fail(tool(server), "send", ctx, chatId=1, text="x")
    assert error.code == "E_CHAT_BAD_RESPONSE"
    assert_no_token(error)


def test_server_gone_is_a_connection_error(ctx: ToolContext) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    handlers = configure(
        {"apiBaseUrl": f"http://127.0.0.1:{port}", "allowedHosts": [f"127.0.0.1:{port}"]}
    )
    error = fail(handlers, "send", ctx, chatId=1, text="x")
    assert error.code == "E_HTTP_CONNECTION_FAILED"
    assert_no_token(error)


def test_server_closing_without_an_answer(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = DROP
    error = fail(tool(server), "send", ctx, chatId=1, text="x")
    assert error.code == "E_HTTP_CONNECTION_FAILED"
    assert_no_token(error)


def test_timeout_is_bounded(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = HANG
    started = time.monotonic()
    error = fail(tool(server), "send", ctx, chatId=1, text="x", timeoutMs=300)
    assert time.monotonic() - started < 3
    assert error.code == "E_HTTP_TIMEOUT"
    assert_no_token(error)


def test_an_announced_oversize_file_is_not_downloaded(
    ctx: ToolContext, server: ChatApiServer
) -> None:
    server.routes[f"{PATH}/getFile"] = telegram_ok(
        {"file_id": "X", "file_size": 5_000_000, "file_path": "documents/big.zip"}
    )
    error = fail(tool(server), "download_file", ctx, fileId="X")
    assert error.code == "E_CHAT_FILE_TOO_LARGE"
    assert "5000000 bytes" in error.message
    assert [r.path for r in server.requests] == [f"{PATH}/getFile"]


def test_a_download_past_max_bytes_stops(
    ctx: ToolContext, server: ChatApiServer, workdir: Path
) -> None:
    server.routes[f"{PATH}/getFile"] = telegram_ok({"file_id": "X", "file_path": "d/big.bin"})
    server.routes[f"/file{PATH}/d/big.bin"] = file_reply(b"x" * 5000)
    error = fail(tool(server), "download_file", ctx, fileId="X", maxBytes=1000, savePath="b.bin")
    assert error.code == "E_CHAT_FILE_TOO_LARGE"
    assert not (workdir / "b.bin").exists()


def test_max_bytes_has_a_ceiling(ctx: ToolContext, server: ChatApiServer) -> None:
    error = fail(tool(server), "download_file", ctx, fileId="X", maxBytes=20_000_001)
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert server.requests == []


def test_save_path_stays_in_the_workdir(ctx: ToolContext, server: ChatApiServer) -> None:
    error = fail(tool(server), "download_file", ctx, fileId="X", savePath="../outside/x.png")
    assert error.code == "E_CHAT_PATH_OUTSIDE_WORKDIR"
    assert server.requests == []


def test_a_download_never_writes_through_a_hard_link(
    ctx: ToolContext, server: ChatApiServer, workdir: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.link(victim, workdir / "x.png")
    server.routes[f"{PATH}/getFile"] = telegram_ok({"file_id": "X", "file_path": "p/x.png"})
    server.routes[f"/file{PATH}/p/x.png"] = file_reply(PHOTO)
    error = fail(tool(server), "download_file", ctx, fileId="X", savePath="x.png")
    assert error.code == "E_CHAT_PATH_OUTSIDE_WORKDIR"
    assert victim.read_text() == "keep me"  # not even truncated


def test_a_download_onto_a_fifo_does_not_hang(
    ctx: ToolContext, server: ChatApiServer, workdir: Path
) -> None:
    os.mkfifo(workdir / "pipe")
    server.routes[f"{PATH}/getFile"] = telegram_ok({"file_id": "X", "file_path": "p/x.png"})
    server.routes[f"/file{PATH}/p/x.png"] = file_reply(PHOTO)
    error = fail(tool(server), "download_file", ctx, fileId="X", savePath="pipe")
    assert error.code == "E_FS_NOT_A_FILE"


# -- the token ---------------------------------------------------------------------------


def test_token_lookup_order(
    ctx: ToolContext, server: ChatApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes = {}  # every path answers 404: only the path sent matters
    handlers = tool(server)
    for name in reversed(TOKEN_ENV):  # later names are set first, so each must win in turn
        monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
        monkeypatch.setenv(name, f"1:{name}")
    for expected in TOKEN_ENV:
        fail(handlers, "delete", ctx, chatId=1, messageId=1)
        assert server.requests[-1].path == f"/bot1:{expected}/deleteMessage"
        monkeypatch.delenv(expected)
    error = fail(handlers, "delete", ctx, chatId=1, messageId=1)
    assert error.code == "E_CHAT_TOKEN_MISSING"
    assert all(name in error.message for name in TOKEN_ENV)
    assert len(server.requests) == len(TOKEN_ENV)  # nothing sent without a token


def test_config_token_comes_first(
    ctx: ToolContext, server: ChatApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_BOT", "9:from-config")
    monkeypatch.setenv("GOONDAN_SECRET_TELEGRAM_BOT", "8:from-secret")
    server.routes["/bot9:from-config/deleteMessage"] = telegram_ok(True)
    server.routes["/bot8:from-secret/deleteMessage"] = telegram_ok(True)
    by_env = tool(server, token={"valueFrom": {"env": "MY_BOT"}})
    assert call(by_env, "delete", ctx, chatId=1, messageId=1)["deleted"] is True
    by_secret = tool(server, token={"valueFrom": {"secretRef": {"ref": "Secret/telegram-bot"}}})
    assert call(by_secret, "delete", ctx, chatId=1, messageId=1)["deleted"] is True
    assert [r.path.split("/")[1] for r in server.requests] == [
        "bot9:from-config",
        "bot8:from-secret",
    ]


def test_a_configured_token_that_is_unset_does_not_fall_back(
    ctx: ToolContext, server: ChatApiServer
) -> None:
    handlers = tool(server, token={"valueFrom": {"env": "UNSET_BOT_TOKEN"}})
    error = fail(handlers, "send", ctx, chatId=1, text="x")
    assert error.code == "E_CHAT_TOKEN_MISSING"
    assert "UNSET_BOT_TOKEN" in error.message
    assert server.requests == []


@pytest.mark.parametrize(
    "token",
    [
        "not an object",
        {"value": ""},
        {"value": "1:a", "valueFrom": {"env": "X"}},
        {"valueFrom": {"env": "X", "secretRef": {"ref": "Secret/a"}}},
        {"valueFrom": {"secretRef": {"ref": "Config/a"}}},
    ],
)
def test_bad_token_config_is_refused_without_echoing_it(token: Any) -> None:
    with pytest.raises(ToolConfigError) as info:
        configure({"token": token})
    assert "1:a" not in str(info.value)


def test_the_token_never_leaks(ctx: ToolContext, server: ChatApiServer, workdir: Path) -> None:
    """An API that quotes the request path back (with the token in it) is scrubbed everywhere."""

    def echo_path(request: Any) -> Any:
        return telegram_error(400, f"Bad Request: cannot handle {request.path}")

    server.routes[f"{PATH}/sendMessage"] = echo_path
    server.routes[f"{PATH}/getFile"] = telegram_ok({"file_id": "X", "file_path": "a/b.txt"})
    server.routes[f"/file{PATH}/a/b.txt"] = echo_path
    handlers = tool(server)
    with structlog.testing.capture_logs() as logs:
        send_error = fail(handlers, "send", ctx, chatId=1, text="x")
        download_error = fail(handlers, "download_file", ctx, fileId="X")
    for error in (send_error, download_error):
        assert error.code == "E_TELEGRAM_API_ERROR"
        assert "[REDACTED]" in error.message
        assert_no_token(error)
    assert logs, "API errors are logged"
    assert TOKEN not in json.dumps(logs, default=str)


async def test_through_the_executor_the_result_has_no_token(
    server: ChatApiServer, workdir: Path
) -> None:
    server.routes[f"{PATH}/sendMessage"] = lambda r: telegram_error(403, f"Forbidden: {r.path}")
    harness = Harness(workdir)
    harness.add("telegram__send", tool(server)["send"], parameters={"type": "object"})
    with structlog.testing.capture_logs() as logs:
        result = await harness.call("telegram__send", {"chatId": 1, "text": "hi"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "E_TELEGRAM_API_ERROR"
    assert TOKEN not in json.dumps(result.to_json())
    assert TOKEN not in json.dumps(logs, default=str)


# -- the address policy ------------------------------------------------------------------


def test_loopback_api_base_is_refused_unless_allowed(
    ctx: ToolContext, server: ChatApiServer
) -> None:
    handlers = configure({"apiBaseUrl": f"https://127.0.0.1:{server.port}"})
    error = fail(handlers, "send", ctx, chatId=1, text="x")
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert server.requests == []


def test_a_private_address_is_refused_before_connecting(ctx: ToolContext) -> None:
    handlers = configure({"apiBaseUrl": "https://10.1.2.3"})
    error = fail(handlers, "send", ctx, chatId=1, text="x", timeoutMs=60_000)
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert "10.1.2.3" in error.message
    assert_no_token(error)


def test_plain_http_base_needs_allowed_hosts(server: ChatApiServer) -> None:
    with pytest.raises(ToolConfigError, match="plain http"):
        configure({"apiBaseUrl": server.url})


def test_unknown_config_key() -> None:
    with pytest.raises(ToolConfigError, match="unknown key"):
        configure({"apiBaseURL": "https://example.org"})


def test_args_reach_the_handler_checked(ctx: ToolContext, server: ChatApiServer) -> None:
    handlers = tool(server)
    bad: list[JsonObject] = [
        {"chatId": True, "text": "x"},
        {"chatId": 1, "text": ""},
        {"chatId": 1, "text": "x", "parseMode": "rtf"},
        {"chatId": 1, "text": "x", "timeoutMs": 0},
    ]
    for args in bad:
        with pytest.raises(ToolError) as info:
            handlers["send"](ctx, args)
        assert info.value.code == "E_TOOL_INVALID_ARGS", args
    assert server.requests == []


def test_a_429_without_json_is_still_rate_limited(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = Reply(
        status=429, raw=b"slow down", headers={"content-type": "text/plain", "Retry-After": "3"}
    )
    error = fail(tool(server), "send", ctx, chatId=1, text="x")
    assert error.code == "E_TELEGRAM_RATE_LIMITED"
    assert "retry_after=3 s" in error.message


def test_send_answers_the_chat_the_turn_came_from(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes[f"{PATH}/sendMessage"] = telegram_ok(MESSAGE)
    from_telegram = dataclasses.replace(
        ctx, inbound={"connector_name": "telegram", "chat_id": "-100123", "message_id": "9"}
    )
    call(tool(server), "send", from_telegram, text="hello")
    assert server.requests[0].body == {"chat_id": -100123, "text": "hello"}
    # Elsewhere there is no chat to default to: the model must name one.
    error = fail(tool(server), "send", ctx, text="hello")
    assert "chatId" in str(error)


# -- the settings shared with the telegram connector -----------------------------------------


@pytest.fixture
def no_shared_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TELEGRAM_API_BASE_URL", "TELEGRAM_ALLOWED_HOSTS", "TELEGRAM_ALLOW_PLAIN_HTTP"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_shared_settings")
def test_the_connectors_base_url_setting_serves_the_tool(
    server: ChatApiServer, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configured with nothing, the tool answers where ``TELEGRAM_API_BASE_URL`` points, read
    at call time (a tool module is loaded before its process has its own environment)."""
    handlers = configure({})
    server.routes[f"{PATH}/sendMessage"] = telegram_ok(MESSAGE)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", server.url + "/")
    result = call(handlers, "send", ctx, chatId=-100123, text="hello")
    assert result["messageId"] == 42
    [request] = server.requests
    assert request.path == f"{PATH}/sendMessage"


@pytest.mark.usefixtures("no_shared_settings")
def test_the_config_base_url_wins_over_the_shared_setting(
    server: ChatApiServer, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", "https://api.invalid")
    server.routes[f"{PATH}/sendMessage"] = telegram_ok(MESSAGE)
    assert call(tool(server), "send", ctx, chatId=1, text="hi")["ok"] is True


@pytest.mark.usefixtures("no_shared_settings")
def test_plain_http_off_this_machine_needs_the_host_allowed(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    handlers = configure({})
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", "http://bot-api.invalid:8081")
    error = fail(handlers, "send", ctx, chatId=1, text="hi")
    assert error.code == "E_CHAT_SETTING_INVALID"
    assert "TELEGRAM_API_BASE_URL" in error.message
    assert "TELEGRAM_ALLOWED_HOSTS" in error.message
    assert_no_token(error)
    # Listed, the host passes the plain-http rule and is then only looked up (no such name).
    monkeypatch.setenv("TELEGRAM_ALLOWED_HOSTS", "bot-api.invalid:8081, other.invalid")
    error = fail(handlers, "send", ctx, chatId=1, text="hi")
    assert error.code == "E_HTTP_DNS_FAILED"
    assert_no_token(error)


@pytest.mark.usefixtures("no_shared_settings")
def test_a_bad_allowed_hosts_entry_names_the_variable(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_ALLOWED_HOSTS", "host:notaport")
    error = fail(configure({}), "send", ctx, chatId=1, text="hi")
    assert error.code == "E_CHAT_SETTING_INVALID"
    assert "TELEGRAM_ALLOWED_HOSTS" in error.message
