"""What the daemon's faces may ask of a running swarm: one narrow protocol.

The HTTP API (:mod:`orchestrator.http.app`) and the metrics (:mod:`orchestrator.http.metrics`)
see the swarm through :class:`SwarmOperations` alone, never through the Orchestrator's
collaborators (its supervisor, router, broker, event log): the daemon's
:class:`~orchestrator.operations.service.SwarmService` implements it, and a test may hand the
faces anything else that does. The arrows point one way: the daemon knows its faces, the faces
know this package. Every answer is typed (:mod:`orchestrator.operations.answers`).

Two words are kept apart. A *request* runs a Turn and is answered; a *send* (``POST
.../sends``) is a request nobody waits for. Neither is an agent's ``agents__send`` delivery,
which the router tracks as its sends in flight (``sendsInFlight`` in the status rows).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

from goondan.errors import DaemonError
from ipc.runtime_events import AnyEvent, RuntimeEvent
from orchestrator.operations.answers import (
    ApprovalAnswer,
    ApprovalRow,
    ErrorBody,
    ErrorDetail,
    InstanceRow,
    PendingRow,
    PoolRow,
    Restarted,
    SwarmStatus,
    TraceUsage,
    UsageReport,
)
from orchestrator.status import ProcessStatus

if TYPE_CHECKING:
    from bundle.plan import AgentPlan
    from goondan.usage import Usage
    from ipc.delegation import DelegateAnswer
    from ipc.events import TextDelta
    from ipc.questions import ApprovalDecision, DeleteInstanceResult, RestartInstanceResult
    from orchestrator.connection_health import ConnectionHealth
    from orchestrator.operations.live import Subscription

DeltaSink = Callable[[str, "TextDelta"], None]
"""Takes each piece of a streamed Turn's text: ``(agent, delta)``; it must not block."""
EventListener = Callable[[AnyEvent], None]
"""Takes each runtime event as it is published; it must not block."""


class TurnOptions(TypedDict, total=False):
    """How a request's Turn runs (:meth:`SwarmOperations.request`); each may be left out."""

    instance_key: str
    """The conversation (default: ``default``)."""
    timeout_ms: int | None
    """How long to wait for the answer (default: the swarm's policy)."""
    trace_id: str | None
    """The trace to run it in (default: a new one)."""
    on_delta: DeltaSink | None
    """Where its text streams as it is produced (default: nowhere)."""
    relay: bool
    """Stream the text of the agents it asks too (default: no)."""
    request_id: str
    """The caller's stable id of the request, the same on every delivery of it (default: the
    router's correlation id)."""


class RequestOptions(TurnOptions, total=False):
    """:class:`TurnOptions` and the agent to ask."""

    agent: str | None
    """The agent (default: the entry agent)."""


class OperationRefused(DaemonError, RuntimeError):
    """The swarm cannot do what was asked as things stand (the HTTP API answers 409)."""


@dataclass(frozen=True, slots=True)
class SwarmProcesses:
    """The swarm's processes on this host, as the daemon knows them."""

    pids: dict[int, str]
    """Agent and connector pids → what they are (``agent 'worker'``)."""
    scopes: dict[str, str]
    """Their process scope tokens → the same."""
    daemon_pid: int
    euid: int
    """The daemon's user, as whom agents and their programs run."""


@dataclass(frozen=True, slots=True)
class AgentView:
    """One agent's process as the faces may see it: read-only, taken when asked."""

    name: str
    status: ProcessStatus
    ready: bool
    """Its process runs and takes requests."""
    restarts: int
    """Times it was restarted."""
    plan: AgentPlan | None
    """What it runs (its tools: the metrics label a tool call by them)."""


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    """What deciding came to: an HTTP status and the body to answer with."""

    status: int
    body: ApprovalAnswer | ErrorBody

    @classmethod
    def refused(cls, status: int, code: str, message: str) -> DecisionOutcome:
        """A refusal, in the API's error shape."""
        return cls(status, ErrorBody(error=ErrorDetail(code=code, message=message)))


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """One Connection as the metrics show it."""

    name: str
    ready: bool
    """Its connector process is ready."""
    health: ConnectionHealth


class SwarmOperations(Protocol):
    """The running swarm as the HTTP API and the metrics use it."""

    entry_agent: str
    """The agent a request goes to when it names none."""
    stopping: bool
    """Shutting down: requests that would start work are refused."""

    @property
    def name(self) -> str:
        """The swarm's name."""
        ...

    # -- agents ------------------------------------------------------------------------------

    def agent_names(self) -> Collection[str]:
        """The swarm's agents (a reload may change them)."""
        ...

    def agent(self, name: str) -> AgentView | None:
        """Agent ``name``'s process as it stands (``None``: no such agent)."""
        ...

    def status(self) -> SwarmStatus:
        """``GET /v1/agents`` without its ``pid``: the swarm, a row per agent and per
        Connection, the cluster and the rate-limit pools when there are any."""
        ...

    async def restart(self, agent: str, *, fresh: bool = False) -> Restarted:
        """Stop ``agent`` gracefully and start it again (``fresh``: its conversations deleted
        in between). Raises :class:`OperationRefused`
        when it cannot be done as asked."""
        ...

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self, text: str, *, agent: str | None = None, **options: Unpack[TurnOptions]
    ) -> DelegateAnswer:
        """Run a Turn of ``agent`` (default: the entry agent) on ``text`` and wait for its
        answer; with ``on_delta`` its text streams there as it is produced. ``request_id`` is
        the caller's stable id of the request (the same on every delivery of it)."""
        ...

    def pending(self) -> list[PendingRow]:
        """The requests waiting for an answer (rows of ``GET /v1/requests``)."""
        ...

    def sends_in_flight(self) -> int:
        """Agents' sends delivered but not yet done."""
        ...

    def cancel(self, request_or_trace_id: str, reason: str) -> list[str]:
        """Cancel a running request by request id or trace id; the traces cancelled."""
        ...

    # -- conversations and usage -------------------------------------------------------------

    def instances(self, agent: str | None = None) -> list[InstanceRow]:
        """The conversation instances on disk (of ``agent``, or of every agent)."""
        ...

    async def delete_instance(self, agent: str, key: str) -> DeleteInstanceResult:
        """Delete one conversation (``error`` when it was not deleted)."""
        ...

    async def restart_instance(self, agent: str, key: str) -> RestartInstanceResult:
        """Reload one conversation from disk (``error`` when it was not)."""
        ...

    def usage_report(self, *, traces: int = 50) -> UsageReport:
        """What model calls used and what budgets are left (``GET /v1/usage``)."""
        ...

    def trace_usage(self, trace_id: str) -> TraceUsage | None:
        """One trace's usage, ``None`` when none was recorded for it."""
        ...

    def model_usage(self) -> Mapping[str, Usage]:
        """Model calls' usage per agent since the daemon started."""
        ...

    def pools(self) -> list[PoolRow]:
        """Each rate-limit pool as it stands."""
        ...

    # -- approvals ---------------------------------------------------------------------------

    def approvals(self, *, agent: str | None, include_decided: bool) -> list[ApprovalRow]:
        """Tool calls parked for approval (pending ones, or every one)."""
        ...

    def approval(self, approval_id: str) -> ApprovalRow | None:
        """One approval's record, ``None`` for an unknown id."""
        ...

    async def decide(self, decision: ApprovalDecision, *, wait: bool = False) -> DecisionOutcome:
        """Carry out an operator's decision on a parked tool call."""
        ...

    def processes(self) -> SwarmProcesses:
        """The agent and connector processes the swarm runs on this host right now (who may
        not decide an approval)."""
        ...

    def record(self, event: RuntimeEvent, agent: str) -> None:
        """Record a runtime event about ``agent``, stamped now (the event log, the live
        stream, the metrics)."""
        ...

    # -- Connections -------------------------------------------------------------------------

    def connection_names(self) -> Collection[str]:
        """The swarm's Connections."""
        ...

    def connection_states(self) -> list[ConnectionState]:
        """Each Connection's readiness and health."""
        ...

    # -- live events -------------------------------------------------------------------------

    def subscribe(self) -> AbstractAsyncContextManager[Subscription]:
        """A queue of the runtime events published during the ``async with``."""
        ...

    def watching(self, listener: EventListener) -> AbstractContextManager[None]:
        """Call ``listener`` with each runtime event published during the ``with``."""
        ...
