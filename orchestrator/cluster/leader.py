"""The leader's side of a cluster: a :class:`~orchestrator.transport.Transport` across hosts.

The leader is the Orchestrator of ``run --cluster``: it keeps the router, the pending table,
the event log and the HTTP API, exactly as on one host. Its supervisor starts workers through
:class:`ClusterTransport`, which starts an agent placed on other hosts
(``Swarm.spec.placement``: a node, several, or nodes with some labels) by a request to one of
those nodes that is up, and every other agent through the local multiprocessing transport. A remote agent's frames travel on two subjects of its own
(:mod:`orchestrator.cluster.relay`), so the supervisor and the router see a
:class:`RemoteWorker` exactly as they see a local process.

Failures become what they are on one host: when no node the agent may run on is up with the
leader's bundle (and it may not run on the leader), or the node refuses, the start fails with
``AGENT_UNAVAILABLE``; a node that goes silent for the heartbeat expiry makes each of its
agents exit (:data:`~ipc.protocol.EXIT_NODE_LOST`), so their pending callers get
``AGENT_CRASHED`` and the supervisor starts them again, on another node that qualifies or
once theirs is back.

Several ``run --cluster`` may wait on one cluster: the one holding the ``leader`` key leads,
the others wait as standbys (:meth:`ClusterTransport.open`). When the leader dies, its key
lapses, a standby takes it, and it adopts the agent processes the nodes kept running
(each node lists them in its key), so none restarts and no conversation is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import structlog

from bundle.plan import AgentPlan, Plan
from bundle.spec_swarm import AgentPlacement
from ipc import AgentUnavailable, IpcMessage, build
from ipc.events import LeaderChanged
from ipc.protocol import EXIT_NODE_LOST, ORCHESTRATOR
from orchestrator.cluster.conversations import with_cluster_storage
from orchestrator.cluster.leadership import LeaderLease, LeaderSeal
from orchestrator.cluster.membership import (
    LEADER_KEY,
    NODE_KEYS,
    Member,
    Presence,
    open_bucket,
)
from orchestrator.cluster.placing import (
    NodeSilent,
    choose_node,
    different_bundle,
    labels_of,
    not_listening,
)
from orchestrator.cluster.relay import Outbox
from orchestrator.cluster.remote import RemoteWorker
from orchestrator.cluster.settings import (
    START_TIMEOUT_SECONDS,
    ClusterSettings,
    decode_json,
    encode_json,
)
from orchestrator.cluster.stored_instances import StoredInstances
from orchestrator.status import ExitInfo
from orchestrator.tasks import TaskOwner, cancel_and_wait
from orchestrator.transport import MultiprocessingTransport, Worker


class ClusterTransport:
    """Starts placed agents on their nodes, the others on this host."""

    def __init__(
        self,
        settings: ClusterSettings,
        *,
        placement: dict[str, AgentPlacement],
        fingerprint: str,
        local: MultiprocessingTransport | None = None,
        on_node_joined: Callable[[str], None] | None = None,
        on_leadership_lost: Callable[[], None] | None = None,
        on_adopt: Callable[[str, Worker], Callable[[IpcMessage], None] | None] | None = None,
    ) -> None:
        self.settings = settings
        self.placement = dict(placement)
        """Which nodes may run each agent that runs on other hosts."""
        self.fingerprint = fingerprint
        self.local = local or MultiprocessingTransport()
        self.on_node_joined = on_node_joined
        self.on_leadership_lost = on_leadership_lost
        self.on_adopt = on_adopt
        """``(agent, worker)``: offers the supervisor an agent process a previous leader
        started; it answers where the process's messages go, or ``None`` when it has one for
        that agent already (then the process is killed)."""
        self.incarnation = os.urandom(8).hex()
        self.workers: dict[str, RemoteWorker] = {}
        """Every remote worker started and not yet closed, by worker id."""
        self.nc: Any = None
        self.kv: Any = None
        self.nodes: Presence | None = None
        self._lease: LeaderLease | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._background = TaskOwner(structlog.get_logger("goondan.cluster"))
        """Signals to nodes and unsubscriptions, sent without waiting."""
        self._rejoin_soon = asyncio.Event()
        """Set when the connection came back: the next heartbeat joins again."""
        self._ready_nodes: set[str] = set()
        """Nodes whose key says they take starts."""
        self._on_leader: dict[str, Worker] = {}
        """Placed agents running here for want of a node (``allowLeader``)."""
        self._starts_in_flight: dict[str, set[asyncio.Future[None]]] = {}
        """By node: one future per start asked of it and not yet answered. Failing one ends
        that start at once (the node turned out to run another bundle, or was lost), rather
        than when the start's timeout runs out."""
        self._adopting: dict[str, asyncio.Task[None]] = {}
        """Agent processes of a previous leader being taken over, by worker id."""
        self.stored = StoredInstances(settings.name, settings.heartbeat_seconds)
        """The conversations the agents keep in JetStream, whichever node runs them."""
        self.log = structlog.get_logger("goondan.cluster").bind(
            role="leader", cluster=settings.name
        )

    # -- joining ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, claim the leadership, watch the nodes and take over the agent processes a
        previous leader left running on them.

        While another leader holds the cluster this waits as its standby, and leads once that
        leader's key lapses (it died or was cut off). Raises :class:`ClusterUnavailable` when
        NATS cannot be used.
        """
        self.nc = await self.settings.connect(
            f"goondan-leader:{self.settings.name}", on_reconnected=self._rejoin_soon.set
        )
        try:
            self.kv = await open_bucket(self.nc.jetstream(), self.settings, create=True)
            self._lease = LeaderLease(
                self.kv,
                LEADER_KEY,
                {
                    "incarnation": self.incarnation,
                    "fingerprint": self.fingerprint,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                },
                seal=LeaderSeal(self.settings.leader_key, self.settings.bucket),
                patience=self.settings.expiry_seconds,
            )
            await self._claim()
            self.nodes = Presence(
                self.kv,
                NODE_KEYS,
                self.settings.expiry_seconds,
                on_join=self._node_joined,
                on_leave=self._node_left,
                on_update=self._node_updated,
            )
            await self.nodes.start()
            # Every node's agents known (and a previous leader's taken over) before the
            # supervisor starts anything: none is started twice.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.nodes.caught_up.wait(), self.settings.expiry_seconds)
            if self._adopting:
                await asyncio.wait(list(self._adopting.values()), timeout=START_TIMEOUT_SECONDS)
        except BaseException:
            await self.nc.close()
            raise
        self._heartbeat = asyncio.ensure_future(self._beat())
        self.stored.start(self.nc.jetstream())
        self.log.info(
            "cluster leader",
            server=self.settings.describe(),
            placement={agent: rule.describe() for agent, rule in self.placement.items()},
        )

    async def _claim(self) -> None:
        """Hold the ``leader`` key: created only where absent (the key-value store's
        compare-and-set is the election), so of several waiting, exactly one wins."""
        assert self._lease is not None
        beat = self.settings.heartbeat_seconds
        holder = await self._lease.claim(self.settings.expiry_seconds + beat, beat / 2)
        if holder is None:
            return
        self.log.info(
            "standby: the cluster has a leader; taking over if it goes",
            leader_host=holder.get("host"),
            leader_pid=holder.get("pid"),
        )
        while holder is not None:
            await asyncio.sleep(beat / 2)
            try:
                holder = await self._lease.acquire()
            except Exception as exc:  # disconnected, or the server lost the bucket
                self.log.debug("standby cannot read the leader's key", error=str(exc))
                with contextlib.suppress(Exception):
                    self.kv = self._lease.kv = await open_bucket(
                        self.nc.jetstream(), self.settings, create=True
                    )
        self.log.warning("the cluster's leader is gone; this standby leads now")

    async def _beat(self) -> None:
        assert self._lease is not None
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                if self._rejoin_soon.is_set():
                    self._rejoin_soon.clear()
                    held = await self._rejoin()
                else:
                    held = await self._lease.renew()
            except Exception as exc:  # disconnected (it reconnects by itself), or no bucket
                self.log.debug("leader heartbeat not written", error=str(exc))
                self._rejoin_soon.set()
                continue
            if not held:
                self.log.error("another process took the cluster's leadership; stopping")
                self._let_go_of_nodes()
                if self.on_leadership_lost is not None:
                    self.on_leadership_lost()
                return

    async def _rejoin(self) -> bool:
        """After a reconnection: the bucket again (made anew if the server lost it), our key
        again if it is still ours or free, the nodes watched afresh. ``False`` when another
        leader holds the key now."""
        assert self._lease is not None
        assert self.nodes is not None
        self.kv = await open_bucket(self.nc.jetstream(), self.settings, create=True)
        self._lease.kv = self.kv
        mine = self.incarnation
        holder = await self._lease.acquire(takeover=lambda h: h.get("incarnation") == mine)
        if holder is not None:
            return False
        await self.nodes.restart(self.kv)
        self.log.info("cluster membership resumed")
        return True

    # -- nodes -------------------------------------------------------------------------------

    def _node_joined(self, member: Member) -> None:
        """A node's key appeared (it may not take starts yet: see :meth:`_node_updated`)."""
        fingerprint = member.value.get("fingerprint")
        if fingerprint != self.fingerprint:
            self.log.error(
                "node runs a different bundle; its agents will not start",
                node=member.name,
                node_fingerprint=str(fingerprint)[:12],
                leader_fingerprint=self.fingerprint[:12],
            )
        else:
            self.log.info("node joined", node=member.name, host=member.value.get("host"))
        self._node_updated(member)

    def _node_updated(self, member: Member) -> None:
        """A node's heartbeat. Once it says it takes starts (``ready``), the supervisor is
        told (agents waiting for it start). It lists the agent processes it runs; any this
        leader does not know of (left from before the node was declared lost) is killed, so
        none runs twice."""
        if member.value.get("fingerprint") != self.fingerprint:
            self._abort_starts(member.name, different_bundle(member, self.fingerprint))
        if member.value.get("ready") and member.name not in self._ready_nodes:
            self._ready_nodes.add(member.name)
            if self.on_node_joined is not None:
                self.on_node_joined(member.name)
        running = member.value.get("workers")
        if not isinstance(running, list):
            return
        described = member.value.get("agents")
        agents = described if isinstance(described, dict) else {}
        for worker_id in running:
            if not isinstance(worker_id, str) or worker_id in self.workers:
                continue
            if worker_id in self._adopting:
                continue
            about = agents.get(worker_id)
            if isinstance(about, dict) and about.get("leader") != self.incarnation:
                # Started by a leader before us: take it over rather than start it again.
                self._adopting[worker_id] = self._background.start_soon(
                    self._adopt(member, worker_id, about), f"adopt:{worker_id}"
                )
                continue
            self.log.warning("orphan agent process on node killed", node=member.name)
            self._request_signal(member.name, worker_id, "KILL")

    async def _adopt(self, member: Member, worker_id: str, about: dict[str, Any]) -> None:
        """Take over agent process ``worker_id`` that a previous leader started on
        ``member``: listen to it and hand it to the supervisor, or kill it where it may not
        stay (another bundle, a placement that no longer admits it, one running already)."""
        agent = str(about.get("agent", ""))
        rule = self.placement.get(agent)
        try:
            admitted = (
                rule is not None
                and member.value.get("fingerprint") == self.fingerprint
                and rule.admits(member.name, labels_of(member))
                and self.on_adopt is not None
            )
            worker = RemoteWorker(
                agent,
                member.name,
                worker_id,
                self,
                lambda message: None,
                node_incarnation=member.incarnation,
                remote_pid=about.get("pid") if isinstance(about.get("pid"), int) else None,
            )
            if admitted:
                assert self.on_adopt is not None
                worker._outbox = Outbox(self.nc, self.settings.worker_subject(worker_id, "in"))
                self.workers[worker_id] = worker
                on_message = self.on_adopt(agent, worker)
                if on_message is not None:
                    worker.on_message = on_message
                    worker._subscription = await self.nc.subscribe(
                        self.settings.worker_subject(worker_id, "out"), cb=worker._received
                    )
                    # Only now, with what it sends next heard: what it still waits for was
                    # owed by the dead leader and would otherwise wait out its timeout.
                    worker.send(
                        build.event(
                            ORCHESTRATOR,
                            agent,
                            LeaderChanged(f"{socket.gethostname()}:{os.getpid()}"),
                        )
                    )
                    self.log.info(
                        "agent process taken over",
                        agent=agent,
                        node=member.name,
                        pid=worker.remote_pid,
                    )
                    return
                self.forget(worker)
            self.log.warning("agent process of a previous leader killed", agent=agent)
            self._request_signal(member.name, worker_id, "KILL")
        finally:
            self._adopting.pop(worker_id, None)

    def _let_go_of_nodes(self) -> None:
        """Leadership lost: the agents on nodes belong to the new leader now. Stop talking to
        them (nothing of ours may reach them, not even the drain of our own stop) and count
        them gone here."""
        for worker in list(self.workers.values()):
            worker._outbox = None
            worker._exit(ExitInfo(EXIT_NODE_LOST))
            self.forget(worker)

    def _node_left(self, member: Member, reason: str) -> None:
        self._ready_nodes.discard(member.name)
        lost = [
            w
            for w in self.workers.values()
            if w.node_name == member.name
            and (reason != "restarted" or w.node_incarnation == member.incarnation)
        ]
        self.log.warning(
            "node lost" if reason != "left" else "node left",
            node=member.name,
            reason=reason,
            agents=sorted(w.name for w in lost),
        )
        self._abort_starts(  # a delay: the start is placed again, or waits for a node
            member.name,
            NodeSilent(
                f"node {member.name!r} was lost ({reason}) before it started the agent",
                details={"node": member.name},
            ),
        )
        for worker in lost:
            worker._exit(ExitInfo(EXIT_NODE_LOST))

    def _abort_starts(self, node: str, error: AgentUnavailable) -> None:
        for abort in self._starts_in_flight.pop(node, set()):
            if not abort.done():
                abort.set_exception(error)

    def adopt(self, fingerprint: str, placement: dict[str, AgentPlacement]) -> None:
        """An edited bundle (``run --watch``): start agents under its fingerprint and
        placement from now on, and tell the nodes which bundle leads."""
        self.fingerprint = fingerprint
        self.placement = dict(placement)
        if self._lease is not None:
            self._lease.value = {**self._lease.value, "fingerprint": fingerprint}

    def node_of(self, agent: str) -> str | None:
        """The node ``agent`` runs on (or, while it does not run, where it may:
        :meth:`AgentPlacement.describe`); ``None`` for the leader's own host."""
        for worker in self.workers.values():
            if worker.name == agent and not worker.exited.done():
                return worker.node_name
        here = self._on_leader.get(agent)
        rule = self.placement.get(agent)
        if rule is None or (here is not None and not here.exited.done()):
            return None
        return rule.describe()

    def instances_of(self, agent: str) -> list[str]:
        """The conversation instances ``agent`` keeps in JetStream (on a node)."""
        return self.stored.of(agent)

    def cluster_status(self) -> dict[str, Any]:
        """The leader and each node: whether it is up and runs the same bundle, its labels
        and the agents it runs."""
        now = time.monotonic()
        members = self.nodes.members if self.nodes is not None else {}
        named = {node for rule in self.placement.values() for node in rule.named_nodes}
        running: dict[str, list[str]] = {}
        for worker in self.workers.values():
            if not worker.exited.done():
                running.setdefault(worker.node_name, []).append(worker.name)
        rows = []
        for name in sorted(named | set(members)):
            member = members.get(name)
            rows.append(
                {
                    "node": name,
                    "up": member is not None and name in self._ready_nodes,
                    "host": member.value.get("host") if member else None,
                    "pid": member.value.get("pid") if member else None,
                    "labels": labels_of(member) if member else {},
                    "sameBundle": member.value.get("fingerprint") == self.fingerprint
                    if member
                    else None,
                    "agents": sorted(running.get(name, [])),
                    "lastHeartbeatSecondsAgo": round(now - member.seen_at, 3) if member else None,
                }
            )
        return {
            "cluster": self.settings.name,
            "server": self.settings.describe(),
            "fingerprint": self.fingerprint,
            "nodes": rows,
        }

    # -- the Transport -----------------------------------------------------------------------

    def _load(self, node: str) -> int:
        """How many of our agents run on ``node``."""
        return sum(1 for w in self.workers.values() if w.node_name == node and not w.exited.done())

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> Worker:
        """Start ``name`` on a host its placement admits; raises ``AgentUnavailable`` when
        none can."""
        if isinstance(plan, AgentPlan):  # here too, conversations live in JetStream
            plan = with_cluster_storage(plan, self.settings)
        rule = self.placement.get(name)
        if rule is None:
            return await self.local.start(name, plan, on_message)
        silent: set[str] = set()
        while True:  # each turn rules a node out: it ends
            member = choose_node(
                name,
                rule,
                self.nodes.members if self.nodes is not None else {},
                self._ready_nodes,
                self.fingerprint,
                self._load,
                silent=silent,
            )
            if member is None:
                self.log.warning(
                    "no node can run the agent; it runs on the leader",
                    agent=name,
                    placement=rule.describe(),
                )
                self._on_leader[name] = await self.local.start(name, plan, on_message)
                return self._on_leader[name]
            try:
                return await self._start_on(member, name, on_message)
            except NodeSilent as exc:
                self.log.info(
                    "node gone a moment ago did not take the start; placing the agent again",
                    agent=name,
                    node=member.name,
                    reason=exc.message,
                )
                silent.add(member.name)

    async def _start_on(
        self, member: Member, name: str, on_message: Callable[[IpcMessage], None]
    ) -> RemoteWorker:
        worker = RemoteWorker(name, member.name, os.urandom(8).hex(), self, on_message)
        worker.node_incarnation = member.incarnation
        # Listening before the node is asked, so no frame of the new process is missed.
        worker._subscription = await self.nc.subscribe(
            self.settings.worker_subject(worker.worker_id, "out"), cb=worker._received
        )
        self.workers[worker.worker_id] = worker
        try:
            reply = await self._ask_start(worker)
        except BaseException:
            self.forget(worker)
            raise
        worker.remote_pid = reply.get("pid")
        worker._outbox = Outbox(self.nc, self.settings.worker_subject(worker.worker_id, "in"))
        return worker

    async def _ask_start(self, worker: RemoteWorker) -> dict[str, Any]:
        from nats.errors import NoRespondersError

        request = {
            "agent": worker.name,
            "worker": worker.worker_id,
            "fingerprint": self.fingerprint,
            "leader": self.incarnation,
        }
        node = worker.node_name
        abort: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        abort.add_done_callback(_consume_exception)
        self._starts_in_flight.setdefault(node, set()).add(abort)
        asking = asyncio.ensure_future(
            self.nc.request(
                self.settings.node_subject(node, "start"),
                encode_json(request),
                timeout=START_TIMEOUT_SECONDS,
            )
        )
        try:
            await asyncio.wait({asking, abort}, return_when=asyncio.FIRST_COMPLETED)
            if abort.done():
                # The node answers no more for this start (it runs another bundle, or is
                # gone): say so now; a process it starts anyway is killed as an orphan.
                abort.result()
            msg = asking.result()
        except NoRespondersError:
            raise not_listening(node) from None
        except TimeoutError:
            raise AgentUnavailable(
                f"node {node!r} did not start agent {worker.name!r} within "
                f"{START_TIMEOUT_SECONDS:g} s",
                details={"node": node},
            ) from None
        except AgentUnavailable:
            raise
        except Exception as exc:
            raise AgentUnavailable(
                f"cannot reach node {node!r}: {type(exc).__name__}: {exc}", details={"node": node}
            ) from None
        finally:
            asking.cancel()
            self._starts_in_flight.get(node, set()).discard(abort)
        reply = decode_json(msg.data)
        if not reply.get("ok"):
            raise AgentUnavailable(
                str(reply.get("message") or f"node {node!r} refused to start {worker.name!r}"),
                details={"node": node},
            )
        return reply

    def forget(self, worker: RemoteWorker) -> None:
        """Stop listening to ``worker``, which has exited or is given up."""
        self.workers.pop(worker.worker_id, None)
        subscription, worker._subscription = worker._subscription, None
        if subscription is not None:
            self._background.start_soon(subscription.unsubscribe(), "unsubscribe")

    def signal(self, worker: RemoteWorker, signal_name: str) -> None:
        """Ask ``worker``'s node to send it ``SIG<signal_name>``."""
        if not worker.exited.done():
            self._request_signal(worker.node_name, worker.worker_id, signal_name)

    def _request_signal(self, node: str, worker_id: str, signal_name: str) -> None:
        async def ask() -> None:
            with contextlib.suppress(Exception):  # a node away: its loss ends the worker
                await self.nc.request(
                    self.settings.node_subject(node, "signal"),
                    encode_json({"worker": worker_id, "signal": signal_name}),
                    timeout=self.settings.heartbeat_seconds,
                )

        self._background.start_soon(ask(), f"signal:{node}")

    # -- leaving ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Give up the leadership (nodes stop whatever still runs), then disconnect."""
        if self._heartbeat is not None:
            await cancel_and_wait(self._heartbeat)
        if self.nodes is not None:
            await self.nodes.stop()
        await self.stored.stop()
        await self._background.settle(self.settings.heartbeat_seconds)
        await self._background.aclose()
        if self._lease is not None:
            await self._lease.release()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        await self.local.close()


def _consume_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
