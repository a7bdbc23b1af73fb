"""``send`` naming a cluster's leaders asks the next one again, with the same
``Idempotency-Key``, when its leader is lost (a reset connection, an answer ``LEADER_LOST``)
or while no leader answers (an election), within its timeout.

The leaders are loopback listeners speaking HTTP as a daemon does; the client is the real
CLI, run as its own process.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.http.client import ApiUrl, DaemonApi, NoDaemon

pytestmark = pytest.mark.timeout(120)

ANSWER = b'{"status":"ok","output":"done","turn":{"turnId":"turn-1","steps":1}}'
LOST = b'{"status":"error","error":{"code":"LEADER_LOST","message":"the leader went away"}}'
KEY_HEADER = re.compile(rb"\r\nIdempotency-Key: ([^\r\n]*)\r\n", re.IGNORECASE)


def answer(body: bytes, status: str = "200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status.encode(), len(body), body)


class Leader:
    """A listener that answers each request it takes with the next of ``replies`` (``b""``:
    close without an answer, as a leader that died under it); every request's bytes kept."""

    def __init__(self, *replies: bytes, listening: bool = True) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.taken = threading.Condition()
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
        self.port: int = self.server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if listening:
            self.listen()

    def listen(self) -> None:
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: (\d+)", head)
                while length and len(body) < int(length.group(1)):
                    body += conn.recv(65536)
                reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
                with self.taken:
                    self.requests.append(data)
                    self.taken.notify_all()
                if reply:
                    conn.sendall(reply)
                else:  # died under the request: a reset
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")

    def wait_requests(self, count: int, deadline: float = 30) -> None:
        with self.taken:
            assert self.taken.wait_for(lambda: len(self.requests) >= count, deadline)

    def keys(self) -> list[bytes]:
        found = [KEY_HEADER.search(request) for request in self.requests]
        return [match.group(1) if match else b"" for match in found]

    def close(self) -> None:
        self.server.close()


def send(
    *args: str, on_start: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("GOONDAN_API_URL", None)
    command = [sys.executable, "-m", "orchestrator", "send", "front", "hello", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    if on_start is not None:
        on_start()
    out, err = process.communicate(timeout=90)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_a_request_its_leader_lost_is_asked_of_the_next_with_the_same_key() -> None:
    dying, standby = Leader(b""), Leader(answer(ANSWER))
    done = send("--api-url", f"{dying.url},{standby.url}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    # Asked again (by its id, or by its key) before the next leader answers: one key in all.
    [first] = set(dying.keys()) | set(standby.keys())
    assert re.fullmatch(rb"[0-9a-f]{32}", first)  # a fresh uuid4 of this invocation
    assert standby.requests[0].startswith(b"POST /v1/agents/front/requests ")

    # Another invocation: another key.
    again = send("--api-url", standby.url)
    assert again.returncode == 0, again.stderr
    assert standby.keys()[1] not in (b"", first)


def test_an_answer_leader_lost_is_asked_again_and_a_given_key_is_sent_as_given() -> None:
    lost = answer(LOST, "502 Bad Gateway")
    first, second = Leader(lost), Leader(lost, answer(ANSWER))
    done = send("--api-url", f"{first.url},{second.url}", "--idempotency-key", "order 42/a")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    keys = first.keys() + second.keys()
    assert len(keys) >= 3  # first, second (lost), then a second round
    assert set(keys) == {b"order 42/a"}


def test_while_no_leader_answers_the_request_waits_for_one_within_its_timeout() -> None:
    # An election: the old leader takes requests and dies under them; the new one does not
    # listen yet. It starts to once the old one was asked twice (so the client went round
    # every leader at least once and found none), and then answers.
    old, new = Leader(b""), Leader(answer(ANSWER), listening=False)

    def elect() -> None:
        old.wait_requests(2)
        new.listen()

    done = send("--api-url", f"{old.url},{new.url}", on_start=elect)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert len(set(old.keys() + new.keys())) == 1


def test_a_keyed_request_gives_up_at_its_timeout_and_a_read_goes_round_once() -> None:
    dying, also = Leader(b""), Leader(b"")
    api = DaemonApi(
        url=ApiUrl("127.0.0.1", dying.port),
        standby=[ApiUrl("127.0.0.1", also.port)],
        timeout=2,
        idempotency_key="k",
    )
    with pytest.raises(NoDaemon, match="no leader answers"):
        api.call("POST", "/v1/agents/front/requests", {"input": "hi"})
    assert len(dying.requests) >= 2  # asked again, not only once
    assert set(dying.keys() + also.keys()) == {b"k"}

    before = len(dying.requests) + len(also.requests)
    with pytest.raises(NoDaemon, match="no leader answers"):
        api.call("GET", "/v1/agents")
    assert len(dying.requests) + len(also.requests) == before + 2
    assert KEY_HEADER.search(dying.requests[-1]) is None  # a read carries no key


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "1 to 255 characters, not 0"),
        ("k" * 256, "1 to 255 characters, not 256"),
        ("a\r\nX-Injected: 1", "printable ASCII"),
        ("tab\there", "printable ASCII"),
        ("ünï", "printable ASCII"),
    ],
)
def test_a_key_that_may_not_be_sent_is_refused_before_anything_is_sent(
    key: str, says: str, tmp_path: Path
) -> None:
    leader = Leader(answer(ANSWER))
    for extra in ((), ("--no-wait",)):
        done = send("--api-url", leader.url, "--idempotency-key", key, "--json", *extra)
        assert done.returncode == 2, done.stderr
        said = done.stdout + done.stderr  # --json: the refusal is on stdout
        assert "--idempotency-key" in said
        assert says in said
    assert leader.requests == []
    with pytest.raises(ValueError, match="idempotency key"):
        DaemonApi(tmp_path, idempotency_key=key)


def test_a_send_without_waiting_carries_the_key_too() -> None:
    leader = Leader(answer(b'{"accepted":true}', "202 Accepted"))
    done = send("--api-url", leader.url, "--no-wait", "--json", "--idempotency-key", "x-1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"accepted": True}
    assert leader.keys() == [b"x-1"]
    assert leader.requests[0].startswith(b"POST /v1/agents/front/sends ")
