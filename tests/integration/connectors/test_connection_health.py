"""A Connection says what is wrong with it: a boot error, a source that keeps failing, a crash,
in ``status``, the event log and the metrics, with no secret in the text; a success resets the
count of failures in a row."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon import Orchestrator
from tests.support.chat_server import ChatApiServer, telegram_error, telegram_ok
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.timeout(120)

TOKEN = "123456:AAE-health-test-token-9f2c"


async def next_event(subscription: Any, wanted: str, **fields: Any) -> dict[str, Any]:
    """The next live event of type ``wanted`` whose fields match."""
    async with asyncio.timeout(30):
        while True:
            event = await subscription.queue.get()
            if event.get("type") == wanted and all(event.get(k) == v for k, v in fields.items()):
                return dict(event)


def rows(swarm: Orchestrator) -> dict[str, dict[str, Any]]:
    return {row["connection"]: row for row in swarm.connections.status()}


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


SET_UP_WRONGLY = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: discord-nokey}
spec:
  connectorRef: {kind: Connector, name: discord, package: "@goondan/base"}
  config:
    DISCORD_PORT: {value: "0"}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: hooks-taken}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config:
    WEBHOOK_PORT: {value: "TAKEN"}
"""


async def test_a_connection_set_up_wrongly_says_why(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISCORD_PUBLIC_KEY", raising=False)
    extra = SET_UP_WRONGLY.replace("TAKEN", str(taken_port))
    async with running_swarm(tmp_path, extra=extra) as swarm:
        async with swarm.live.subscribe() as subscription:
            failures = {}
            while len(failures) < 2:
                failed = await next_event(subscription, "connection.failed")
                failures.setdefault(failed["agentName"], failed)
        assert "DISCORD_PUBLIC_KEY is not set" in failures["connection:discord-nokey"]["error"]
        taken = failures["connection:hooks-taken"]["error"]
        assert f"cannot listen on 127.0.0.1:{taken_port}" in taken
        assert "in use" in taken
        supervisor = swarm.connections.supervisor
        async with asyncio.timeout(30):  # the exit is recorded too: back off, not a loop
            await supervisor.wait_until(
                lambda: all(h.status.value == "crashLoopBackOff" for h in supervisor.handles())
            )
        now = rows(swarm)
        for name, wanted in (("discord-nokey", "DISCORD_PUBLIC_KEY"), ("hooks-taken", "in use")):
            row = now[name]
            assert wanted in row["bootError"]
            assert wanted in row["health"]["lastError"]
            assert row["health"]["lastErrorAt"]
            assert row["health"]["up"] is False
            assert row["health"]["consecutiveFailures"] >= 1
        assert swarm.metrics is not None
        scraped = swarm.metrics.exposition().decode()
        assert 'goondan_connection_up{connection="discord-nokey"} 0.0' in scraped
        assert 'goondan_connection_failures_total{connection="hooks-taken"}' in scraped


TELEGRAM = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: bot}
spec:
  connectorRef: {kind: Connector, name: telegram, package: "@goondan/base"}
  config:
    TELEGRAM_API_BASE_URL: {value: "@@SERVER@@"}
    TELEGRAM_POLL_TIMEOUT_SECONDS: {value: "0"}
    TELEGRAM_RETRY_DELAY_MS: {value: "20"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: HEALTH_TEST_TOKEN}}
"""


async def test_a_failing_poll_is_shown_until_one_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTH_TEST_TOKEN", TOKEN)
    with ChatApiServer() as server:
        path = f"/bot{TOKEN}/getUpdates"
        server.routes[path] = telegram_error(500, f"Internal Server Error for bot{TOKEN}")
        extra = TELEGRAM.replace("@@SERVER@@", server.url)
        async with running_swarm(tmp_path, extra=extra) as swarm:
            async with swarm.live.subscribe() as subscription:
                await next_event(subscription, "connection.failed", consecutiveFailures=3)
                row = rows(swarm)["bot"]
                assert row["status"] == "idle"  # its process runs: only the health tells
                health = row["health"]
                assert health["up"] is False
                assert health["consecutiveFailures"] >= 3
                assert "HTTP 500" in health["lastError"]
                assert TOKEN not in str(row)
                server.routes[path] = telegram_ok([])
                await next_event(subscription, "connection.recovered", agentName="connection:bot")
            health = rows(swarm)["bot"]["health"]
            assert health["up"] is True
            assert health["consecutiveFailures"] == 0
            assert "HTTP 500" in health["lastError"]  # what happened last is kept
            assert health["failures"] >= 3


LEAKY_CONNECTOR = """\
from tools_base import ConnectorContext


async def run(ctx: ConnectorContext) -> None:
    token = ctx.secrets["token"]
    ctx.report_failure(f"GET https://user:{token}@api.example/x?access_token=abc123 gave 500")
    ctx.report_failure(f"the server said: bad token {ctx.config['API_TOKEN']}")
    raise RuntimeError(f"gave up with {token}")
"""

LEAKY = """\
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: leaky}
spec:
  entry: ./leaky_connector.py
  events:
    - {name: message}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: leaky}
spec:
  connectorRef: Connector/leaky
  config:
    API_TOKEN: {value: "config-token-7c1e"}
  secrets:
    token: {valueFrom: {env: HEALTH_TEST_TOKEN}}
"""


async def test_no_secret_reaches_the_health(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTH_TEST_TOKEN", TOKEN)
    (tmp_path / "leaky_connector.py").write_text(LEAKY_CONNECTOR)
    async with (
        running_swarm(tmp_path, extra=LEAKY) as swarm,
        swarm.live.subscribe() as subscription,
    ):
        errors = [(await next_event(subscription, "connection.failed"))["error"] for _ in range(3)]
        row = rows(swarm)["leaky"]
    assert errors[0] == "GET https://[redacted]@api.example/x?access_token=[redacted] gave 500"
    assert errors[1] == "the server said: bad token [redacted]"
    assert errors[2] == "RuntimeError: gave up with [redacted]"
    assert TOKEN not in str(row)
    assert "config-token-7c1e" not in str(row)
