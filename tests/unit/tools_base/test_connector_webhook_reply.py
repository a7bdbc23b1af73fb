"""The webhook connector answers back: a Turn's answer POSTed, signed, to an allowed callback.

A real callback receiver on loopback records each request; the test checks its signature as a
receiver would (HMAC-SHA256 of ``<timestamp>.<body>`` under the Connection's secret). The
Turn's end is played by the test: it resolves the future ``emit_awaiting_answer`` returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.support.chat_server import ChatApiServer, ChatRequest, serve
from tests.support.http_connector import (
    HttpConnectorContext,
    RecordingLogger,
    run_until_error,
    serving,
)
from tests.support.wire_server import Reply
from tools_base import ConnectorError, TurnAnswer
from tools_base.connectors.webhook import run

SECRET = "reply-signing-secret-0123456789"
WAIT = 10.0


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PORT", "WEBHOOK_SIGNING_SECRET", "WEBHOOK_REPLY_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def receiver() -> Iterator[ChatApiServer]:
    yield from serve()


class CountingLogger(RecordingLogger):
    """Sets ``done`` once ``event`` was logged ``count`` times."""

    def __init__(self, event: str, count: int, done: asyncio.Event) -> None:
        super().__init__()
        self.event, self.count, self.done = event, count, done

    def _log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        super()._log(level, event, fields)
        if len([r for r in self.records if r[1] == self.event]) >= self.count:
            self.done.set()


def context(secret: str | None = SECRET, **config: str) -> HttpConnectorContext:
    settings = {"WEBHOOK_REPLY_RETRY_DELAY_MS": "10", **config}
    secrets = {"signingSecret": secret} if secret else {}
    return HttpConnectorContext(
        "WEBHOOK", config=settings, secrets=secrets, declared={"webhook_message"}
    )


def signed(payload: dict[str, Any], delivery: str | None = None) -> dict[str, Any]:
    """The keyword arguments of a signed POST of ``payload``."""
    body = json.dumps(payload).encode()
    timestamp = str(int(time.time()))
    signature = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    headers = {
        "content-type": "application/json",
        "X-Goondan-Timestamp": timestamp,
        "X-Goondan-Signature": "sha256=" + signature.hexdigest(),
    }
    if delivery is not None:
        headers["X-Goondan-Delivery"] = delivery
    return {"content": body, "headers": headers}


def verify(request: ChatRequest) -> dict[str, Any]:
    """What a receiver does: check the signature and the timestamp, then read the body."""
    timestamp = request.headers["x-goondan-timestamp"]
    assert abs(time.time() - int(timestamp)) < 300
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + request.raw, hashlib.sha256)
    given = request.headers["x-goondan-signature"].removeprefix("sha256=")
    assert hmac.compare_digest(given, expected.hexdigest()), "bad signature"
    body: dict[str, Any] = json.loads(request.raw)
    return body


async def requests_to(server: ChatApiServer, path: str, count: int) -> list[ChatRequest]:
    """The first ``count`` requests to ``path`` (waiting, bounded, in a thread)."""

    def matching(seen: list[ChatRequest]) -> list[ChatRequest]:
        return [r for r in seen if r.path.split("?", 1)[0] == path]

    seen = await asyncio.to_thread(server.wait_for, lambda s: len(matching(s)) >= count, WAIT)
    return matching(seen)


async def post_and_answer(
    client: httpx2.AsyncClient,
    ctx: HttpConnectorContext,
    payload: dict[str, Any],
    text: str,
    delivery: str = "d-1",
) -> None:
    answer = await client.post("/", **signed(payload, delivery=delivery))
    assert answer.status_code == 202
    await ctx.next_event(WAIT)
    [future] = ctx.awaiting
    future.set_result(TurnAnswer(text=text))


async def test_the_answer_goes_to_the_configured_callback_signed(
    receiver: ChatApiServer,
) -> None:
    receiver.routes["/cb"] = Reply(status=204, raw=b"")
    ctx = context(WEBHOOK_REPLY_URL=receiver.url + "/cb")
    async with serving(run, ctx) as client:
        await post_and_answer(client, ctx, {"text": "ping", "instanceKey": "ci:7"}, "pong")
        [request] = await requests_to(receiver, "/cb", 1)
    assert request.method == "POST"
    assert verify(request) == {
        "ok": True,
        "event": "webhook_message",
        "instanceKey": "ci:7",
        "delivery": "d-1",
        "text": "pong",
        "error": None,
    }
    assert request.headers["x-goondan-delivery"]
    assert SECRET not in ctx.log.text()


async def test_a_failed_turn_is_reported_as_such(receiver: ChatApiServer) -> None:
    receiver.routes["/cb"] = Reply(status=200, body={})
    ctx = context(WEBHOOK_REPLY_URL=receiver.url + "/cb")
    async with serving(run, ctx) as client:
        assert (await client.post("/", **signed({"text": "x"}))).status_code == 202
        await ctx.next_event(WAIT)
        ctx.awaiting[0].set_result(TurnAnswer(error="E_MAX_STEPS: too many steps"))
        [request] = await requests_to(receiver, "/cb", 1)
    body = verify(request)
    assert body["ok"] is False
    assert body["error"] == "E_MAX_STEPS: too many steps"
    assert body["text"] is None


async def test_reply_to_under_an_allowed_prefix_is_used(receiver: ChatApiServer) -> None:
    receiver.routes["/hooks/job-42"] = Reply(status=200, body={})
    ctx = context(WEBHOOK_REPLY_ALLOWED_URLS=f"https://elsewhere.invalid/x, {receiver.url}/hooks")
    async with serving(run, ctx) as client:
        payload = {"text": "q", "replyTo": receiver.url + "/hooks/job-42?run=1"}
        await post_and_answer(client, ctx, payload, "a")
        [request] = await requests_to(receiver, "/hooks/job-42", 1)
    assert request.path == "/hooks/job-42?run=1"
    assert verify(request)["text"] == "a"


@pytest.mark.parametrize(
    "reply_to",
    [
        pytest.param("http://169.254.169.254/hooks/latest/meta-data", id="other-host"),
        pytest.param("http://127.0.0.1:1/hooks/x", id="other-port"),
        pytest.param("{url}/hooks-evil/x", id="sibling-path"),
        pytest.param("{url}/hooks/../admin", id="dot-dot"),
        pytest.param("{url}/hooks/%2e%2e/admin", id="encoded-dots"),
        pytest.param("{url}/hooks\\..\\admin", id="backslash"),
        pytest.param("http://user@{hostport}/hooks/x", id="user-info"),
        pytest.param("https://{hostport}/hooks/x", id="other-scheme"),
        pytest.param("file:///etc/passwd", id="file"),
        pytest.param("not a url", id="garbage"),
        pytest.param(42, id="not-a-string"),
    ],
)
async def test_a_callback_outside_the_allow_list_is_refused(
    receiver: ChatApiServer, reply_to: Any
) -> None:
    """An attacker's callback URL (SSRF): no event, no request anywhere."""
    if isinstance(reply_to, str):
        hostport = receiver.host_entry
        reply_to = reply_to.format(url=receiver.url, hostport=hostport)
    ctx = context(WEBHOOK_REPLY_ALLOWED_URLS=receiver.url + "/hooks")
    async with serving(run, ctx) as client:
        answer = await client.post("/", **signed({"text": "q", "replyTo": reply_to}))
        assert answer.status_code == 422
        assert "replyTo" in answer.json()["error"]
        assert ctx.events.empty()
    assert not receiver.requests


async def test_reply_to_without_replies_configured_is_refused(receiver: ChatApiServer) -> None:
    ctx = context()
    async with serving(run, ctx) as client:
        answer = await client.post("/", **signed({"text": "q", "replyTo": receiver.url}))
        assert answer.status_code == 422
        assert ctx.events.empty()
    assert not receiver.requests


async def test_a_failing_callback_is_retried_with_the_same_delivery_id(
    receiver: ChatApiServer,
) -> None:
    statuses = [503, 429, 200]
    receiver.routes["/cb"] = lambda request: Reply(status=statuses.pop(0), body={})
    ctx = context(WEBHOOK_REPLY_URL=receiver.url + "/cb", WEBHOOK_REPLY_ATTEMPTS="4")
    async with serving(run, ctx) as client:
        await post_and_answer(client, ctx, {"text": "q"}, "a")
        attempts = await requests_to(receiver, "/cb", 3)
    assert len({r.headers["x-goondan-delivery"] for r in attempts}) == 1
    assert all(verify(r)["text"] == "a" for r in attempts)
    assert [r.at for r in attempts] == sorted(r.at for r in attempts)
    assert len(ctx.log.records) > 0
    assert SECRET not in ctx.log.text()


async def test_retries_are_bounded_and_a_client_error_is_not_retried(
    receiver: ChatApiServer,
) -> None:
    receiver.routes["/down"] = Reply(status=500, body={})
    receiver.routes["/bad"] = Reply(status=400, body={})
    ctx = context(
        WEBHOOK_REPLY_ALLOWED_URLS=receiver.url + "/down " + receiver.url + "/bad",
        WEBHOOK_REPLY_ATTEMPTS="3",
    )
    gave_up = asyncio.Event()
    ctx.log = CountingLogger("webhook reply failed", 2, gave_up)
    async with serving(run, ctx) as client:
        await post_and_answer(client, ctx, {"text": "q", "replyTo": receiver.url + "/down"}, "a")
        ctx.awaiting.clear()
        payload = {"text": "r", "replyTo": receiver.url + "/bad"}
        await post_and_answer(client, ctx, payload, "b", delivery="d-2")
        await requests_to(receiver, "/down", 3)
        await requests_to(receiver, "/bad", 1)
        # Both gave up, each once: no attempt can follow.
        async with asyncio.timeout(WAIT):
            await gave_up.wait()
    assert len([r for r in receiver.requests if r.path == "/down"]) == 3
    assert len([r for r in receiver.requests if r.path == "/bad"]) == 1


async def test_replies_need_a_signing_secret(receiver: ChatApiServer) -> None:
    error = await run_until_error(run, context(secret=None, WEBHOOK_REPLY_URL=receiver.url))
    assert isinstance(error, ConnectorError)
    assert "signing secret" in str(error)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("WEBHOOK_REPLY_URL", "http://hooks.example.com/cb"),
        ("WEBHOOK_REPLY_URL", "https://hooks.example.com/a/../b"),
        ("WEBHOOK_REPLY_ALLOWED_URLS", "https://u:p@hooks.example.com/cb"),
        ("WEBHOOK_REPLY_ALLOWED_URLS", "https://hooks.example.com/cb?token=1"),
        ("WEBHOOK_REPLY_ATTEMPTS", "0"),
    ],
)
async def test_bad_reply_settings_stop_the_connector(setting: str, value: str) -> None:
    config = {"WEBHOOK_REPLY_URL": "https://hooks.example.com/cb", setting: value}
    error = await run_until_error(run, context(**config))
    assert isinstance(error, ConnectorError)
    assert setting in str(error)
