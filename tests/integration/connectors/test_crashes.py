"""Whichever connector takes a delivery, and wherever between its journal and its record of the
delivery it is killed -9, the delivery runs exactly one Turn: not zero (a delivery recorded as
taken whose event never reached the journal would refuse the sender's retry and be lost), not
two (a journaled event whose delivery was not recorded yet is taken again on retry, as the
same event: its id derives from the delivery).

Each HTTP connector is driven by a real daemon, its sender a client posting signed requests;
Telegram's polling mode fetches from a fake Bot API that sends an update again until a poll
confirms it, as Telegram does."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.support.chat_server import (
    BotUpdates,
    ChatApiServer,
    ChatRequest,
    telegram_ok,
    telegram_update,
)
from tests.support.crashpoints import Crashpoint
from tests.support.daemon import Daemon, wait_gone
from tests.support.http_connector import hmac_hex

pytestmark = pytest.mark.timeout(180)

SECRET = "crash-test-secret-90c2"
TOKEN = "424242:crash-test_token"
DISCORD_KEY = Ed25519PrivateKey.generate()
WAIT = 60

Request = tuple[bytes, dict[str, str]]


@dataclass(frozen=True)
class Sender:
    """One connector and the sender it serves: how a delivery looks, what the agent is told."""

    connector: str
    settings: str
    """The Connection's ``config`` and ``secrets`` (YAML, indented for ``spec``)."""
    request: Callable[[str, int], Request]
    """The delivery numbered ``n`` of ``text``: the same ``n`` is a retry of it."""
    told: Callable[[str], str]
    """What the agent's Turn gets for ``text``."""


def webhook_request(text: str, n: int) -> Request:
    body = json.dumps({"text": text}).encode()
    at = str(int(time.time()))
    signature = hmac_hex(SECRET, at.encode() + b"." + body)
    return body, {
        "X-Goondan-Timestamp": at,
        "X-Goondan-Signature": f"sha256={signature}",
        "X-Goondan-Delivery": f"delivery-{n}",
    }


def slack_request(text: str, n: int) -> Request:
    event = {"type": "message", "channel": "C1", "ts": f"{n}.0001", "user": "U1", "text": text}
    body = json.dumps({"type": "event_callback", "event_id": f"Ev{n}", "event": event}).encode()
    at = str(int(time.time()))
    signature = "v0=" + hmac_hex(SECRET, f"v0:{at}:".encode() + body)
    return body, {
        "X-Slack-Request-Timestamp": at,
        "X-Slack-Signature": signature,
        "Content-Type": "application/json",
    }


def github_request(text: str, n: int) -> Request:
    payload = {
        "action": "opened",
        "issue": {"number": 1, "title": text},
        "repository": {"full_name": "octo/hello"},
    }
    body = json.dumps(payload).encode()
    return body, {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": f"guid-{n}",
        "X-Hub-Signature-256": "sha256=" + hmac_hex(SECRET, body),
        "Content-Type": "application/json",
    }


def discord_request(text: str, n: int) -> Request:
    interaction = {
        "type": 2,
        "id": f"interaction-{n}",
        "application_id": "app-1",
        "channel_id": "C1",
        "token": "interaction-token",
        "user": {"id": "U1", "username": "ann"},
        "data": {"name": "say", "options": [{"name": "text", "type": 3, "value": text}]},
    }
    body = json.dumps(interaction).encode()
    at = str(int(time.time()))
    signature = DISCORD_KEY.sign(at.encode() + body).hex()
    return body, {
        "X-Signature-Ed25519": signature,
        "X-Signature-Timestamp": at,
        "Content-Type": "application/json",
    }


def telegram_request(text: str, n: int) -> Request:
    body = json.dumps(telegram_update(n, text)).encode()
    return body, {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}


def secret_settings(port_setting: str, secret_name: str) -> str:
    return f"""\
  config:
    {port_setting}: {{value: "0"}}
  secrets:
    {secret_name}: {{valueFrom: {{env: CRASH_TEST_SECRET}}}}
"""


DISCORD_PUBLIC = DISCORD_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
SENDERS = {
    "webhook": Sender(
        "webhook", secret_settings("WEBHOOK_PORT", "signingSecret"), webhook_request, str
    ),
    "slack": Sender(
        "slack", secret_settings("SLACK_WEBHOOK_PORT", "SLACK_SIGNING_SECRET"), slack_request, str
    ),
    "github": Sender(
        "github",
        secret_settings("GITHUB_WEBHOOK_PORT", "signingSecret"),
        github_request,
        lambda text: f"issue #1 opened: {text}",
    ),
    "discord": Sender(
        "discord",
        f"""\
  config:
    DISCORD_WEBHOOK_PORT: {{value: "0"}}
    DISCORD_PUBLIC_KEY: {{value: "{DISCORD_PUBLIC}"}}
""",
        discord_request,
        lambda text: f"/say text:{text}",
    ),
    "telegram-webhook": Sender(
        "telegram",
        """\
  config:
    TELEGRAM_MODE: {value: webhook}
    TELEGRAM_API_BASE_URL: {value: "@@SERVER@@"}
    TELEGRAM_WEBHOOK_PUBLIC_URL: {value: "https://bot.example.com/hook"}
    TELEGRAM_WEBHOOK_PORT: {value: "0"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: CRASH_TEST_TOKEN}}
    TELEGRAM_WEBHOOK_SECRET: {valueFrom: {env: CRASH_TEST_SECRET}}
""",
        telegram_request,
        str,
    ),
}


def connection(connector: str, settings: str, server: ChatApiServer) -> str:
    return (
        f"""\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: hooks}}
spec:
  connectorRef: {{kind: Connector, name: {connector}, package: "@goondan/base"}}
{settings}\
  ingress:
    rules:
      - route: {{agentRef: Agent/beta, instanceKey: hooks}}
"""
    ).replace("@@SERVER@@", server.url)


@pytest.fixture
def bot_api() -> Iterator[ChatApiServer]:
    with ChatApiServer() as server:
        server.routes[f"/bot{TOKEN}/setWebhook"] = telegram_ok(True)
        yield server


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def start(directory: Path, extra: str, env: dict[str, str]) -> Daemon:
    secrets = {"CRASH_TEST_SECRET": SECRET, "CRASH_TEST_TOKEN": TOKEN}
    return Daemon(directory, extra=extra, env={**secrets, **env})


def post(port: object, request: Request) -> httpx2.Response:
    body, headers = request
    with httpx2.Client(timeout=WAIT) as client:
        return client.post(f"http://127.0.0.1:{port}/", content=body, headers=headers)


def nth_event(daemon: Daemon, event: str, process: str, n: int) -> dict[str, object]:
    """The ``n``-th (from 1) line ``event`` of ``process``, reading the log until it comes."""
    while True:
        lines = [
            e for e in daemon.events if e.get("event") == event and e.get("process") == process
        ]
        if len(lines) >= n:
            return lines[n - 1]
        daemon.wait_for(event, WAIT, process=process)


def told(state_dir: Path) -> list[str]:
    """What beta's instance ``hooks`` was told, each message once, oldest first."""
    messages: dict[str, str] = {}
    for path in sorted(state_dir.glob("agents/beta/instances/*/conversation/*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            message = record.get("message", record)
            if message.get("role") == "user":
                messages[message["id"]] = message["content"]
    return list(messages.values())


@pytest.mark.parametrize("point", ["connector.journaled", "connector.deliveries-recorded"])
@pytest.mark.parametrize("sender", list(SENDERS))
def test_a_connector_killed_between_journal_and_record_runs_the_delivery_once(
    tmp_path: Path, pool: ThreadPoolExecutor, bot_api: ChatApiServer, sender: str, point: str
) -> None:
    spec = SENDERS[sender]
    crash = Crashpoint(tmp_path, point)
    daemon = start(tmp_path, connection(spec.connector, spec.settings, bot_api), crash.env)
    try:
        first = nth_event(daemon, "connector listening", "connector:hooks", 1)
        connector = int(first["pid"])  # type: ignore[call-overload]
        delivery = spec.request("deploy finished", 1)
        answer: Future[httpx2.Response] = pool.submit(post, first["port"], delivery)
        assert crash.wait() == connector
        os.kill(connector, signal.SIGKILL)
        assert wait_gone(connector)
        with pytest.raises(httpx2.HTTPError):  # frozen before it answered
            answer.result(timeout=WAIT)

        port = nth_event(daemon, "connector listening", "connector:hooks", 2)["port"]
        retry = post(port, delivery)  # the sender retries; what it is told, it may stop at
        assert retry.is_success or (sender, retry.status_code) == ("discord", 409)
        assert post(port, spec.request("and then this", 2)).is_success
        # One instance runs its Turns in order: a second Turn of the first would come before.
        nth_event(daemon, "turn finished", "agent:beta", 2)
    finally:
        daemon.stop()
        crash.close()
    want = [spec.told("deploy finished"), spec.told("and then this")]
    assert told(tmp_path / ".goondan") == want


TELEGRAM_POLLING = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: bot}
spec:
  connectorRef: {kind: Connector, name: telegram, package: "@goondan/base"}
  config:
    TELEGRAM_API_BASE_URL: {value: "@@SERVER@@"}
    TELEGRAM_POLL_TIMEOUT_SECONDS: {value: "1"}
    TELEGRAM_RETRY_DELAY_MS: {value: "20"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: CRASH_TEST_TOKEN}}
  ingress:
    rules:
      - route: {agentRef: Agent/beta, instanceKey: hooks}
"""


def confirms(request: ChatRequest, offset: int) -> bool:
    """Whether ``request`` is a ``getUpdates`` from ``offset`` (taking what is before it)."""
    body = request.body if isinstance(request.body, dict) else {}
    return request.path.endswith("/getUpdates") and body.get("offset") == offset


def test_telegram_polling_killed_before_confirming_an_update_runs_it_once(
    tmp_path: Path, bot_api: ChatApiServer
) -> None:
    updates = BotUpdates(bot_api, [telegram_update(501, "deploy finished")])
    bot_api.routes[f"/bot{TOKEN}/getUpdates"] = updates
    crash = Crashpoint(tmp_path, "connector.journaled")
    daemon = start(tmp_path, TELEGRAM_POLLING.replace("@@SERVER@@", bot_api.url), crash.env)
    try:
        first = nth_event(daemon, "connector started", "connector:bot", 1)
        # Journaled, frozen before the next getUpdates told Telegram the update was taken.
        assert crash.wait() == int(first["pid"])  # type: ignore[call-overload]
        assert not any(confirms(r, 502) for r in bot_api.requests)
        os.kill(int(first["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
        assert wait_gone(int(first["pid"]))  # type: ignore[call-overload]

        nth_event(daemon, "connector started", "connector:bot", 2)
        # The restarted poller starts over and is sent update 501 again, then confirms it.
        bot_api.wait_for(lambda requests: any(confirms(r, 502) for r in requests), WAIT)
        updates.add(telegram_update(502, "and then this"))
        nth_event(daemon, "turn finished", "agent:beta", 2)
    finally:
        daemon.stop()
        crash.close()
    assert told(tmp_path / ".goondan") == ["deploy finished", "and then this"]
