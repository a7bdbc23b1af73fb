"""Where the HTTP API's front doors hand their requests: each is recorded before it is accepted,
run once per idempotency key, and answered to whoever asks for it by its id.

:meth:`RequestDesk.admit` records a new request durably (:mod:`orchestrator.requests.store`)
and starts its Turn in a task of the desk, not of the HTTP response: a client that leaves stops
waiting, never the recording of the answer. A request whose ``Idempotency-Key`` names one kept
already starts nothing: the same body finds that request (running: its answer to wait for;
done: its recorded answer), another body is refused (:class:`KeyReused`). On daemon start
:meth:`RequestDesk.resume` routes again every request the store still holds as running, with its
request id, so the agent resumes its Turn rather than starting another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import structlog

from goondan.errors import DeliveryCode
from ipc import EXTERNAL_CALLER, IpcError
from ipc.delegation import DelegateAnswer
from ipc.protocol import new_trace_id
from ipc.runtime_events import DeliveryLostEvent
from orchestrator.operations.protocol import SwarmOperations
from orchestrator.requests.feed import RequestFeed
from orchestrator.requests.group_sync import GroupSync
from orchestrator.requests.store import (
    KeyReused,
    Kind,
    RequestRecord,
    RequestStore,
    digest,
    new_request_id,
)


@runtime_checkable
class SharedRequests(Protocol):
    """Where the leaders of a cluster share the requests they accept, so a key asked again
    of the next leader after a failover finds the request the first one took."""

    async def claim(self, record: RequestRecord) -> RequestRecord | None:
        """Journal ``record`` (its idempotency key claimed for the whole cluster) before it
        is accepted: ``None`` when it is now this daemon's, else the request its key names
        already. Raises :class:`KeyReused` for that key with another body, ``OSError`` when
        the journal cannot be written (nothing accepted)."""
        ...

    async def lookup(self, request_id: str) -> RequestRecord | None:
        """The request ``request_id`` as the journal holds it (another leader may have
        accepted it); ``None`` when it holds none."""
        ...


@dataclass(frozen=True, slots=True)
class Intake:
    """What a front door asks: a Turn of ``agent`` on ``text``, with its options."""

    kind: Kind
    agent: str
    text: str
    instance_key: str
    timeout_ms: int | None = None
    relay: bool = False
    deltas: bool = False
    """Stream the Turn's text (to the request's feed)."""
    approvals: bool = False
    """Keep the request trace's ``approval.*`` events in its feed."""
    activity: bool = False
    """Keep its ``step.*`` and ``tool.*`` events too (a front door showing the Turn's work)."""
    idempotency_key: str | None = None
    body_digest: str = ""
    """Digest of what was asked (front door, agent, body), compared when a key is reused."""
    echo: dict[str, object] | None = None
    """What the front door's answer repeats of the request, kept in its record."""


@dataclass(frozen=True, slots=True)
class Admission:
    """A request as the desk took it: a new one (``fresh``), or the one its key names."""

    record: RequestRecord
    fresh: bool

    @property
    def request_id(self) -> str:
        """The request's id."""
        return self.record.request_id


@dataclass(eq=False, slots=True)
class Running:
    """A request whose Turn this daemon runs now."""

    record: RequestRecord
    feed: RequestFeed
    answer: asyncio.Future[DelegateAnswer]
    task: asyncio.Task[None] | None = None
    final: bool = False
    """Its answer is the request's (recorded), not the daemon's stopping under it."""


@dataclass(eq=False)
class RequestDesk:
    """The accepted requests of one daemon (see the module docstring)."""

    swarm: SwarmOperations
    store: RequestStore
    shared: SharedRequests | None = None
    """A cluster's journal of accepted requests (``None`` on one host)."""
    running: dict[str, Running] = field(default_factory=dict)
    _keys: dict[str, str] = field(default_factory=dict)
    """Key digest → id of a running request (found before its record is on disk)."""
    _opened: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the store's records on disk are read: no request is taken before (its key
    could name one of them)."""
    log: structlog.typing.FilteringBoundLogger = field(
        default_factory=lambda: structlog.get_logger("goondan.requests")
    )
    _syncs: GroupSync = field(default_factory=GroupSync)
    """Forces accepted records to disk, one sync for all the requests waiting at once."""

    def __post_init__(self) -> None:
        if self.store.directory is None:  # nothing on disk to read first
            self._opened.set()

    async def open(self) -> list[RequestRecord]:
        """Read the store's records on disk (once this daemon owns the state directory);
        returns those a previous daemon accepted and never answered, for :meth:`resume`."""
        unanswered = await asyncio.to_thread(self.store.load)
        self._opened.set()
        return unanswered

    async def opened(self) -> None:
        """Until the records on disk are read."""
        await self._opened.wait()

    async def admit(self, intake: Intake) -> Admission:
        """Take ``intake``: the request its idempotency key names, or a new one recorded on
        disk and started. Raises :class:`KeyReused` for a key kept with another body,
        :class:`~orchestrator.requests.store.StoreFull`, or ``OSError`` (nothing accepted)."""
        await self._opened.wait()
        key_digest = digest("idempotency-key", intake.idempotency_key or "")
        if intake.idempotency_key is not None:
            found = self._find_key(key_digest)
            if found is not None:
                if found.body_digest != intake.body_digest:
                    raise KeyReused(
                        "this Idempotency-Key was used with another request body; "
                        "use a fresh key for a new request"
                    )
                if found.state == "running":  # a previous daemon's, not routed again yet
                    self.resume([found])
                return Admission(found, fresh=False)
        record = RequestRecord(
            request_id=new_request_id(),
            kind=intake.kind,
            agent=intake.agent,
            instance_key=intake.instance_key,
            input=intake.text,
            timeout_ms=intake.timeout_ms,
            relay=intake.relay,
            stream=intake.deltas,
            trace_id=new_trace_id(),
            key_digest=key_digest if intake.idempotency_key is not None else "",
            body_digest=intake.body_digest,
            echo=intake.echo,
            accepted_at=time.time(),
        )
        if self.shared is not None and record.key_digest:
            taken = await self.shared.claim(record)
            if taken is not None:  # another leader took it first: that request is this one
                return await self._adopt(taken)
        running = self._hold(record)
        try:
            self.store.reserve(record)
            await self._record(record)
        except BaseException:
            self._release(running)
            self.store.forget(record.request_id)
            raise
        self._start(running, intake.deltas, intake.approvals or intake.activity)
        return Admission(record, fresh=True)

    async def _adopt(self, record: RequestRecord) -> Admission:
        """Keep here the request another leader accepted under the same key: its answer,
        or its Turn, routed again under its own id (the agent takes that Turn up)."""
        if record.request_id in self.running or self.store.get(record.request_id) is not None:
            return Admission(self.record(record.request_id) or record, fresh=False)
        self.store.reserve(record)
        await self._record(record)
        if record.state == "running":
            self.resume([record])
        return Admission(record, fresh=False)

    def resume(self, records: list[RequestRecord]) -> None:
        """Route again the requests a previous daemon accepted and never answered."""
        for record in records:
            if record.request_id in self.running:
                continue
            current = self.store.get(record.request_id)
            if current is None or current.state == "done":  # picked up and answered since
                continue
            self.log.info(
                "resuming an accepted request",
                request_id=record.request_id,
                agent=record.agent,
                instance_key=record.instance_key,
            )
            self._start(self._hold(record), deltas=record.stream, watch=False)

    async def find(self, request_id: str) -> RequestRecord | None:
        """:meth:`record`, or the request another leader of the cluster accepted under that
        id (kept here from now on: its answer, or its Turn taken up)."""
        record = self.record(request_id)
        if record is not None or self.shared is None:
            return record
        journaled = await self.shared.lookup(request_id)
        if journaled is None:
            return None
        return (await self._adopt(journaled)).record

    def record(self, request_id: str) -> RequestRecord | None:
        """The record of ``request_id`` (running here or kept); ``None`` when unknown."""
        running = self.running.get(request_id)
        return running.record if running is not None else self.store.get(request_id)

    def feed(self, request_id: str) -> RequestFeed | None:
        """The live feed of a request running here."""
        running = self.running.get(request_id)
        return running.feed if running is not None else None

    async def answer(self, request_id: str, wait: float | None = None) -> DelegateAnswer | None:
        """The answer of ``request_id``, waiting for it at most ``wait`` seconds (``None``:
        until it comes); ``None`` when it is not there by then, the id is unknown, or the
        daemon stopped before it was answered (it is answered after the next start)."""
        running = self.running.get(request_id)
        if running is not None:
            try:
                async with asyncio.timeout(wait):
                    answer = await asyncio.shield(running.answer)
            except TimeoutError:
                return None
            except asyncio.CancelledError:
                if running.answer.cancelled():  # the desk closed: not answered here
                    return None
                raise
            return answer if running.final else None
        record = self.store.get(request_id)
        if record is None or record.answer is None:
            return None
        return DelegateAnswer.from_wire(record.answer)

    def trace_of(self, request_id: str) -> str | None:
        """The trace a request's Turn runs under (what cancelling it cancels)."""
        record = self.record(request_id)
        return record.trace_id if record is not None else None

    async def close(self) -> None:
        """Stop waiting for the answers still running (they stay ``running`` on disk)."""
        tasks = [r.task for r in self.running.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.to_thread(self._syncs.close)
        self.store.close()

    # -- inside --------------------------------------------------------------------------------

    async def _record(self, record: RequestRecord) -> None:
        """Append ``record`` and, a running one, wait until it is on the disk."""
        synced = self.store.append(record)
        if synced is not None:
            await self._syncs.sync(*synced)

    def _find_key(self, key_digest: str) -> RequestRecord | None:
        request_id = self._keys.get(key_digest) or self.store.by_key(key_digest)
        return self.record(request_id) if request_id is not None else None

    def _hold(self, record: RequestRecord) -> Running:
        future: asyncio.Future[DelegateAnswer] = asyncio.get_running_loop().create_future()
        running = Running(record, RequestFeed(record.trace_id), future)
        self.running[record.request_id] = running
        if record.key_digest:
            self._keys[record.key_digest] = record.request_id
        return running

    def _release(self, running: Running) -> None:
        record = running.record
        self.running.pop(record.request_id, None)
        if record.key_digest and self._keys.get(record.key_digest) == record.request_id:
            del self._keys[record.key_digest]

    def _start(self, running: Running, deltas: bool, watch: bool) -> None:
        name = f"request:{running.record.request_id}"
        running.task = asyncio.create_task(self._run(running, deltas, watch), name=name)

    async def _run(self, running: Running, deltas: bool, watch: bool) -> None:
        record, feed, swarm = running.record, running.feed, self.swarm
        try:
            try:
                # Watched from before the request goes out, so no parked call slips past.
                with swarm.watching(feed.notice) if watch else contextlib.nullcontext():
                    answer = await swarm.request(
                        record.input,
                        agent=record.agent,
                        instance_key=record.instance_key,
                        timeout_ms=record.timeout_ms,
                        trace_id=record.trace_id,
                        on_delta=feed.delta if deltas else None,
                        relay=record.relay,
                        request_id=record.request_id,
                    )
            except Exception as exc:  # a bug of ours must still end the request with an answer
                self.log.exception("request failed", request_id=record.request_id)
                answer = DelegateAnswer.failure(IpcError(str(exc), code=DeliveryCode.E_INTERNAL))
            await self._settle(running, answer)
        finally:
            self._release(running)
            if not running.answer.done():
                running.answer.cancel()

    async def _settle(self, running: Running, answer: DelegateAnswer) -> None:
        """Record the answer (unless the daemon is stopping under it: the request stays
        ``running`` and is routed again on start), then hand it to whoever waits."""
        record = running.record
        running.final = answer.ok or not self.swarm.stopping
        if running.final:
            try:
                done = self.store.finished(record, answer.to_wire())
                self.store.persist(done)  # an answer is appended, not synced: microseconds
                self.store.reserve(done)
            except OSError as exc:
                self.log.error(
                    "request answer not recorded", request_id=record.request_id, error=str(exc)
                )
        if record.kind == "send" and not answer.ok:
            self._send_lost(record, answer)
        running.feed.finish(answer)
        if not running.answer.done():
            running.answer.set_result(answer)

    def _send_lost(self, record: RequestRecord, answer: DelegateAnswer) -> None:
        """A send nobody waited for failed: logged and kept as a ``delivery.lost`` event."""
        error = answer.error or IpcError("the request failed")
        self.log.warning(
            "unwaited send failed",
            agent=record.agent,
            instance_key=record.instance_key,
            code=error.code,
            error=error.message,
        )
        lost = DeliveryLostEvent(
            instance_key=record.instance_key,
            sender=EXTERNAL_CALLER,
            error=error.to_dict(),
        )
        self.swarm.record(lost, record.agent)
