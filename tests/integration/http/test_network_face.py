"""The daemon's network face against slow and many clients, for real: a daemon process (and a
webhook connector's process) held to 1,024 descriptors and flooded with request heads that
never end; bursts of thousands of clients at once; the OpenAI SDK at hundreds of concurrent
requests. Loopback only; real clients (asyncio streams, httpx, the openai SDK); every wait
bounded."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from tests.support.daemon import Daemon
from tests.support.http_connector import signed_webhook, webhook_connection

pytestmark = pytest.mark.timeout(120)

TOKEN = "network-face-token-81f3"
TOKEN_ENV = "NETWORK_FACE_TOKEN"
SECRET = "network-face-secret-2c9e"
FLOOD = 1100
"""Partial request heads: more than the 1,024 descriptors the flooded process may hold."""
LOW_LIMIT = 1024
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
ATTACKER = "127.0.0.2"
"""Where a TCP flood comes from: loopback too, but not the operator's 127.0.0.1."""
SHED = "HTTP/1.1 503 Service Unavailable"
TIMED_OUT = "HTTP/1.1 408 Request Timeout"


@contextlib.contextmanager
def descriptors(wanted: int) -> Iterator[None]:
    """This process may hold ``wanted`` descriptors (skipped loudly where the hard limit is
    lower); the limit is restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"SKIPPED LOUDLY: {wanted} descriptors wanted, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def token_daemon(directory: Path, extra: str = "", env: dict[str, str] | None = None) -> Daemon:
    """The test swarm with a TCP listener on a free loopback port that wants :data:`TOKEN`."""
    return Daemon(
        directory,
        extra,
        args=["--listen", "127.0.0.1:0", "--api-token-env", TOKEN_ENV],
        env={TOKEN_ENV: TOKEN, **(env or {})},
    )


class Flood:
    """Connections that each sent a request head without its end, and keep adding to it.

    Plain non-blocking sockets: what the daemon answered stays readable in the kernel after a
    later write of ours fails (an asyncio transport would close at that failure unread)."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []

    def open(self, *, unix: str | None = None, port: int | None = None) -> None:
        """:data:`FLOOD` connections to ``unix`` (a socket path), or to ``port`` on 127.0.0.1
        from :data:`ATTACKER` (another address than the operator's, as from the network)."""
        for _ in range(FLOOD):
            if unix is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                sock.connect(unix)
            else:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.settimeout(10)
                sock.bind((ATTACKER, 0))
                sock.connect(("127.0.0.1", port))
            self.socks.append(sock)
            sock.sendall(PARTIAL_HEAD)
            sock.setblocking(False)

    def dribble(self) -> None:
        """One more byte of the head on every connection."""
        for sock in self.socks:
            with contextlib.suppress(OSError):  # answered and closed: told so in outcome()
                sock.send(b"X")

    def outcome(self) -> collections.Counter[str]:
        """How the connections stand: their answers' status lines, ``held`` while open."""
        seen: collections.Counter[str] = collections.Counter()
        for sock in self.socks:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                seen["held"] += 1
                continue
            except OSError as exc:
                seen[type(exc).__name__] += 1
                continue
            seen[data.split(b"\r\n", 1)[0].decode() if data else "closed unanswered"] += 1
        return seen

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


@contextlib.contextmanager
def flood() -> Iterator[Flood]:
    opened = Flood()
    try:
        yield opened
    finally:
        opened.close()


async def healthz(*, unix: str | None = None, port: int | None = None) -> int:
    """The status of ``GET /healthz`` (on TCP with the token), within 5 s."""
    async with asyncio.timeout(5):
        if unix is not None:
            reader, writer = await asyncio.open_unix_connection(unix)
            host = "goondan"
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            host = f"127.0.0.1:{port}"
        writer.write(
            f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = await reader.read()
        writer.close()
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("target", ["api.sock", "tcp"])
async def test_partial_heads_past_the_descriptor_limit_leave_healthz_answered(
    tmp_path: Path, target: str
) -> None:
    with descriptors(4 * FLOOD):
        daemon = token_daemon(tmp_path)
        try:
            port = int(daemon.wait_for("http api listening")["port"])  # type: ignore[call-overload]
            daemon.wait_for("agent ready")
            # A service's usual limit, below the connections that come.
            resource.prlimit(daemon.process.pid, resource.RLIMIT_NOFILE, (LOW_LIMIT, LOW_LIMIT))
            sock = str(tmp_path / ".goondan" / "api.sock")
            with flood() as heads:
                if target == "api.sock":
                    heads.open(unix=sock)
                else:
                    heads.open(port=port)
                for _ in range(3):  # throughout: between the bytes of the flood
                    heads.dribble()
                    assert await healthz(unix=sock) == 200
                    assert await healthz(port=port) == 200
                seen = heads.outcome()
        finally:
            daemon.stop()
    # Room was made by answering the oldest stalled heads (503; 408 past a refused one's
    # short deadline), never by dropping anyone; the daemon held no more than its capacity.
    assert set(seen) <= {"held", SHED, TIMED_OUT}, seen
    assert seen[SHED] >= FLOOD - LOW_LIMIT, seen
    assert 0 < seen["held"] <= 768, seen


def webhook_request(text: str) -> tuple[bytes, dict[str, str]]:
    return signed_webhook(SECRET, text)


WEBHOOK = webhook_connection("NETWORK_FACE_SECRET")


async def test_partial_heads_leave_a_webhook_listener_taking_signed_events(tmp_path: Path) -> None:
    with descriptors(4 * FLOOD):
        daemon = token_daemon(tmp_path, WEBHOOK, env={"NETWORK_FACE_SECRET": SECRET})
        try:
            listening = daemon.wait_for("connector listening", process="connector:hooks")
            port, pid = int(listening["port"]), int(listening["pid"])  # type: ignore[call-overload]
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (LOW_LIMIT, LOW_LIMIT))
            with flood() as heads:
                heads.open(port=port)
                heads.dribble()
                async with httpx2.AsyncClient(timeout=10) as client:
                    body, headers = webhook_request("deploy finished")
                    accepted = await client.post(
                        f"http://127.0.0.1:{port}/", content=body, headers=headers
                    )
                assert accepted.status_code == 202, accepted.text
                seen = heads.outcome()
            finished = daemon.wait_for("turn finished", process="agent:beta")
        finally:
            daemon.stop()
    assert finished["instance_key"] == "hooks"
    assert set(seen) <= {"held", SHED, TIMED_OUT}, seen
    assert 0 < seen["held"] <= 768, seen


async def burst(
    count: int, *, unix: str | None = None, port: int | None = None
) -> collections.Counter[str]:
    """``count`` clients at once, each asking ``GET /v1/agents`` once: how each was answered
    (``503 Retry-After`` when the 503 says when to come back)."""
    host = f"127.0.0.1:{port}" if port is not None else "goondan"
    request = (
        f"GET /v1/agents HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    seen: collections.Counter[str] = collections.Counter()

    async def client() -> None:
        try:
            async with asyncio.timeout(60):
                if unix is not None:
                    reader, writer = await asyncio.open_unix_connection(unix)
                else:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                data = await reader.read()
                writer.close()
        except (OSError, TimeoutError) as exc:
            seen[type(exc).__name__] += 1
            return
        head = data.split(b"\r\n\r\n", 1)[0].lower()
        status = data.split(b" ", 2)[1].decode() if data else "closed unanswered"
        if status == "503" and b"\r\nretry-after: " in head:
            status = "503 Retry-After"
        seen[status] += 1

    await asyncio.gather(*(client() for _ in range(count)))
    return seen


@pytest.mark.parametrize("target", ["api.sock", "tcp"])
async def test_a_burst_of_five_thousand_clients_is_answered_or_refused_never_dropped(
    tmp_path: Path, target: str
) -> None:
    count = 5000
    with descriptors(2 * count + 512):
        daemon = token_daemon(tmp_path)
        try:
            port = int(daemon.wait_for("http api listening")["port"])  # type: ignore[call-overload]
            daemon.wait_for("agent ready")
            if target == "api.sock":
                seen = await burst(count, unix=str(tmp_path / ".goondan" / "api.sock"))
            else:
                seen = await burst(count, port=port)
        finally:
            daemon.stop()
    assert set(seen) <= {"200", "503 Retry-After"}, seen
    assert seen["200"] + seen["503 Retry-After"] == count
    assert seen["200"] >= 1, seen


async def test_the_openai_sdk_at_six_hundred_concurrent_requests_gets_every_answer(
    tmp_path: Path,
) -> None:
    with descriptors(2048):
        daemon = token_daemon(tmp_path)
        try:
            port = int(daemon.wait_for("http api listening")["port"])  # type: ignore[call-overload]
            daemon.wait_for("agent ready")
            client = openai.AsyncOpenAI(  # no retries; time to connect on a busy machine
                base_url=f"http://127.0.0.1:{port}/v1", api_key=TOKEN, max_retries=0, timeout=60
            )
            async with client, asyncio.timeout(60):
                answers = await asyncio.gather(
                    *(client.models.list() for _ in range(600)), return_exceptions=True
                )
        finally:
            daemon.stop()
    failed = collections.Counter(type(a).__name__ for a in answers if isinstance(a, Exception))
    assert not failed, failed
    assert all("alpha" in [m.id for m in page.data] for page in answers)  # type: ignore[union-attr]
