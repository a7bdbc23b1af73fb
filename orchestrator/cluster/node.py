"""A cluster node: runs the agent processes the leader places on this host.

``python -m orchestrator node goondan.yaml --cluster nats://HOST:4222 --name gpu-1
--state-dir DIR`` loads the same bundle as the leader, joins the cluster under its name and
waits. For each start the leader asks for, it checks that both run the same bundle
(:meth:`bundle.Bundle.fingerprint`: version skew is refused, never discovered), takes the
agent's ownership key, starts the AgentProcess through the ordinary multiprocessing transport
and relays the bytes of its pipe to and from the agent's two subjects, undecoded. The
AgentProcess cannot tell it from a local one.

It keeps no status machine of its own: the leader's supervisor restarts, backs off and stops
agents as it does on one host. The node reports each exit (with the process's exit code),
kills what the agent's tools left behind (its process scope), and stops its agents when the
leader goes silent or leaves, as agents on one host exit when their pipe closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from bundle import Bundle, load_bundle
from bundle.plan import AgentPlan
from bundle.spec_swarm import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, NODE_NAME_PATTERN
from goondan.defaults import KILL_WAIT_SECONDS
from ipc import EventMessage, IpcError, build
from ipc.codec import FrameDecoder, encode
from ipc.delegation import ShutdownRequest
from ipc.events import Ready, read_event
from ipc.protocol import EventKind
from ipc.scope import kill_scope
from orchestrator.cluster.conversations import with_cluster_storage
from orchestrator.cluster.leadership import LeaderSeal, LeaderWatch
from orchestrator.cluster.membership import (
    LEADER_KEY,
    Lease,
    Member,
    bucket_expiry,
    node_key,
    open_bucket,
    owner_key,
)
from orchestrator.cluster.relay import EXIT_HEADER, Outbox
from orchestrator.cluster.settings import (
    HEARTBEAT_MISSES,
    ClusterSettings,
    ClusterTaken,
    decode_json,
    encode_json,
)
from orchestrator.cluster.stopping import unless_stopped
from orchestrator.state_dir import default_state_dir
from orchestrator.tasks import TaskOwner, cancel_and_wait
from orchestrator.transport import PIPE_CLOSED_GRACE_SECONDS, MultiprocessingTransport

WAIT_FOR_LEADER_LOG_SECONDS = 30.0
LEADER_GRACE_EXPIRIES = 10
"""How long a node keeps its agents while no leader answers, in heartbeat expiries (30 s by
default): a standby leader takes over within one, and adopts them."""
CATCH_UP_SECONDS = 5.0
"""How long a joining node waits to learn who leads before it takes starts."""


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` items (``--label``, repeatable) as a dict; raises ``ValueError`` naming
    the item that is not one."""
    labels: dict[str, str] = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not re.match(LABEL_KEY_PATTERN, key):
            raise ValueError(
                f"--label {item!r}: expected KEY=VALUE, KEY of letters, digits, '.', '/', '-' "
                "and '_' (e.g. --label gpu=true)"
            )
        if not re.match(LABEL_VALUE_PATTERN, value):
            raise ValueError(
                f"--label {item!r}: the value must be 1 to 63 letters, digits, '.', '-' or '_'"
            )
        if key in labels and labels[key] != value:
            raise ValueError(f"--label {key!r} given twice with different values")
        labels[key] = value
    return labels


class _PipeRelay(asyncio.Protocol):
    """The node's end of one agent's pipe: bytes in, bytes out, no decoding."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.agent.pipe = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.agent.from_process(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.agent.pipe_closed()


def ready_scope(message: EventMessage) -> str | None:
    """The process scope an agent's ``ready`` event names (``None``: none, or a ``ready`` this
    protocol cannot read)."""
    try:
        body = read_event(message)
    except IpcError:
        return None
    return body.scope if isinstance(body, Ready) else None


@dataclass(eq=False)
class NodeAgent:
    """One agent process this node runs for the leader."""

    name: str
    worker_id: str
    process: Any
    lease: Lease
    outbox: Outbox
    node: Node
    pipe: asyncio.Transport | None = None
    subscription: Any = None
    scope: str | None = None
    """The agent's process scope, read from its ``ready`` event."""
    leader: str = ""
    """The incarnation of the leader that asked for it: a later leader takes it over."""
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    _peek: FrameDecoder | None = field(default_factory=FrameDecoder)

    def from_process(self, data: bytes) -> None:
        self.outbox.write(data)
        if self._peek is not None:  # only until the agent is ready: then it says its scope
            for item in self._peek.feed(data):
                if isinstance(item, EventMessage) and item.kind == EventKind.READY.value:
                    self.scope = ready_scope(item)
                    self._peek = None
                    break

    async def to_process(self, msg: Any) -> None:
        if self.pipe is not None and not self.pipe.is_closing():
            self.pipe.write(msg.data)

    def pipe_closed(self) -> None:
        """The agent closed its pipe (it is exiting): one that lingers is killed."""
        if not self.exited.is_set():
            asyncio.get_running_loop().call_later(PIPE_CLOSED_GRACE_SECONDS, self._linger)

    def _linger(self) -> None:
        if not self.exited.is_set():
            self.signal("KILL")

    def signal(self, name: str) -> None:
        if self.process.exitcode is None:
            (self.process.kill if name == "KILL" else self.process.terminate)()

    def close_pipe(self) -> None:
        if self.pipe is not None:
            self.pipe.close()


class Node:
    """One host's share of a clustered swarm."""

    def __init__(
        self,
        bundle_path: Path,
        settings: ClusterSettings,
        name: str,
        *,
        state_dir: Path | None = None,
        swarm: str | None = None,
        transport: MultiprocessingTransport | None = None,
        labels: Iterable[str] = (),
    ) -> None:
        if not re.match(NODE_NAME_PATTERN, name):
            raise ValueError(
                f"node name {name!r}: letters, digits, '-' and '_' only (it names NATS subjects)"
            )
        self.name = name
        self.labels = parse_labels(labels)
        """What this node declares (``--label KEY=VALUE``): placements may ask for them."""
        self.state_dir = (state_dir or default_state_dir(bundle_path)).resolve()
        self.bundle: Bundle = load_bundle(bundle_path, check_handlers=False)
        self.swarm_name = self.bundle.swarm(swarm).name
        self.settings = settings.named_for(self.swarm_name)
        self.agent_names = {a.name for a in self.bundle.swarm_agents(self.bundle.swarm(swarm))}
        self.grace = float(self.bundle.swarm(swarm).spec.policy.shutdown.grace_period_seconds)
        self.fingerprint = self.bundle.fingerprint()
        self.incarnation = os.urandom(8).hex()
        self.transport = transport or MultiprocessingTransport()
        self.agents: dict[str, NodeAgent] = {}
        """The agent processes running here, by worker id."""
        self.leader: Member | None = None
        self.nc: Any = None
        self.kv: Any = None
        self.heartbeat_seconds = settings.heartbeat_seconds
        self._lease: Lease | None = None
        self._leader_watch: LeaderWatch | None = None
        self._tasks = TaskOwner(structlog.get_logger("goondan.cluster"))
        """Starts of agents and the reports of their exits, run beside the loop's callbacks."""
        self._heartbeat: asyncio.Task[None] | None = None
        self._rejoin_soon = asyncio.Event()
        """Set when the connection came back: the next heartbeat joins again."""
        self._plans: dict[str, AgentPlan] = {}
        self._leaderless: asyncio.TimerHandle | None = None
        """Set while the leader is silent: when it fires, the agents are stopped."""
        self._stopped = asyncio.Event()
        self._ready = asyncio.Event()
        self.log = structlog.get_logger("goondan.cluster").bind(role="node", node=name)

    # -- joining ---------------------------------------------------------------------------

    async def start(self) -> bool:
        """Connect, wait for the cluster's bucket (the leader makes it), take this node's
        name, listen for starts. Raises :class:`ClusterUnavailable` when NATS cannot be used
        or a live node holds the name. ``False`` when a stop was asked for before the node
        joined (it waits for a leader indefinitely): it never joined, nothing to serve."""
        if await unless_stopped(self._join(), self._stopped):
            return True
        self.log.info("node stopped before joining")
        return False

    async def _join(self) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.nc = await self.settings.connect(
            f"goondan-node:{self.name}", on_reconnected=self._rejoin_soon.set
        )
        try:
            self.kv = await self._bucket()
            expiry = await bucket_expiry(self.kv)
            if expiry > 0:  # the leader set the pace
                self.heartbeat_seconds = expiry / HEARTBEAT_MISSES
            self._lease = Lease(self.kv, node_key(self.name), self._heartbeat_value())
            await self._claim_name(expiry or self.settings.expiry_seconds)
            self._leader_watch = LeaderWatch(
                self.kv,
                expiry or self.settings.expiry_seconds,
                LeaderSeal(self.settings.leader_key, self.settings.bucket),
                on_join=self._leader_joined,
                on_leave=self._leader_left,
            )
            await self._leader_watch.start()
            # Knowing the leader before taking starts: a start is checked against it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._leader_watch.caught_up.wait(), CATCH_UP_SECONDS)
            await self.nc.subscribe(
                self.settings.node_subject(self.name, "start"), cb=self._on_start
            )
            await self.nc.subscribe(
                self.settings.node_subject(self.name, "signal"), cb=self._on_signal
            )
            await self.nc.flush()  # the server has our subscriptions: starts reach us now
            # Only now does our key say we take starts (the leader places nothing here before).
            self._ready.set()
            await self._lease.renew(self._heartbeat_value())
        except BaseException:
            await self.nc.close()
            raise
        self._heartbeat = asyncio.ensure_future(self._beat())
        self.log.info(
            "node joined the cluster",
            server=self.settings.describe(),
            cluster=self.settings.name,
            fingerprint=self.fingerprint[:12],
            labels=self.labels,
            state_dir=str(self.state_dir),
        )

    async def _bucket(self) -> Any:
        from nats.js.errors import BucketNotFoundError

        said_at = 0.0
        while True:
            try:
                return await open_bucket(self.nc.jetstream(), self.settings, create=False)
            except BucketNotFoundError:
                if time.monotonic() - said_at > WAIT_FOR_LEADER_LOG_SECONDS:
                    said_at = time.monotonic()
                    self.log.info("waiting for the cluster's leader to start")
                await asyncio.sleep(self.settings.heartbeat_seconds)

    async def _claim_name(self, expiry: float) -> None:
        assert self._lease is not None
        beat = self.heartbeat_seconds
        holder = await self._lease.claim(expiry + beat, beat / 2)
        if holder is not None:
            raise ClusterTaken(
                f"node name {self.name!r} is in use (pid {holder.get('pid')} on "
                f"{holder.get('host')}); pick another --name"
            )

    def _heartbeat_value(self) -> dict[str, Any]:
        return {
            "incarnation": self.incarnation,
            "fingerprint": self.fingerprint,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ready": self._ready.is_set(),
            "labels": self.labels,
            "workers": sorted(self.agents),
            "agents": {
                worker_id: {"agent": a.name, "pid": a.process.pid, "leader": a.leader}
                for worker_id, a in self.agents.items()
            },
        }

    async def _beat(self) -> None:
        assert self._lease is not None
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                if self._rejoin_soon.is_set():
                    self._rejoin_soon.clear()
                    await self._rejoin()
                if not await self._lease.renew(self._heartbeat_value()):
                    self.log.error("another process took this node's name; stopping")
                    self.request_stop()
                    return
                for agent in list(self.agents.values()):
                    if not await agent.lease.renew():
                        self.log.error("agent taken over by another node", agent=agent.name)
                        agent.signal("KILL")
            except Exception as exc:  # disconnected (it reconnects by itself), or no bucket
                self.log.debug("node heartbeat not written", error=str(exc))
                self._rejoin_soon.set()

    async def _rejoin(self) -> None:
        """After a reconnection: the bucket again (the leader makes it anew if the server lost
        it), our keys again if still free, the leader watched afresh."""
        assert self._lease is not None
        assert self._leader_watch is not None
        self.kv = await open_bucket(self.nc.jetstream(), self.settings, create=False)
        for lease in [self._lease, *(agent.lease for agent in self.agents.values())]:
            lease.kv = self.kv
        await self._leader_watch.restart(self.kv)
        self.log.info("cluster membership resumed")

    # -- the leader ----------------------------------------------------------------------------

    def _leader_joined(self, leader: Member) -> None:
        self.leader = leader
        if self._leaderless is not None:
            self._leaderless.cancel()
            self._leaderless = None
            self.log.info("a leader is back; it takes over this node's agents")
        if leader.value.get("fingerprint") != self.fingerprint:
            self.log.error(
                "the leader runs a different bundle; this node will refuse its agents",
                leader_fingerprint=str(leader.value.get("fingerprint"))[:12],
                node_fingerprint=self.fingerprint[:12],
            )
        else:
            self.log.info("leader present", host=leader.value.get("host"))

    def _leader_left(self, leader: Member, reason: str) -> None:
        # Each heartbeat makes a new Member: the same leader is the same incarnation.
        if self.leader is not None and self.leader.incarnation == leader.incarnation:
            self.leader = None
        if reason == "left":  # it stopped on purpose, after draining: nobody takes over
            self._close_agents(reason)
        elif reason == "silent" and self.agents and self._leaderless is None:
            # Died or cut off: a standby may take over. The agents keep running (and their
            # conversations) until one does, or for the grace.
            grace = self.heartbeat_seconds * HEARTBEAT_MISSES * LEADER_GRACE_EXPIRIES
            self.log.warning(
                "leader silent; keeping its agents for a new leader",
                agents=len(self.agents),
                grace_seconds=grace,
            )
            self._leaderless = asyncio.get_running_loop().call_later(
                grace, self._close_agents, "no leader within the grace"
            )

    def _close_agents(self, reason: str) -> None:
        self._leaderless = None
        if self.leader is not None:
            return
        if self.agents:
            self.log.warning(
                "leader gone; stopping its agents", reason=reason, agents=len(self.agents)
            )
        for agent in list(self.agents.values()):
            agent.close_pipe()  # an agent exits when its pipe closes, as on one host

    # -- requests from the leader -------------------------------------------------------------

    async def _on_start(self, msg: Any) -> None:
        self._tasks.start_soon(self._start_agent(msg), "start-agent")

    async def _start_agent(self, msg: Any) -> None:
        request = decode_json(msg.data)
        try:
            reply = await self._started(request)
        except Exception as exc:
            self.log.exception("agent not started", agent=request.get("agent"))
            reply = {"ok": False, "message": f"node {self.name!r}: {type(exc).__name__}: {exc}"}
        with contextlib.suppress(Exception):
            await msg.respond(encode_json(reply))

    def _refusal(self, message: str) -> dict[str, Any]:
        self.log.warning("start refused", reason=message)
        return {"ok": False, "message": message}

    async def _started(self, request: dict[str, Any]) -> dict[str, Any]:
        agent = str(request.get("agent", ""))
        worker_id = str(request.get("worker", ""))
        if request.get("fingerprint") != self.fingerprint:
            return self._refusal(
                f"node {self.name!r} runs a different bundle "
                f"({self.fingerprint[:12]}) than the leader "
                f"({str(request.get('fingerprint'))[:12]}): deploy the same goondan.yaml to both"
            )
        if self.leader is None or request.get("leader") != self.leader.incarnation:
            # The watch may lag the leader's first heartbeat: ask the bucket itself.
            leader = await self._current_leader()
            if leader.get("incarnation") != request.get("leader"):
                return self._refusal(
                    f"node {self.name!r}: the start is not from the cluster's current leader"
                )
        if agent not in self.agent_names or not worker_id.isalnum():
            return self._refusal(f"node {self.name!r}: no agent {agent!r} in its swarm")
        for running in [a for a in self.agents.values() if a.name == agent]:
            # The leader lost track of it (it declared this node lost): never two at once.
            running.signal("KILL")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(running.exited.wait(), KILL_WAIT_SECONDS)
        lease = Lease(
            self.kv,
            owner_key(agent),
            {"node": self.name, "incarnation": self.incarnation, "worker": worker_id},
        )
        # A node just lost still holds the key until it lapses (within the expiry): wait that
        # out, so the agent moves at once instead of failing its first start here.
        holder = await lease.claim(
            self.heartbeat_seconds * (HEARTBEAT_MISSES + 1),
            self.heartbeat_seconds / 2,
            takeover=lambda h: h.get("node") == self.name,
        )
        if holder is not None:
            return self._refusal(
                f"agent {agent!r} is owned by node {holder.get('node')!r}; it is started "
                "there, or its key lapses within the heartbeat expiry"
            )
        try:
            process, conn = await self.transport.spawn(agent, self._plan(agent))
        except BaseException:
            await lease.release()
            raise
        running = NodeAgent(
            agent,
            worker_id,
            process,
            lease,
            Outbox(self.nc, self.settings.worker_subject(worker_id, "out")),
            self,
            leader=str(request.get("leader", "")),
        )
        self.agents[worker_id] = running
        running.subscription = await self.nc.subscribe(
            self.settings.worker_subject(worker_id, "in"), cb=running.to_process
        )
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        conn.close()
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: _PipeRelay(running), sock)
        loop.add_reader(process.sentinel, self._process_exited, running)
        self.log.info("agent process started", agent=agent, pid=process.pid)
        return {"ok": True, "pid": process.pid}

    async def _current_leader(self) -> dict[str, Any]:
        try:
            entry = await self.kv.get(LEADER_KEY)
        except Exception:  # none now, or the bucket unreachable
            return {}
        record = decode_json(entry.value or b"")
        admitted = self._leader_watch is not None and self._leader_watch.admits(record)
        return record if admitted else {}  # a forged or replayed record names no leader

    def _plan(self, agent: str) -> AgentPlan:
        plan = self._plans.get(agent)
        if plan is None:
            # Conversations in JetStream: they move with the agent if this node is lost.
            plan = self._plans[agent] = with_cluster_storage(
                self.bundle.agent_plan(agent, self.state_dir, self.swarm_name), self.settings
            )
        return plan

    async def _on_signal(self, msg: Any) -> None:
        request = decode_json(msg.data)
        agent = self.agents.get(str(request.get("worker", "")))
        if agent is not None:
            agent.signal("KILL" if request.get("signal") == "KILL" else "TERM")
        with contextlib.suppress(Exception):
            await msg.respond(encode_json({"ok": agent is not None}))

    # -- exits -----------------------------------------------------------------------------

    def _process_exited(self, agent: NodeAgent) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(agent.process.sentinel)
        agent.process.join(timeout=0)
        code = agent.process.exitcode
        agent.exited.set()
        self.agents.pop(agent.worker_id, None)
        killed = kill_scope(agent.scope, skip={a.process.pid for a in self.agents.values()})
        self.log.info("agent process exited", agent=agent.name, exitcode=code, scope_killed=killed)
        agent.close_pipe()
        agent.outbox.finish({EXIT_HEADER: str(code)})
        self._tasks.start_soon(self._after_exit(agent), f"exited:{agent.name}")

    async def _after_exit(self, agent: NodeAgent) -> None:
        if agent.subscription is not None:
            with contextlib.suppress(Exception):
                await agent.subscription.unsubscribe()
        await agent.lease.release()

    # -- running and stopping ------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask :meth:`wait_stopped` to return (then :meth:`shutdown` drains)."""
        self._stopped.set()

    async def wait_stopped(self) -> None:
        """Until a signal (or losing the node's name) asks the node to stop."""
        await self._stopped.wait()

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM stop gracefully; a second one kills every agent."""
        loop = asyncio.get_running_loop()
        count = {"signals": 0}

        def handle(sig: int) -> None:
            count["signals"] += 1
            if count["signals"] == 1:
                self.log.info("stopping", signal=signal.Signals(sig).name)
                self.request_stop()
            else:
                for agent in list(self.agents.values()):
                    agent.signal("KILL")

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, handle, sig)

    async def shutdown(self) -> None:
        """Drain: each agent gets ``shutdown`` with the swarm's grace, then SIGTERM, then
        SIGKILL; each exit is reported; then the node's keys are given up."""
        agents = list(self.agents.values())
        for agent in agents:
            if agent.pipe is not None and not agent.pipe.is_closing():
                request = ShutdownRequest(int(self.grace * 1000), "node_shutdown")
                agent.pipe.write(encode(build.shutdown(agent.name, request)))

        async def stopped(agent: NodeAgent) -> None:
            for wait, then in ((self.grace + 1.0, "TERM"), (KILL_WAIT_SECONDS, "KILL")):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(agent.exited.wait(), wait)
                    return
                agent.signal(then)
            await agent.exited.wait()

        await asyncio.gather(*(stopped(a) for a in agents))
        if self._leader_watch is not None:
            await self._leader_watch.stop()
        if self._heartbeat is not None:  # ended before the key is released: none renews it
            await cancel_and_wait(self._heartbeat)
        await self._tasks.settle(KILL_WAIT_SECONDS)  # exits being reported, keys released
        await self._tasks.aclose()
        if self._lease is not None:
            await self._lease.release()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        await self.transport.close()
        self.log.info("node stopped")
