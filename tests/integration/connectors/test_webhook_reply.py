"""A webhook delivery answered back for real: a daemon subprocess runs a swarm whose webhook
Connection has a reply URL; a signed delivery starts a Turn, and the Turn's answer travels from
the agent process through the daemon to the connector process, which POSTs it, signed, to a
callback receiver on loopback."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.chat_server import ChatApiServer, ChatRequest
from tests.support.daemon import Daemon
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(120)

SECRET = "integration-reply-secret-42"
ANSWER = "pong from the swarm"
WAIT = 60

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: webhook-reply-test}
spec: {version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - reply: "ANSWER"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: bot}
spec:
  modelConfig: {modelRef: Model/scripted}
  prompt: {system: "Answer."}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/bot
  agents: [Agent/bot]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: hook}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  secrets:
    signingSecret: {valueFrom: {env: HOOK_SECRET}}
  config:
    WEBHOOK_PORT: {value: "0"}
    WEBHOOK_REPLY_URL: {value: "CALLBACK"}
  ingress:
    rules:
      - match: {event: webhook_message}
"""


@pytest.fixture
def receiver() -> Iterator[ChatApiServer]:
    with ChatApiServer() as server:
        server.routes["/cb"] = Reply(status=200, body={"received": True})
        yield server


def signed_post(port: int, payload: dict[str, object]) -> httpx2.Response:
    body = json.dumps(payload).encode()
    timestamp = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return httpx2.post(
        f"http://127.0.0.1:{port}/",
        content=body,
        headers={
            "content-type": "application/json",
            "X-Goondan-Timestamp": timestamp,
            "X-Goondan-Signature": "sha256=" + mac.hexdigest(),
            "X-Goondan-Delivery": "delivery-1",
        },
        timeout=WAIT,
    )


def replies(requests: list[ChatRequest]) -> list[ChatRequest]:
    return [r for r in requests if r.path == "/cb"]


def test_the_turns_answer_is_posted_back_signed(tmp_path: Path, receiver: ChatApiServer) -> None:
    bundle = BUNDLE.replace("ANSWER", ANSWER).replace("CALLBACK", receiver.url + "/cb")
    (tmp_path / "goondan.yaml").write_text(bundle)
    daemon = Daemon(tmp_path, bundle="goondan.yaml", env={"HOOK_SECRET": SECRET})
    try:
        daemon.wait_for("orchestrator started", deadline=WAIT)
        listening = daemon.wait_for("connector listening", WAIT, process="connector:hook")
        port = int(str(listening["port"]))
        answer = signed_post(port, {"text": "ping", "instanceKey": "ci:1"})
        assert answer.status_code == 202
        [reply] = replies(receiver.wait_for(lambda seen: bool(replies(seen)), WAIT))
    finally:
        daemon.stop()
    timestamp = reply.headers["x-goondan-timestamp"]
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + reply.raw, hashlib.sha256)
    assert reply.headers["x-goondan-signature"] == "sha256=" + expected.hexdigest()
    assert json.loads(reply.raw) == {
        "ok": True,
        "event": "webhook_message",
        "instanceKey": "ci:1",
        "delivery": "delivery-1",
        "text": ANSWER,
        "error": None,
    }
    assert SECRET.encode() not in daemon.log
