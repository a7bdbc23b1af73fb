"""slack: what goes over the wire to the Web API, what comes back, and how it fails.

Every request goes to a local server speaking the Web API's JSON; the token must travel only in
the Authorization header and never show up in a result, an error or a log line.
"""

from __future__ import annotations

import base64
import dataclasses
import json
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
    slack_error,
    slack_ok,
)
from tests.support.wire_server import Reply
from tools_base import ToolConfigError, ToolContext, ToolError, ToolHandler
from tools_base.tools.slack import TOKEN_ENV, configure

TOKEN = "xoxb-1111-2222-SecretSlackToken"
BEARER = f"Bearer {TOKEN}"


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TOKEN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)


def tool(server: ChatApiServer, **config: Any) -> dict[str, ToolHandler]:
    return configure(
        {"apiBaseUrl": f"{server.url}/api", "allowedHosts": [server.host_entry], **config}
    )


def call(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> Any:
    return handlers[name](ctx, args)


def fail(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        call(handlers, name, ctx, **args)
    assert TOKEN not in info.value.message
    assert info.value.__cause__ is None or TOKEN not in str(info.value.__cause__)
    return info.value


def test_send(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/chat.postMessage"] = slack_ok(
        channel="C1", ts="1700000000.000100", message={"text": "hi", "thread_ts": "1699.1"}
    )
    out = call(
        tool(server),
        "send",
        ctx,
        channelId="C1",
        text="hi",
        threadTs="1699.1",
        unfurlLinks=False,
        replyBroadcast=True,
    )
    assert out == {
        "ok": True,
        "channelId": "C1",
        "ts": "1700000000.000100",
        "threadTs": "1699.1",
        "text": "hi",
    }
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/api/chat.postMessage")
    assert request.headers["authorization"] == BEARER
    assert request.headers["content-type"] == "application/json; charset=utf-8"
    assert request.body == {
        "channel": "C1",
        "text": "hi",
        "thread_ts": "1699.1",
        "unfurl_links": False,
        "reply_broadcast": True,
    }


HISTORY = [
    {
        "type": "message",
        "user": "U1",
        "text": "see file",
        "ts": "1700.2",
        "files": [
            {
                "id": "F1",
                "name": "a.pdf",
                "mimetype": "application/pdf",
                "size": 3,
                "url_private": "https://files.slack.com/files-pri/T1-F1/a.pdf",
                "thumb_64": "ignored",
            }
        ],
        "reactions": [{"name": "eyes", "count": 2, "users": ["U2", "U3"]}],
    },
    {"type": "message", "bot_id": "B1", "subtype": "bot_message", "text": "hi", "ts": "1700.1"},
]


def test_read_history(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/conversations.history"] = slack_ok(
        messages=HISTORY, has_more=True, response_metadata={"next_cursor": "bmV4dA=="}
    )
    out = call(tool(server), "read", ctx, channelId="C1", oldest="1600.0")
    assert out == {
        "ok": True,
        "channelId": "C1",
        "threadTs": None,
        "count": 2,
        "messages": [
            {
                "ts": "1700.2",
                "text": "see file",
                "user": "U1",
                "files": [
                    {
                        "id": "F1",
                        "name": "a.pdf",
                        "mimetype": "application/pdf",
                        "size": 3,
                        "urlPrivate": "https://files.slack.com/files-pri/T1-F1/a.pdf",
                    }
                ],
                "reactions": [{"name": "eyes", "count": 2}],
            },
            {"ts": "1700.1", "text": "hi", "botId": "B1", "subtype": "bot_message"},
        ],
        "hasMore": True,
        "nextCursor": "bmV4dA==",
    }
    (request,) = server.requests
    assert request.headers["authorization"] == BEARER
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert request.body == {"channel": "C1", "limit": "20", "oldest": "1600.0"}


def test_read_a_thread_and_one_message(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/conversations.replies"] = slack_ok(messages=HISTORY[1:])
    server.routes["/api/conversations.history"] = slack_ok(messages=HISTORY[:1])
    handlers = tool(server)
    thread = call(handlers, "read", ctx, channelId="C1", threadTs="1699.1", limit=50, cursor="c")
    assert thread["threadTs"] == "1699.1"
    assert thread["count"] == 1
    assert server.requests[0].body == {
        "channel": "C1",
        "ts": "1699.1",
        "limit": "50",
        "cursor": "c",
    }
    one = call(handlers, "read", ctx, channelId="C1", messageTs="1700.2")
    assert one["messages"][0]["ts"] == "1700.2"
    assert server.requests[1].path == "/api/conversations.history"
    assert server.requests[1].body == {
        "channel": "C1",
        "limit": "1",
        "latest": "1700.2",
        "inclusive": "true",
    }


def test_read_limit_bounds(ctx: ToolContext, server: ChatApiServer) -> None:
    for limit in (0, 1001, 2.5):
        error = fail(tool(server), "read", ctx, channelId="C1", limit=limit)
        assert error.code == "E_TOOL_INVALID_ARGS"
    assert server.requests == []


def test_edit_and_delete(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/chat.update"] = slack_ok(channel="C1", ts="1700.2", text="new")
    server.routes["/api/chat.delete"] = slack_ok(channel="C1", ts="1700.2")
    handlers = tool(server)
    edited = call(handlers, "edit", ctx, channelId="C1", messageTs="1700.2", text="new")
    assert edited == {"ok": True, "channelId": "C1", "ts": "1700.2", "edited": True}
    deleted = call(handlers, "delete", ctx, channelId="C1", messageTs="1700.2")
    assert deleted == {"ok": True, "channelId": "C1", "ts": "1700.2", "deleted": True}
    update, delete = server.requests
    assert update.body == {"channel": "C1", "ts": "1700.2", "text": "new"}
    assert delete.body == {"channel": "C1", "ts": "1700.2"}
    assert update.headers["authorization"] == delete.headers["authorization"] == BEARER


def test_react_once_per_distinct_name(ctx: ToolContext, server: ChatApiServer) -> None:
    answers = iter([slack_ok(), slack_error("already_reacted")])
    server.routes["/api/reactions.add"] = lambda request: next(answers)
    out = call(
        tool(server),
        "react",
        ctx,
        channelId="C1",
        messageTs="1.2",
        emoji=":eyes:",
        emojis=["ok", "eyes"],
    )
    assert out == {
        "ok": True,
        "channelId": "C1",
        "messageTs": "1.2",
        "emojis": ["eyes", "ok"],
        "reactionCount": 2,
    }
    assert [r.body for r in server.requests] == [
        {"channel": "C1", "timestamp": "1.2", "name": "eyes"},
        {"channel": "C1", "timestamp": "1.2", "name": "ok"},
    ]


FILE = bytes(range(256)) * 8


def test_download_file(ctx: ToolContext, server: ChatApiServer, workdir: Path) -> None:
    server.routes["/files-pri/T1-F1/report.pdf"] = file_reply(FILE, "application/pdf")
    url = f"{server.url}/files-pri/T1-F1/report.pdf"
    out = call(tool(server), "download_file", ctx, url=url, savePath="files/report.pdf")
    encoded = base64.b64encode(FILE).decode()
    assert out == {
        "ok": True,
        "url": url,
        "fileName": "report.pdf",
        "size": len(FILE),
        "mimeType": "application/pdf",
        "base64": encoded,
        "dataUrl": f"data:application/pdf;base64,{encoded}",
        "savedPath": "files/report.pdf",
    }
    assert (workdir / "files" / "report.pdf").read_bytes() == FILE
    (request,) = server.requests
    assert (request.method, request.headers["authorization"]) == ("GET", BEARER)


def test_download_refuses_a_host_that_is_not_slack(ctx: ToolContext, server: ChatApiServer) -> None:
    error = fail(tool(server), "download_file", ctx, url="https://attacker.example/steal")
    assert error.code == "E_SLACK_FILE_URL_REFUSED"
    assert "attacker.example" in error.message
    assert server.requests == []


def test_download_over_max_bytes(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/f/big"] = file_reply(b"x" * 10_000)
    error = fail(tool(server), "download_file", ctx, url=f"{server.url}/f/big", maxBytes=100)
    assert error.code == "E_CHAT_FILE_TOO_LARGE"
    assert "10000 bytes" in error.message


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=302, raw=b"", headers={"location": "https://slack.com/signin"}),
        file_reply(b"<html>sign in</html>", "text/html; charset=utf-8"),
        Reply(status=403, raw=b"forbidden", headers={"content-type": "text/plain"}),
    ],
)
def test_download_that_is_not_the_file(
    ctx: ToolContext, server: ChatApiServer, reply: Reply
) -> None:
    server.routes["/f/x"] = reply
    error = fail(tool(server), "download_file", ctx, url=f"{server.url}/f/x")
    assert error.code == "E_SLACK_API_ERROR"
    assert error.suggestion is not None
    assert "files:read" in error.suggestion


def test_ok_false_is_a_structured_error(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/chat.postMessage"] = slack_error("channel_not_found")
    error = fail(tool(server), "send", ctx, channelId="C9", text="x")
    assert error.code == "E_SLACK_API_ERROR"
    assert error.message == "[slack] chat.postMessage failed: channel_not_found"
    assert error.suggestion is not None
    assert "member of the channel" in error.suggestion


@pytest.mark.parametrize(
    "reply",
    [
        slack_error("ratelimited", 429, **{"Retry-After": "30"}),
        Reply(status=429, raw=b"", headers={"Retry-After": "30", "content-type": "text/plain"}),
    ],
)
def test_429_names_retry_after(ctx: ToolContext, server: ChatApiServer, reply: Reply) -> None:
    server.routes["/api/chat.postMessage"] = reply
    error = fail(tool(server), "send", ctx, channelId="C1", text="x")
    assert error.code == "E_SLACK_RATE_LIMITED"
    assert "Retry-After: 30 s" in error.message
    assert error.suggestion is not None
    assert "Wait 30 seconds" in error.suggestion


def test_network_errors(ctx: ToolContext, server: ChatApiServer) -> None:
    server.routes["/api/chat.postMessage"] = DROP
    server.routes["/api/chat.delete"] = HANG
    handlers = tool(server)
    assert fail(handlers, "send", ctx, channelId="C1", text="x").code == "E_HTTP_CONNECTION_FAILED"
    started = time.monotonic()
    error = fail(handlers, "delete", ctx, channelId="C1", messageTs="1.2", timeoutMs=300)
    assert error.code == "E_HTTP_TIMEOUT"
    assert time.monotonic() - started < 3


def test_token_lookup_order(
    ctx: ToolContext, server: ChatApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/api/chat.delete"] = slack_ok()
    handlers = tool(server)
    for name in TOKEN_ENV:
        monkeypatch.setenv(name, f"xoxb-{name}")
    for expected in TOKEN_ENV:
        call(handlers, "delete", ctx, channelId="C1", messageTs="1.2")
        assert server.requests[-1].headers["authorization"] == f"Bearer xoxb-{expected}"
        monkeypatch.delenv(expected)
    error = fail(handlers, "delete", ctx, channelId="C1", messageTs="1.2")
    assert error.code == "E_CHAT_TOKEN_MISSING"
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-env")
    monkeypatch.setenv("GOONDAN_SECRET_SLACK_BOT_TOKEN", "xoxb-secret")
    configured = tool(server, token={"valueFrom": {"secretRef": {"ref": "Secret/slack-bot"}}})
    call(configured, "delete", ctx, channelId="C1", messageTs="1.2")
    assert server.requests[-1].headers["authorization"] == "Bearer xoxb-secret"


def test_the_token_never_leaks(ctx: ToolContext, server: ChatApiServer) -> None:
    """An API that quotes the Authorization header back is scrubbed in errors and logs."""
    server.routes["/api/chat.postMessage"] = lambda r: slack_error(
        f"invalid_auth: {r.headers['authorization']}"
    )
    with structlog.testing.capture_logs() as logs:
        error = fail(tool(server), "send", ctx, channelId="C1", text="x")
    assert error.code == "E_SLACK_API_ERROR"
    assert "[REDACTED]" in error.message
    assert logs
    assert TOKEN not in json.dumps(logs, default=str)


def test_a_private_api_address_is_refused(ctx: ToolContext, server: ChatApiServer) -> None:
    handlers = configure({"apiBaseUrl": f"https://127.0.0.1:{server.port}/api"})
    assert fail(handlers, "send", ctx, channelId="C1", text="x").code == "E_HTTP_FORBIDDEN_ADDRESS"
    private = configure({"apiBaseUrl": "https://192.168.0.10/api"})
    assert fail(private, "send", ctx, channelId="C1", text="x").code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert server.requests == []


def test_file_hosts_config(ctx: ToolContext, server: ChatApiServer) -> None:
    with pytest.raises(ToolConfigError):
        configure({"fileHosts": ["https://files.example"]})
    handlers = configure({"fileHosts": ["10.0.0.7"]})
    # An added host is allowed by name, then still goes through the address policy.
    error = fail(handlers, "download_file", ctx, url="https://10.0.0.7/x")
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    refused = fail(handlers, "download_file", ctx, url="https://10.0.0.8/x")
    assert refused.code == "E_SLACK_FILE_URL_REFUSED"


def test_send_answers_in_the_thread_the_turn_came_from(
    ctx: ToolContext, server: ChatApiServer
) -> None:
    server.routes["/api/chat.postMessage"] = slack_ok(channel="C9", ts="1700.2", message={})
    from_slack = dataclasses.replace(
        ctx, inbound={"connector_name": "slack", "channel_id": "C9", "ts": "1699.5"}
    )
    call(tool(server), "send", from_slack, text="on it")
    assert server.requests[0].body == {"channel": "C9", "text": "on it", "thread_ts": "1699.5"}
