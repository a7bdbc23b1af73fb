"""The journal of accepted requests in JetStream, on a real ``nats-server -js``: what one
leader writes, the next reads (its own connection), keys honoured once, and whatever else
finds its way into the bucket never trusted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.cluster.request_journal import INLINE_BYTES, JournaledRequest, RequestJournal
from orchestrator.cluster.settings import ClusterSettings
from orchestrator.requests import KeyReused
from tests.support.cluster import NatsServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    nats = NatsServer(tmp_path / "nats")
    try:
        yield nats
    finally:
        nats.stop()


Leader = Callable[[], Awaitable[RequestJournal]]


def run(server: NatsServer, body: Callable[[Leader], Awaitable[None]]) -> None:
    """Run ``body`` with ``leader()``: the journal as one more leader opens it (a connection
    of its own each time)."""
    import nats

    settings = ClusterSettings(url=server.url, name="relay", insecure=True)

    async def main() -> None:
        connections: list[Any] = []

        async def leader() -> RequestJournal:
            nc = await nats.connect(server.url)
            connections.append(nc)
            return await RequestJournal.open(nc, settings)

        try:
            await body(leader)
        finally:
            for nc in connections:
                await nc.close()

    asyncio.run(main())


def request(request_id: str, **fields: Any) -> JournaledRequest:
    given: dict[str, Any] = {
        "agent": "back",
        "instance_key": "default",
        "input": "hello",
        "accepted_at": time.time(),
        "leader": "one",
        **fields,
    }
    return JournaledRequest(request_id=request_id, **given)


def test_what_a_leader_accepted_the_next_finds_unanswered_then_answered(
    server: NatsServer,
) -> None:
    async def body(leader: Leader) -> None:
        first = await leader()
        assert await first.unanswered() == []  # an empty journal
        assert await first.accept(request("req_a", input="one")) == (request_id("req_a"), True)
        await first.accept(request("req_b", input="two"))
        await first.finish("req_b", {"status": "ok", "output": "answered"})

        second = await leader()  # the standby, once it leads
        [unanswered] = await second.unanswered()
        assert (unanswered.request_id, unanswered.input) == ("req_a", "one")
        done = await second.finish("req_a", {"status": "ok", "output": "two"})
        assert done is not None
        assert done.state == "done"
        assert done.finished_at is not None
        assert await second.unanswered() == []
        found = await (await leader()).get("req_a")
        assert found is not None
        assert (found.state, found.answer) == ("done", {"status": "ok", "output": "two"})
        # The same request routed again (its id journaled): nothing is written over it.
        same, fresh = await second.accept(request("req_a", input="changed"))
        assert (same.input, same.state, fresh) == ("one", "done", False)
        assert await second.get("req_unknown") is None
        assert await second.finish("req_unknown", {"status": "ok"}) is None

    run(server, body)


def request_id(value: str) -> Any:
    """Compares equal to a journaled request with that id (the rest is the test's own)."""

    class Same:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, JournaledRequest) and other.request_id == value

    return Same()


def test_a_key_starts_one_request_and_another_body_with_it_is_refused(
    server: NatsServer,
) -> None:
    async def body(leader: Leader) -> None:
        first, second = await leader(), await leader()
        keyed = request("req_1", key_digest="ab" * 32, body_digest="body-1")
        assert (await first.accept(keyed))[1] is True
        # The same key again, at another leader: the request it names, nothing new.
        again, fresh = await second.accept(
            request("req_2", key_digest="ab" * 32, body_digest="body-1")
        )
        assert (again.request_id, fresh) == ("req_1", False)
        assert await second.get("req_2") is None
        with pytest.raises(KeyReused, match="another request body"):
            await second.accept(request("req_3", key_digest="ab" * 32, body_digest="body-2"))
        found = await second.by_key("ab" * 32)
        assert found is not None
        assert found.request_id == "req_1"
        assert [r.request_id for r in await second.unanswered()] == ["req_1"]

        # A key whose request never got written (a leader died between the two writes)
        # is taken by the next request that brings it.
        await first.kv.put("k." + "cd" * 32, b"req_never")
        taken, fresh = await second.accept(request("req_4", key_digest="cd" * 32))
        assert (taken.request_id, fresh) == ("req_4", True)
        found = await first.by_key("cd" * 32)
        assert found is not None
        assert found.request_id == "req_4"

    run(server, body)


def test_a_request_larger_than_a_message_is_kept_whole(server: NatsServer) -> None:
    big = "x" * (INLINE_BYTES + 100_000)

    async def body(leader: Leader) -> None:
        first = await leader()
        await first.accept(request("req_big", input=big))
        await first.finish("req_big", {"status": "ok", "output": big})
        found = await (await leader()).get("req_big")
        assert found is not None
        assert found.input == big
        assert found.answer == {"status": "ok", "output": big}

    run(server, body)


def test_what_something_else_wrote_is_never_trusted(server: NatsServer) -> None:
    async def body(leader: Leader) -> None:
        journal = await leader()
        await journal.kv.put("r.req_junk", b"not json")
        await journal.kv.put("u.req_junk", b"")
        # A record under another id: replayed from elsewhere, not this request.
        from msgspec import json as msgjson

        await journal.kv.put("r.req_moved", msgjson.encode(request("req_elsewhere")))
        await journal.kv.put("u.req_moved", b"")
        await journal.kv.put("r.req_ptr", b'{"object": "../../etc"}')
        with capture_logs() as logs:
            assert await journal.get("req_junk") is None
            assert await journal.get("req_moved") is None
            assert await journal.get("req_ptr") is None
            assert await journal.unanswered() == []
        events = {entry["event"] for entry in logs}
        assert "journaled request unreadable; ignored" in events
        assert "journaled request under another id; ignored" in events
        for hostile in ("", "a.b", ">", "*", "../x", "req_ä", "x" * 200):
            assert await journal.get(hostile) is None
            assert await journal.by_key(hostile) is None

    run(server, body)


def test_a_server_with_small_messages_takes_large_requests_in_pieces(tmp_path: Path) -> None:
    small = NatsServer(tmp_path / "small", config="max_payload: 65536\n")
    text = "y" * 320_000  # five messages' worth

    async def body(leader: Leader) -> None:
        await (await leader()).accept(request("req_large", input=text))
        await (await leader()).accept(request("req_little", input="z" * 60_000))
        for request_id, wanted in (("req_large", text), ("req_little", "z" * 60_000)):
            found = await (await leader()).get(request_id)
            assert found is not None
            assert found.input == wanted

    try:
        run(small, body)
    finally:
        small.stop()
