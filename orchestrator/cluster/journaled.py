"""The operations of a cluster's leader: every external request journaled before it runs, and
those a dead leader accepted finished by the next (:mod:`orchestrator.cluster.request_journal`).

Each request from outside the swarm (the HTTP API's front doors, ``send`` included) is
written to the journal before its Turn starts; nothing is accepted that could not be
written (``E_STORAGE``). Its Turn then runs in a task of its own, so a caller that leaves
stops waiting, never the recording of the answer. A leader that takes the cluster over
routes every journaled request still unanswered again, with its request id and what is
left of its timeout, and records the answer.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

import msgspec

from goondan.errors import DeliveryCode
from ipc import DEFAULT_INSTANCE_KEY, IpcError
from ipc.delegation import DelegateAnswer
from orchestrator.cluster.errors import ClusterUnavailable
from orchestrator.cluster.request_journal import JournaledRequest, RequestJournal
from orchestrator.operations.service import SwarmService
from orchestrator.requests import KeyReused, RequestRecord
from orchestrator.requests.store import new_request_id

if TYPE_CHECKING:
    from orchestrator.cluster.leader import ClusterTransport
from orchestrator.operations.protocol import DeltaSink, TurnOptions


@dataclass(eq=False)
class JournaledService(SwarmService):
    """:class:`SwarmService` of a cluster's leader (see the module docstring)."""

    journal: RequestJournal | None = None
    """Set once this process leads (a standby journals nothing)."""
    incarnation: str = ""
    """This leader's incarnation, recorded with each request it accepts."""
    request_timeout_ms: int = 300_000
    """The swarm's ``requestTimeoutSeconds``: how long a request without its own may take."""
    _runs: dict[str, asyncio.Task[DelegateAnswer]] = field(default_factory=dict)
    """The Turns of journaled requests running now, by request id: one run per request,
    however many ask for it (its front door, a takeover, a key asked again)."""

    async def claim(self, record: RequestRecord) -> RequestRecord | None:
        """Journal ``record`` with its idempotency key before the request desk accepts it
        (see :class:`orchestrator.requests.SharedRequests`)."""
        journal = self.journal
        if journal is None:
            return None
        entry = msgspec.convert(
            {**msgspec.to_builtins(record), "leader": self.incarnation}, JournaledRequest
        )
        try:
            journaled, fresh = await journal.accept(entry)
        except KeyReused:
            raise
        except Exception as exc:  # the server refused or is away: nothing may start
            self.log.error("request not journaled; refused", error=str(exc))
            raise OSError(errno.EIO, "the cluster's request journal cannot be written") from None
        if fresh:
            return None
        self.log.info(
            "request of another leader asked again by its key", request_id=journaled.request_id
        )
        taken = as_record(journaled)
        if taken is None:  # a journal entry no front door of ours wrote: keep it out
            raise OSError(errno.EIO, "the request journaled under this key is unreadable")
        return taken

    async def lookup(self, request_id: str) -> RequestRecord | None:
        """The journaled request ``request_id`` (see :class:`orchestrator.requests.SharedRequests`);
        ``None`` when the journal holds none, or cannot be read now."""
        journal = self.journal
        if journal is None:
            return None
        try:
            journaled = await journal.get(request_id)
        except Exception as exc:  # the server is away: not found here, for now
            self.log.warning("journal not read", request_id=request_id, error=str(exc))
            return None
        return as_record(journaled) if journaled is not None else None

    async def request(
        self, text: str, *, agent: str | None = None, **options: Unpack[TurnOptions]
    ) -> DelegateAnswer:
        """Journal the request, then run it as :meth:`SwarmService.request` does; its answer
        is recorded whether or not its caller still waits."""
        journal = self.journal
        if journal is None:
            return await super().request(text, agent=agent, **options)
        timeout_ms = options.get("timeout_ms")
        entry = JournaledRequest(
            request_id=options.get("request_id") or new_request_id(),
            agent=agent or self.entry_agent,
            instance_key=options.get("instance_key", DEFAULT_INSTANCE_KEY),
            input=text,
            timeout_ms=timeout_ms,
            relay=options.get("relay", False),
            trace_id=options.get("trace_id") or "",
            accepted_at=time.time(),
            leader=self.incarnation,
        )
        try:
            entry, fresh = await journal.accept(entry)
        except Exception as exc:  # the server refused or is away: nothing may start
            self.log.error("request not journaled; refused", error=str(exc))
            return DelegateAnswer.failure(
                IpcError(
                    "the request could not be journaled in the cluster, so it was not started",
                    code=DeliveryCode.E_STORAGE,
                )
            )
        self.log.debug(
            "request journaled", request_id=entry.request_id, agent=entry.agent, fresh=fresh
        )
        if not fresh and entry.answer is not None:
            return DelegateAnswer.from_wire(entry.answer)
        running = self._runs.get(entry.request_id)
        if running is None:
            running = self._start(
                entry.request_id,
                self._run(journal, entry, timeout_ms, options.get("on_delta")),
            )
        return await asyncio.shield(running)

    def _start(
        self, request_id: str, run: Coroutine[Any, Any, DelegateAnswer]
    ) -> asyncio.Task[DelegateAnswer]:
        """Run ``run`` beside its caller. Not among the helpers, which shutdown cancels
        first: a request's Turn drains and answers as on one host (the router answers
        whatever is still pending when it closes)."""
        task = asyncio.ensure_future(run)
        self._runs[request_id] = task
        task.add_done_callback(lambda _: self._runs.pop(request_id, None))
        return task

    async def _run(
        self,
        journal: RequestJournal,
        entry: JournaledRequest,
        timeout_ms: int | None,
        on_delta: DeltaSink | None = None,
    ) -> DelegateAnswer:
        answer = await super().request(
            entry.input,
            agent=entry.agent,
            instance_key=entry.instance_key,
            timeout_ms=timeout_ms,
            trace_id=entry.trace_id or None,
            on_delta=on_delta,
            relay=entry.relay,
            request_id=entry.request_id,
        )
        try:
            await journal.finish(entry.request_id, answer.to_wire())
            if entry.leader != self.incarnation:
                self.log.info(
                    "request of the previous leader answered",
                    request_id=entry.request_id,
                    status=answer.status,
                )
        except Exception as exc:  # its caller still gets it; a later leader runs it again
            self.log.warning("answer not journaled", request_id=entry.request_id, error=str(exc))
        return answer

    async def finish_unanswered(self) -> int:
        """Route again every journaled request a previous leader accepted and never
        answered, each with what is left of its timeout; how many were found."""
        journal = self.journal
        if journal is None:
            return 0
        unanswered = [r for r in await journal.unanswered() if r.leader != self.incarnation]
        for entry in unanswered:
            self.log.info(
                "finishing a request the previous leader accepted",
                request_id=entry.request_id,
                agent=entry.agent,
                instance_key=entry.instance_key,
            )
            allowed = entry.timeout_ms or self.request_timeout_ms
            left = int(entry.accepted_at * 1000 + allowed - time.time() * 1000)
            if left <= 0:
                timed_out = DelegateAnswer.failure(
                    IpcError(
                        f"no answer within the request's timeout ({allowed} ms): its leader "
                        "went away",
                        code=DeliveryCode.AGENT_REQUEST_TIMEOUT,
                    )
                )
                await journal.finish(entry.request_id, timed_out.to_wire())
                continue
            if entry.request_id not in self._runs:
                self._start(entry.request_id, self._run(journal, entry, left))
        return len(unanswered)


def as_record(journaled: JournaledRequest) -> RequestRecord | None:
    """A journaled request as the request desk keeps it (``None``: not one it can keep)."""
    try:
        return msgspec.convert(msgspec.to_builtins(journaled), RequestRecord)
    except msgspec.ValidationError:
        return None


async def open_journal(service: SwarmService, cluster: ClusterTransport, timeout_ms: int) -> None:
    """Once ``cluster`` leads: journal ``service``'s requests there from now on. Raises
    :class:`ClusterUnavailable` when the journal cannot be opened."""
    if not isinstance(service, JournaledService):
        return
    try:
        service.journal = await RequestJournal.open(cluster.nc, cluster.settings)
    except Exception as exc:
        raise ClusterUnavailable(f"the cluster's request journal cannot be opened: {exc}") from None
    service.incarnation = cluster.incarnation
    service.request_timeout_ms = timeout_ms


async def finish_unanswered(service: SwarmService) -> None:
    """:meth:`JournaledService.finish_unanswered`, its failure logged (the requests stay
    journaled for the next leader)."""
    if not isinstance(service, JournaledService):
        return
    try:
        await service.finish_unanswered()
    except Exception as exc:
        service.log.error("journaled requests not read", error=str(exc))
