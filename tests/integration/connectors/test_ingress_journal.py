"""An event a connector accepted is never lost nor run twice, whichever process is killed -9 at
whichever point between the accept and the Turn: the connector journals it before answering,
sends what its journal still owes after a restart, and the daemon runs each event id once.

Each test freezes a process at a named point (``goondan.crashpoints``: it writes to a FIFO, then
stops itself), kills the daemon or the connector there, and checks that exactly one Turn ran
the event and that the sender's retry of the same delivery starts none: answered as a
duplicate once its delivery is recorded, as taken (the same event) when the kill came between
the journal and that record. ``test_connector_crashes`` does the same for every HTTP connector
and for Telegram's polling."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest

from tests.support.crashpoints import Crashpoint
from tests.support.daemon import Daemon, wait_gone
from tests.support.http_connector import signed_webhook, webhook_connection

pytestmark = pytest.mark.timeout(180)

SECRET = "journal-test-secret-41ab"
CONNECTION = webhook_connection("JOURNAL_TEST_SECRET")


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def request(text: str, delivery: str) -> tuple[bytes, dict[str, str]]:
    return signed_webhook(SECRET, text, delivery)


def post(port: object, body: bytes, headers: dict[str, str]) -> httpx2.Response:
    with httpx2.Client(timeout=60) as client:
        return client.post(f"http://127.0.0.1:{port}/", content=body, headers=headers)


def start(directory: Path, env: dict[str, str] | None = None) -> Daemon:
    return Daemon(directory, extra=CONNECTION, env={"JOURNAL_TEST_SECRET": SECRET, **(env or {})})


def listening(daemon: Daemon, run: int = 1) -> dict[str, object]:
    """The ``connector listening`` line of the ``run``-th start of the connector."""
    while True:
        lines = [
            e
            for e in daemon.events
            if e.get("event") == "connector listening" and e.get("process") == "connector:hooks"
        ]
        if len(lines) >= run:
            return lines[run - 1]
        daemon.wait_for("connector listening", 60, process="connector:hooks")


def wait_turns(daemon: Daemon, count: int) -> None:
    while True:
        done = [
            e
            for e in daemon.events
            if e.get("event") == "turn finished" and e.get("process") == "agent:beta"
        ]
        if len(done) >= count:
            return
        daemon.wait_for("turn finished", 60, process="agent:beta")


def user_messages(state_dir: Path) -> list[str]:
    """What beta's instance ``hooks`` was told, each message once, oldest first."""
    told: dict[str, str] = {}
    for path in sorted(state_dir.glob("agents/beta/instances/*/conversation/*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            message = record.get("message", record)
            if message.get("role") == "user":
                told[message["id"]] = message["content"]
    return list(told.values())


DUPLICATE = (200, {"ok": True, "duplicate": True})
TAKEN = (202, {"ok": True, "event": "webhook_message", "instanceKey": "webhook:default"})
RETRY_ANSWER = {"connector.journaled": TAKEN}
"""What the sender's retry is told after a kill at each point: at ``connector.journaled`` the
delivery is journaled but not recorded yet, so the retry is taken again as the same event."""


def finish(
    daemon: Daemon, port: object, hook: tuple[bytes, dict[str, str]], tmp: Path, point: str
) -> None:
    """The event ran once; its retry started nothing; a fresh event is the second Turn only."""
    wait_turns(daemon, 1)
    retry = post(port, *hook)
    assert (retry.status_code, retry.json()) == RETRY_ANSWER.get(point, DUPLICATE)
    assert post(port, *request("and then this", "delivery-2")).status_code == 202
    # One instance runs its Turns in order: a second Turn of the event would come before.
    wait_turns(daemon, 2)
    daemon.stop()
    assert user_messages(tmp / ".goondan") == ["deploy finished", "and then this"]


@pytest.mark.parametrize("point", ["connector.journaled", "connection.received", "send.delivering"])
def test_the_daemon_killed_between_accept_and_turn_loses_nothing(
    tmp_path: Path, pool: ThreadPoolExecutor, point: str
) -> None:
    crash = Crashpoint(tmp_path, point)
    daemon = start(tmp_path, crash.env)
    again: Daemon | None = None
    try:
        port = listening(daemon)["port"]
        hook = request("deploy finished", "delivery-1")
        answer: Future[httpx2.Response] = pool.submit(post, port, *hook)
        crash.wait()
        if point != "connector.journaled":
            # Frozen after the connector answered: the sender was told 202.
            assert answer.result(timeout=60).status_code == 202
        daemon.stop()  # SIGKILL to the daemon and every process it started
        if point == "connector.journaled":  # frozen before the answer: the sender saw a failure
            with pytest.raises(httpx2.HTTPError):
                answer.result(timeout=60)

        again = start(tmp_path)
        finish(again, listening(again)["port"], hook, tmp_path, point)
    finally:
        daemon.stop()
        if again is not None:
            again.stop()
        crash.close()


@pytest.mark.parametrize("point", ["connector.journaled", "connection.received", "send.delivering"])
def test_the_connector_killed_between_accept_and_turn_loses_nothing(
    tmp_path: Path, pool: ThreadPoolExecutor, point: str
) -> None:
    crash = Crashpoint(tmp_path, point)
    daemon = start(tmp_path, crash.env)
    try:
        first = listening(daemon)
        connector = int(first["pid"])  # type: ignore[call-overload]
        hook = request("deploy finished", "delivery-1")
        answer: Future[httpx2.Response] = pool.submit(post, first["port"], *hook)
        frozen = crash.wait()
        if point != "connector.journaled":
            # The daemon froze with the event in hand; the connector answers without it, and
            # only once it has recorded the delivery: the kill comes after that answer.
            assert frozen == daemon.process.pid
            assert answer.result(timeout=60).status_code == 202
        os.kill(connector, signal.SIGKILL)
        assert wait_gone(connector)
        if point == "connector.journaled":
            assert frozen == connector
            with pytest.raises(httpx2.HTTPError):
                answer.result(timeout=60)
        else:
            # The daemon goes on now; the restarted connector sends the event again from its
            # journal.
            os.kill(frozen, signal.SIGCONT)
        finish(daemon, listening(daemon, 2)["port"], hook, tmp_path, point)
    finally:
        daemon.stop()
        crash.close()
