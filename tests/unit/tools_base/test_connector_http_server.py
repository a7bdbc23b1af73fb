"""What every HTTP connector's listener does, whatever the connector: paths, methods, body
limit, malformed bodies, failures, settings, and stopping. Driven through the webhook connector
over real sockets."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx2
import pytest

from tests.support.http_connector import (
    HttpConnectorContext,
    port_is_free,
    run_until_error,
    serving,
)
from tools_base import ConnectorError, ConnectorEvent
from tools_base.connectors import webhook
from tools_base.connectors._http import MAX_BODY_BYTES, normalise_path


def context(**config: str) -> HttpConnectorContext:
    return HttpConnectorContext("WEBHOOK", config=config, declared={"webhook_message"})


async def test_listening_is_logged_once_with_host_port_and_path() -> None:
    ctx = context(WEBHOOK_PATH="hooks/in/")
    async with serving(webhook.run, ctx):
        pass
    lines = [(level, fields) for level, event, fields in ctx.log.records if "listening" in event]
    assert lines == [
        (
            "info",
            {
                "connector": "webhook",
                "host": "127.0.0.1",
                "port": ctx.log.port,
                "path": "/hooks/in",
                "signed": False,
            },
        )
    ]


async def test_other_paths_are_404_other_methods_405() -> None:
    ctx = context(WEBHOOK_PATH="/hooks/in")
    async with serving(webhook.run, ctx) as client:
        assert (await client.post("/", json={"text": "x"})).status_code == 404
        assert (await client.post("/hooks/in/more", json={"text": "x"})).status_code == 404
        response = await client.get("/hooks/in")
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"
        assert (await client.put("/hooks/in", json={"text": "x"})).status_code == 405
        assert (await client.post("/hooks/in", json={"text": "ok"})).status_code == 202
    assert (await ctx.next_event()).text() == "ok"


@pytest.mark.parametrize(
    ("limit", "size", "status"),
    [
        (None, MAX_BODY_BYTES + 1, 413),  # the default limit, 1 MiB
        ("1024", 1025, 413),
        ("1024", 10 * 1024 * 1024, 413),  # past what is drained: refused unread
    ],
)
async def test_a_body_over_the_limit_is_413_and_the_server_carries_on(
    limit: str | None, size: int, status: int
) -> None:
    ctx = context(**({"WEBHOOK_MAX_BODY_BYTES": limit} if limit else {}))
    async with serving(webhook.run, ctx) as client:
        body = json.dumps({"text": "x" * size}).encode()
        try:
            response = await client.post("/", content=body)
        except httpx2.TransportError:
            # Past what is drained the body is left unread and the connection closed: the
            # client may see the reset before the answer. Only then.
            assert size > 8 * 1024
        else:
            assert response.status_code == status
        assert (await client.post("/", json={"text": "after"})).status_code == 202
    assert (await ctx.next_event()).text() == "after"


async def test_a_body_at_the_limit_is_taken() -> None:
    ctx = context(WEBHOOK_MAX_BODY_BYTES="1024")
    body = json.dumps({"text": "x" * 1000}).encode()
    body += b" " * (1024 - len(body))
    async with serving(webhook.run, ctx) as client:
        assert (await client.post("/", content=body)).status_code == 202
    assert (await ctx.next_event()).text() == "x" * 1000


@pytest.mark.parametrize(
    "body", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"", b"[" * 100_000]
)
async def test_malformed_json_is_400(body: bytes) -> None:
    ctx = context()
    async with serving(webhook.run, ctx) as client:
        response = await client.post("/", content=body)
        assert response.status_code == 400
        assert response.json()["ok"] is False
        assert (await client.post("/", json={"text": "still up"})).status_code == 202
    assert (await ctx.next_event()).text() == "still up"


async def test_a_failing_emit_is_500_logged_without_the_body() -> None:
    ctx = context()
    calls = 0

    async def emit(event: ConnectorEvent) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom with secret-ish payload")
        await ctx.events.put(event)

    ctx.emit = emit  # type: ignore[method-assign]
    async with serving(webhook.run, ctx) as client:
        assert (await client.post("/", json={"text": "first"})).status_code == 500
        assert (await client.post("/", json={"text": "second"})).status_code == 202
    assert (await ctx.next_event()).text() == "second"
    assert ("error", "connector request failed", {"error": "RuntimeError"}) in ctx.log.records
    assert "secret-ish" not in ctx.log.text()


async def test_cancelling_run_releases_the_port_and_closes_open_connections() -> None:
    ctx = context()
    async with serving(webhook.run, ctx) as client:
        assert (await client.post("/", json={"text": "over httpx"})).status_code == 202
        port = ctx.log.port
        assert port is not None
        assert not port_is_free(port)
        # a raw keep-alive connection, left open across the cancellation
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = b'{"text": "raw"}'
        writer.write(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        async with asyncio.timeout(10):
            assert (await reader.readline()).startswith(b"HTTP/1.1 202")
    # serving() cancelled run and checked the port is free; the idle connection was closed
    try:
        async with asyncio.timeout(10):
            while await reader.read(65536):
                pass
    finally:
        writer.close()
    again = context(WEBHOOK_PORT=str(port))
    async with serving(webhook.run, again) as client:
        assert (await client.post("/", json={"text": "again"})).status_code == 202
    assert again.log.port == port
    assert [(await ctx.next_event()).text() for _ in range(2)] == ["over httpx", "raw"]


async def test_a_port_in_use_is_a_connector_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        error = await run_until_error(webhook.run, context(WEBHOOK_PORT=str(port)))
    assert isinstance(error, ConnectorError)
    assert error.code == "E_CONNECTOR_CONFIG"
    assert f"127.0.0.1:{port}" in str(error)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"WEBHOOK_PORT": "http"}, "WEBHOOK_PORT (or PORT) must be a whole number"),
        ({"WEBHOOK_PORT": "70000"}, "between 0 and 65535"),
        ({"WEBHOOK_MAX_BODY_BYTES": "0"}, "WEBHOOK_MAX_BODY_BYTES must be between"),
        ({"WEBHOOK_HOST": "no-such-host.invalid", "WEBHOOK_ALLOW_UNSIGNED": "1"}, "cannot resolve"),
        ({"WEBHOOK_HOST": "0.0.0.0"}, "refusing to listen on 0.0.0.0 without a signing secret"),
    ],
)
async def test_bad_settings_are_connector_errors(config: dict[str, str], message: str) -> None:
    error = await run_until_error(webhook.run, context(**config))
    assert isinstance(error, ConnectorError)
    assert message in str(error)


async def test_off_loopback_listens_with_a_secret_or_when_unsigned_is_allowed() -> None:
    allowed = context(WEBHOOK_HOST="0.0.0.0", WEBHOOK_ALLOW_UNSIGNED="true")
    async with serving(webhook.run, allowed) as client:
        assert (await client.post("/", json={"text": "open"})).status_code == 202
    signed = HttpConnectorContext(
        "WEBHOOK", config={"WEBHOOK_HOST": "0.0.0.0"}, secrets={"signingSecret": "s3cr3t-value"}
    )
    async with serving(webhook.run, signed) as client:
        assert (await client.post("/", json={"text": "no signature"})).status_code == 401
    assert "s3cr3t-value" not in signed.log.text()


def test_paths_are_normalised() -> None:
    assert normalise_path("") == "/"
    assert normalise_path("/") == "/"
    assert normalise_path("slack/events/") == "/slack/events"
    assert normalise_path(" /a// ") == "/a"
