"""The telegram-bot example for real: its default (scripted) swarm run by a daemon subprocess
against a local Bot API server, with a fake token and no network. A message arrives through
``getUpdates``, the agent's Turn answers it with ``telegram__send`` in the same chat, offsets
advance so nothing is answered twice, the token stays out of the log, and SIGTERM stops the
daemon, its agent and its connector."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from orchestrator.state_dir import list_instances
from tests.support.chat_server import (
    BotUpdates,
    ChatApiServer,
    ChatRequest,
    telegram_ok,
    telegram_update,
)
from tests.support.daemon import Daemon, wait_gone
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "telegram-bot"
TOKEN = "123456789:FAKE-token_for-tests_only"
"""Shaped like a real token; it must never show in the log."""
ANSWER = "Hello from a goondan swarm (scripted model). I got your message."
WAIT = 60


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    with ChatApiServer() as running:
        yield running


def copy_example(directory: Path, server: ChatApiServer) -> None:
    """The example in ``directory``, its connector and tool pointed at ``server``."""
    shutil.copytree(EXAMPLE, directory)
    path = directory / "goondan.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    patched = 0
    for document in documents:
        kind, name = document["kind"], document["metadata"]["name"]
        if kind == "Agent" and name == "bot":
            [tool] = document["spec"]["tools"]
            assert tool["ref"]["name"] == "telegram"
            tool["config"] = {"apiBaseUrl": server.url, "allowedHosts": [server.host_entry]}
            patched += 1
        elif kind == "Connection" and name == "telegram":
            document["spec"]["config"]["TELEGRAM_API_BASE_URL"] = {"value": server.url}
            patched += 1
    assert patched == 2
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))


def send_message(server: ChatApiServer) -> Any:
    """A ``sendMessage`` route answering like Telegram (message ids from 500 up)."""

    def reply(request: ChatRequest) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        sent = [r for r in server.requests if r.path.endswith("/sendMessage")]
        return telegram_ok(
            {
                "message_id": 499 + len(sent),
                "date": 1_700_000_100,
                "chat": {"id": body.get("chat_id"), "type": "private"},
                "text": body.get("text"),
            }
        )

    return reply


def sends(requests: list[ChatRequest]) -> list[ChatRequest]:
    return [r for r in requests if r.path == f"/bot{TOKEN}/sendMessage"]


def polled_from(offset: int) -> Any:
    """A condition: some ``getUpdates`` asked from ``offset``."""

    def holds(requests: list[ChatRequest]) -> bool:
        return any(
            r.path == f"/bot{TOKEN}/getUpdates" and (r.body or {}).get("offset") == offset
            for r in requests
        )

    return holds


def test_the_example_answers_telegram_messages_in_their_chat(
    tmp_path: Path, server: ChatApiServer
) -> None:
    updates = BotUpdates(server, [telegram_update(1, "hi bot", chat_id=4242)])
    server.routes[f"/bot{TOKEN}/getUpdates"] = updates
    server.routes[f"/bot{TOKEN}/sendMessage"] = send_message(server)
    directory = tmp_path / "telegram-bot"
    copy_example(directory, server)

    daemon = Daemon(directory, bundle="goondan.yaml", env={"TELEGRAM_BOT_TOKEN": TOKEN})
    try:
        daemon.wait_for("orchestrator started", deadline=WAIT)
        # The first message is answered in its chat, and the next poll confirms it.
        [first] = sends(server.wait_for(lambda seen: bool(sends(seen)), WAIT))
        assert first.method == "POST"
        assert first.body == {"chat_id": 4242, "text": ANSWER}
        server.wait_for(polled_from(2), WAIT)
        # A second chat writes while the connector waits in a poll: that poll brings it.
        updates.add(telegram_update(2, "me too", chat_id=-77, user_id=8, username="bo"))
        requests = server.wait_for(lambda seen: len(sends(seen)) == 2, WAIT)
        assert sends(requests)[1].body == {"chat_id": -77, "text": ANSWER}
        server.wait_for(polled_from(3), WAIT)

        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=WAIT) == 0
        log = daemon.read_to_end(WAIT)
    finally:
        daemon.stop()

    # Everything is stopped: what the server saw is final.
    assert [r.body for r in sends(server.requests)] == [
        {"chat_id": 4242, "text": ANSWER},
        {"chat_id": -77, "text": ANSWER},
    ]
    offsets = updates.offsets()
    assert offsets[0] == 0  # the first poll names no offset
    assert offsets == sorted(offsets)  # never back to an update already seen
    assert set(offsets) == {0, 2, 3}
    assert all(r.path.startswith(f"/bot{TOKEN}/") for r in server.requests)

    # Each chat is its own conversation, and the tool's result reached the Turn.
    state = directory / ".goondan"
    assert "answered in chat 4242" in conversation_text(state, "bot", "telegram:4242")
    assert "answered in chat -77" in conversation_text(state, "bot", "telegram:-77")

    secret = TOKEN.split(":", 1)[1].encode()  # the part after the bot id
    assert secret not in log  # nor, then, the whole token
    leaked = [p for p in state.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert not leaked

    events = daemon.events
    assert any(e.get("event") == "orchestrator stopped" for e in events)
    spawned = [
        (str(e.get("agent")), int(e["pid"]))  # type: ignore[call-overload]
        for e in events
        if e.get("event") == "agent process spawned"
    ]
    assert {name for name, _ in spawned} == {"bot", "telegram"}, spawned
    assert all(wait_gone(pid) for _, pid in spawned)  # the connector's process too


def conversation_text(state_dir: Path, agent: str, key: str) -> str:
    [row] = [r for r in list_instances(state_dir, agent) if r["instanceKey"] == key]
    return "".join(p.read_text() for p in Path(row["directory"]).glob("conversation/*.jsonl"))


def test_one_api_base_url_in_the_environment_serves_connector_and_tool(
    tmp_path: Path, server: ChatApiServer
) -> None:
    """The example as shipped, with ``TELEGRAM_API_BASE_URL`` set as its README says: the
    message comes in from the local Bot API and the reply goes back to it, not to
    api.telegram.org."""
    updates = BotUpdates(server, [telegram_update(1, "hi bot", chat_id=4242)])
    server.routes[f"/bot{TOKEN}/getUpdates"] = updates
    server.routes[f"/bot{TOKEN}/sendMessage"] = send_message(server)
    directory = tmp_path / "telegram-bot"
    shutil.copytree(EXAMPLE, directory)

    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": server.url}
    daemon = Daemon(directory, bundle="goondan.yaml", env=env)
    try:
        daemon.wait_for("orchestrator started", deadline=WAIT)
        [first] = sends(server.wait_for(lambda seen: bool(sends(seen)), WAIT))
        assert first.body == {"chat_id": 4242, "text": ANSWER}
        server.wait_for(polled_from(2), WAIT)
    finally:
        daemon.stop()
    assert all(r.path.startswith(f"/bot{TOKEN}/") for r in server.requests)


def test_webhook_mode_routes_an_update_to_a_turn_that_answers(
    tmp_path: Path, server: ChatApiServer
) -> None:
    """The example switched to webhook mode: setWebhook carries the secret, an update posted
    with it starts a Turn whose answer reaches the Bot API, and one without it is refused."""
    server.routes[f"/bot{TOKEN}/setWebhook"] = telegram_ok(True)
    server.routes[f"/bot{TOKEN}/sendMessage"] = send_message(server)
    directory = tmp_path / "telegram-bot"
    shutil.copytree(EXAMPLE, directory)
    path = directory / "goondan.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    [connection] = [d for d in documents if d["kind"] == "Connection"]
    connection["spec"]["config"].update(
        {
            "TELEGRAM_MODE": {"value": "webhook"},
            "TELEGRAM_WEBHOOK_PUBLIC_URL": {"value": "https://bot.example.com/tg"},
            "TELEGRAM_WEBHOOK_PORT": {"value": "0"},
        }
    )
    connection["spec"]["secrets"]["TELEGRAM_WEBHOOK_SECRET"] = {"valueFrom": {"env": "HOOK_SECRET"}}
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    secret = "hook-secret_for-tests"
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": server.url, "HOOK_SECRET": secret}
    daemon = Daemon(directory, bundle="goondan.yaml", env=env)
    try:
        daemon.wait_for("orchestrator started", deadline=WAIT)
        listening = daemon.wait_for("connector listening", WAIT, process="connector:telegram")
        hook = f"http://127.0.0.1:{listening['port']}/"
        [call] = [r for r in server.requests if r.path.endswith("/setWebhook")]
        assert call.body["secret_token"] == secret
        update = telegram_update(5, "via webhook", chat_id=99)
        refused = httpx2.post(hook, json=update, timeout=WAIT)
        assert refused.status_code == 401
        header = {"X-Telegram-Bot-Api-Secret-Token": secret}
        assert httpx2.post(hook, json=update, headers=header, timeout=WAIT).status_code == 200
        [sent] = sends(server.wait_for(lambda seen: bool(sends(seen)), WAIT))
        assert sent.body == {"chat_id": 99, "text": ANSWER}
    finally:
        daemon.stop()
    assert len(sends(server.requests)) == 1  # the refused copy started nothing
