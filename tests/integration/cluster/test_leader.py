"""The leader's transport against a real NATS server and a scripted node.

The node here is a plain NATS client that holds its key in the cluster's bucket and answers
(or not) the leader's start requests as the test says: it can do in a fixed order what a real
node does only by chance (change its bundle while a start is on its way, go silent meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bundle import load_bundle
from bundle.plan import AgentPlan
from bundle.spec_swarm import AgentPlacement
from ipc import AgentUnavailable, NodeAbsent
from orchestrator.cluster.leader import ClusterTransport
from orchestrator.cluster.membership import Lease, node_key
from orchestrator.cluster.settings import START_TIMEOUT_SECONDS, ClusterSettings, decode_json
from orchestrator.transport import Worker
from tests.support.cluster import EXAMPLE, NatsServer

pytestmark = pytest.mark.timeout(180)
"""Setup, call and teardown together: a NATS server and two clients, started and closed on a
machine that may be loaded (each wait inside is bounded on its own)."""
HEARTBEAT = 0.2
LEADER_FINGERPRINT = "a" * 64
OTHER_FINGERPRINT = "b" * 64
KEY = b"the members shared key, 32 bytes"
"""The members' key: the leader signs its records with it."""


@dataclass
class Leader:
    transport: ClusterTransport
    settings: ClusterSettings
    ready_nodes: asyncio.Queue[str]
    plan: AgentPlan


@pytest.fixture
def nats_server(tmp_path: Path) -> Any:
    server = NatsServer(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
async def leader(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Leader]:
    settings = ClusterSettings(
        nats_server.url, "test", heartbeat_seconds=HEARTBEAT, insecure=True, leader_key=KEY
    )
    ready: asyncio.Queue[str] = asyncio.Queue()
    transport = ClusterTransport(
        settings,
        placement={"back": AgentPlacement(node="node-x")},
        fingerprint=LEADER_FINGERPRINT,
        on_node_joined=ready.put_nowait,
    )
    await transport.open()
    plan = load_bundle(EXAMPLE, check_handlers=False).agent_plan("back", tmp_path, "relay")
    try:
        yield Leader(transport, settings, ready, plan)
    finally:
        await transport.close()


class ScriptedNode:
    """Node ``node-x`` with the leader's bundle: it heartbeats until told to go silent, and
    hands each start request to ``on_start(msg, node)``."""

    def __init__(self, leader: Leader, on_start: Any) -> None:
        self.leader = leader
        self.on_start = on_start
        self.client: Any = None
        self.lease: Lease | None = None
        self.beating: asyncio.Task[None] | None = None
        self.listening: Any = None

    async def join(self) -> None:
        settings = self.leader.settings
        self.client = await settings.connect("scripted-node")
        kv = await self.client.jetstream().key_value(settings.bucket)
        self.lease = Lease(
            kv,
            node_key("node-x"),
            {"incarnation": "n1", "fingerprint": LEADER_FINGERPRINT, "ready": True},
        )

        async def started(msg: Any) -> None:
            await self.on_start(msg, self)

        self.listening = await self.client.subscribe(
            settings.node_subject("node-x", "start"), cb=started
        )
        await self.client.flush()
        assert await self.lease.acquire() is None
        self.beating = asyncio.ensure_future(self._beat())
        assert await asyncio.wait_for(self.leader.ready_nodes.get(), 10) == "node-x"

    async def _beat(self) -> None:
        assert self.lease is not None
        while True:
            await asyncio.sleep(HEARTBEAT)
            await self.lease.renew()

    async def announce(self, fingerprint: str) -> None:
        assert self.lease is not None
        await self.lease.renew({**self.lease.value, "fingerprint": fingerprint})

    async def deafen(self) -> None:
        """Stop taking starts and keep the key: a node whose process died a moment ago."""
        from nats.errors import NoRespondersError

        await self.listening.unsubscribe()
        # The server may still route a request or two to the subscription it was told to drop
        # (its no-responders answer follows once it has): wait for that answer.
        subject = self.leader.settings.node_subject("node-x", "start")
        async with asyncio.timeout(10):
            while True:
                try:
                    await self.client.request(subject, b"{}", timeout=0.5)
                except NoRespondersError:
                    return
                except TimeoutError:
                    continue

    def silence(self) -> None:
        if self.beating is not None:
            self.beating.cancel()

    async def close(self) -> None:
        self.silence()
        if self.client is not None:
            await self.client.close()


async def start_back(leader: Leader) -> Worker:
    """Start agent ``back``, bounded below the start's own timeout: where the node cannot take
    it, the leader must know without waiting for that."""
    return await asyncio.wait_for(
        leader.transport.start("back", leader.plan, lambda message: None),
        START_TIMEOUT_SECONDS - 5,
    )


async def test_a_start_in_flight_to_a_node_found_to_run_another_bundle_fails_at_once(
    leader: Leader,
) -> None:
    asked = asyncio.Event()

    async def announce_another_bundle(msg: Any, node: ScriptedNode) -> None:
        # The start was sent while the leader believed both ran one bundle; now the node's
        # key says otherwise, and the node never answers this start.
        assert decode_json(msg.data)["agent"] == "back"
        asked.set()
        await node.announce(OTHER_FINGERPRINT)

    node = ScriptedNode(leader, announce_another_bundle)
    try:
        await node.join()
        with pytest.raises(AgentUnavailable) as refused:
            await start_back(leader)
        assert asked.is_set()
        message = refused.value.message
        assert "different bundle" in message
        assert OTHER_FINGERPRINT[:12] in message
        assert LEADER_FINGERPRINT[:12] in message
        assert refused.value.details == {"node": "node-x"}
        assert not leader.transport.workers  # nothing left listening for that process
    finally:
        await node.close()


async def freeze(msg: Any, node: ScriptedNode) -> None:
    """Take the start, then neither answer nor renew the key: a host frozen or cut off whose
    connection the server has not dropped yet."""
    node.silence()


async def never(msg: Any, node: ScriptedNode) -> None:
    raise AssertionError("a node that stopped listening was asked to start")


async def test_a_start_in_flight_to_a_node_that_goes_silent_waits_once_it_is_lost(
    leader: Leader,
) -> None:
    node = ScriptedNode(leader, freeze)
    try:
        await node.join()
        with pytest.raises(NodeAbsent) as refused:  # a wait: its only node may be back
            await start_back(leader)
        assert "node 'node-x', which is not in the cluster" in refused.value.message
        assert not leader.transport.workers
    finally:
        await node.close()


async def test_a_member_that_stopped_listening_is_a_wait_for_its_return(leader: Leader) -> None:
    node = ScriptedNode(leader, never)
    try:
        await node.join()
        await node.deafen()
        with pytest.raises(NodeAbsent) as refused:  # the router waits a little for it
            await start_back(leader)
        assert "'node-x' is not listening" in refused.value.message
        assert not leader.transport.workers
    finally:
        await node.close()


@pytest.mark.parametrize("deaf", [True, False], ids=["not-listening", "lost-under-the-start"])
async def test_a_start_its_node_cannot_take_goes_to_the_leader_where_it_may(
    leader: Leader, deaf: bool
) -> None:
    leader.transport.placement["back"] = AgentPlacement(node="node-x", allow_leader=True)
    node = ScriptedNode(leader, never if deaf else freeze)
    try:
        await node.join()
        if deaf:
            await node.deafen()
        worker = await start_back(leader)
        try:
            assert worker.node is None  # the leader's own host
            assert worker.pid is not None
            assert not leader.transport.workers
        finally:
            worker.kill()
            await asyncio.wait_for(worker.exited, 30)
            worker.close()
    finally:
        await node.close()
