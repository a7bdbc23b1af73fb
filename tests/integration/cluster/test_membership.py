"""Leases and presence against a real NATS server's JetStream key-value bucket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cluster.membership import Lease, Member, Presence, bucket_expiry, open_bucket
from orchestrator.cluster.relay import Outbox
from orchestrator.cluster.settings import ClusterSettings, ClusterUnavailable
from tests.support.cluster import NatsServer

pytestmark = pytest.mark.timeout(60)
HEARTBEAT = 0.2


@pytest.fixture
def nats_server(tmp_path: Path) -> Any:
    server = NatsServer(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
async def bucket(nats_server: NatsServer) -> AsyncIterator[tuple[ClusterSettings, Any, Any]]:
    settings = ClusterSettings(nats_server.url, "test", heartbeat_seconds=HEARTBEAT, insecure=True)
    client = await settings.connect("test")
    kv = await open_bucket(client.jetstream(), settings, create=True)
    yield settings, client, kv
    await client.close()


async def test_a_key_has_one_holder_until_it_lapses(bucket: tuple[Any, Any, Any]) -> None:
    settings, _, kv = bucket
    assert await bucket_expiry(kv) == pytest.approx(settings.expiry_seconds)
    first = Lease(kv, "nodes.gpu-1", {"incarnation": "one"})
    second = Lease(kv, "nodes.gpu-1", {"incarnation": "two"})

    assert await first.acquire() is None
    assert await second.acquire() == {"incarnation": "one"}
    assert await first.renew() is True
    # Taken over only where the holder allows it (a node's own earlier run).
    assert await second.acquire(takeover=lambda h: h["incarnation"] == "zero") == {
        "incarnation": "one"
    }
    assert await second.acquire(takeover=lambda h: h["incarnation"] == "one") is None
    assert await first.renew() is False  # compare-and-set: the other holds it now

    await second.release()
    assert await first.acquire() is None


async def test_a_key_not_renewed_expires_and_is_free_again(bucket: tuple[Any, Any, Any]) -> None:
    settings, _, kv = bucket
    lease = Lease(kv, "leader", {"incarnation": "old"})
    assert await lease.acquire() is None
    newcomer = Lease(kv, "leader", {"incarnation": "new"})

    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.expiry_seconds * 4
    while await newcomer.acquire() is not None:
        assert loop.time() < deadline, "the key never lapsed"
        await asyncio.sleep(HEARTBEAT / 2)
    assert await lease.renew() is False  # back too late: somebody holds it now


async def test_presence_sees_joins_restarts_departures_and_silence(
    bucket: tuple[Any, Any, Any],
) -> None:
    settings, _, kv = bucket
    seen: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

    def joined(member: Member) -> None:
        seen.put_nowait(("join", member.name, member.incarnation))

    def left(member: Member, reason: str) -> None:
        seen.put_nowait((reason, member.name, member.incarnation))

    presence = Presence(kv, "nodes.*", settings.expiry_seconds, joined, left)
    await presence.start()
    try:
        a = Lease(kv, "nodes.a", {"incarnation": "1"})
        await a.acquire()
        assert await asyncio.wait_for(seen.get(), 5) == ("join", "a", "1")

        a.value = {"incarnation": "2"}  # the same name, a new run
        await a.renew()
        assert await asyncio.wait_for(seen.get(), 5) == ("restarted", "a", "1")
        assert await asyncio.wait_for(seen.get(), 5) == ("join", "a", "2")

        await a.release()
        assert await asyncio.wait_for(seen.get(), 5) == ("left", "a", "2")

        b = Lease(kv, "nodes.b", {"incarnation": "1"})
        await b.acquire()
        assert await asyncio.wait_for(seen.get(), 5) == ("join", "b", "1")
        started = asyncio.get_running_loop().time()
        # b stops renewing: silent for the expiry, it is lost on the watcher's own clock.
        assert await asyncio.wait_for(seen.get(), 10) == ("silent", "b", "1")
        waited = asyncio.get_running_loop().time() - started
        # Never lost before its expiry (the watcher's clock and ours differ by a tick: a few
        # ms of slack); how soon after is the wait_for's bound, not an assertion on speed.
        assert settings.expiry_seconds - 0.05 <= waited
    finally:
        await presence.stop()


async def test_an_outbox_keeps_order_and_splits_at_the_servers_max_payload(
    bucket: tuple[Any, Any, Any],
) -> None:
    _, client, _ = bucket
    received: list[bytes] = []
    done = asyncio.Event()

    async def take(msg: Any) -> None:
        if msg.headers and "Goondan-Exit" in msg.headers:
            done.set()
        else:
            received.append(msg.data)

    await client.subscribe("stream.test", cb=take)
    outbox = Outbox(client, "stream.test")
    big = bytes(range(256)) * (client.max_payload // 256 * 2 + 3)  # over two payloads
    outbox.write(b"first,")
    outbox.write(big)
    outbox.write(b",last")
    outbox.finish({"Goondan-Exit": "0"})
    await asyncio.wait_for(done.wait(), 10)

    assert b"".join(received) == b"first," + big + b",last"
    assert len(received) == 3
    assert all(len(part) <= client.max_payload for part in received)


async def test_a_server_without_jetstream_is_named(tmp_path: Path) -> None:
    plain = NatsServer(tmp_path / "plain", jetstream=False)
    try:
        settings = ClusterSettings(plain.url, "x", insecure=True)
        client = await settings.connect("test")
        try:
            with pytest.raises(ClusterUnavailable, match="has no JetStream"):
                await open_bucket(client.jetstream(), settings, create=True)
        finally:
            await client.close()
    finally:
        plain.stop()


async def test_no_server_is_an_error_naming_the_address(tmp_path: Path) -> None:
    gone = NatsServer(tmp_path / "gone")
    gone.stop()
    with pytest.raises(ClusterUnavailable, match=f"cannot connect to the cluster at {gone.url}"):
        await ClusterSettings(gone.url, "x", insecure=True).connect("test")
