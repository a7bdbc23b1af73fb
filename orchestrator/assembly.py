"""Build a swarm's collaborators from its bundle, for :meth:`Orchestrator.from_bundle
<orchestrator.daemon.Orchestrator.from_bundle>`.

The Orchestrator takes them ready (:class:`SwarmParts`) and links the few callbacks that are
its own (an agent's exit, a lost delivery, a finished Connection, a lost leadership, the runtime
events it records). Everything here can be built before any of that: what depends on an agent's
plan reads it from the supervisor at the time it is asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import structlog

from bundle import Bundle, load_bundle
from bundle.cassette_plan import CassettePlan
from bundle.plan import AgentPlan, ConnectionPlan
from ipc.logs import log_writer
from orchestrator.callers import ApiToken
from orchestrator.clock import Clock, LoopClock
from orchestrator.connections import Connections, ingress_tables
from orchestrator.environment import withhold
from orchestrator.eventlog import EventLog
from orchestrator.limits import ModelBroker
from orchestrator.limits.usage import UsageBook
from orchestrator.operations.live import EventHub
from orchestrator.plans import SharedParts
from orchestrator.process_logs import ProcessOutput
from orchestrator.remote_agents import RemoteAgents, remote_targets
from orchestrator.router import Router
from orchestrator.spawns import SpawnedInstance
from orchestrator.state_dir import default_state_dir, spawn_records
from orchestrator.supervisor import Supervisor
from orchestrator.tasks import TaskOwner
from orchestrator.telemetry import OtlpSettings, TelemetryUnavailable, TraceExport
from orchestrator.transport import MultiprocessingTransport, Transport

if TYPE_CHECKING:
    from orchestrator.cluster.leader import ClusterTransport
    from orchestrator.cluster.settings import ClusterSettings


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state directory private to the daemon's user (0700), tightening an older one.

    Conversations, tool workspaces and runtime events live under it; with the directory itself
    closed to others, nothing inside is readable by them whatever its own mode.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if state_dir.stat().st_uid == os.geteuid():
        state_dir.chmod(0o700)


def agent_plans(
    bundle: Bundle, swarm: str | None, state_dir: Path, cassette: CassettePlan | None = None
) -> dict[str, AgentPlan]:
    """The plan of every agent of the swarm (their common parts held once); with
    ``cassette``, their model calls are recorded to or answered from it."""
    resource = bundle.swarm(swarm)
    parts = SharedParts()
    plans = {
        agent.name: parts.share(bundle.agent_plan(agent.name, state_dir, resource.name))
        for agent in bundle.swarm_agents(resource)
    }
    return plans if cassette is None else {n: taped(p, cassette) for n, p in plans.items()}


def taped(plan: AgentPlan, cassette: CassettePlan) -> AgentPlan:
    """``plan`` with its model calls going through ``cassette``."""
    return plan.model_copy(update={"model": plan.model.model_copy(update={"cassette": cassette})})


def connection_plans(bundle: Bundle, swarm: str | None, state_dir: Path) -> list[ConnectionPlan]:
    """The plan of every Connection bound to the swarm."""
    stdin = Path(f"/proc/{os.getpid()}/fd/0")
    return [
        # Connectors inherit the daemon's standard input, as any child process would.
        plan.model_copy(update={"stdin_path": str(stdin) if stdin.exists() else None})
        for plan in bundle.connection_plans(state_dir, swarm)
    ]


def agent_plan(supervisor: Supervisor, agent: str) -> AgentPlan | None:
    """``agent``'s plan as it is now (``None`` for a name that is not an agent of the swarm)."""
    handle = supervisor.handle(agent)
    plan = handle.plan if handle is not None else None
    return plan if isinstance(plan, AgentPlan) else None


def _unlinked(*args: object) -> None:
    """Stands for a callback until the Orchestrator links its own."""


@dataclass(eq=False)
class SwarmParts:
    """The collaborators of one swarm, built and ready to run."""

    bundle_path: Path
    bundle: Bundle
    swarm_choice: str | None
    """The ``--swarm`` asked for (``None``: the bundle's only or default one)."""
    state_dir: Path
    events: EventLog
    output: ProcessOutput
    """``logs/<process>.<stream>.log``: each agent's and connector's output, and ours."""
    own_lines: Callable[[bytes], None]
    """Our own log lines' mirror into ``output`` (removed at shutdown if still ours)."""
    live: EventHub
    tasks: TaskOwner
    helpers: TaskOwner
    supervisor: Supervisor
    router: Router
    connections: Connections
    broker: ModelBroker
    own_transport: MultiprocessingTransport | ClusterTransport | None
    """The transport made here (and closed at shutdown), when none was given."""
    cluster: ClusterTransport | None
    telemetry: TraceExport | None
    api_listen: str | None
    api_token: ApiToken | None


class SwarmOptions(TypedDict, total=False):
    """How a swarm is run, beyond its bundle: the keyword arguments of :func:`assemble` and of
    :meth:`Orchestrator.from_bundle <orchestrator.daemon.Orchestrator.from_bundle>` (written
    once, here). Every one may be left out."""

    state_dir: Path | None
    """Where its state lives (default: beside the bundle)."""
    swarm: str | None
    """Which Swarm of the bundle (default: ``default``, or the only one)."""
    transport: Transport | None
    """How agents are started (default: processes here, or on the cluster's nodes)."""
    clock: Clock | None
    """The time source of deadlines and backoffs (default: the event loop's)."""
    api_listen: str | None
    """A TCP ``HOST:PORT`` to serve the HTTP API on besides ``api.sock``."""
    api_token: str | ApiToken | None
    """The bearer token every HTTP request must carry."""
    cluster: ClusterSettings | None
    """Run as the leader of the cluster these settings reach."""
    otlp: OtlpSettings | None
    """Export spans over OTLP/HTTP."""
    cassette: CassettePlan | None
    """Record the model calls to, or answer them from, a test case's cassette."""
    connections: bool
    """Run the bundle's Connections (default); ``False`` under test."""


def assemble(bundle_path: Path, **options: Unpack[SwarmOptions]) -> SwarmParts:
    """Load ``bundle_path`` and build its swarm's collaborators (see
    :meth:`Orchestrator.from_bundle <orchestrator.daemon.Orchestrator.from_bundle>`)."""
    unknown = options.keys() - SwarmOptions.__optional_keys__
    if unknown:  # what a signature of keywords refused: a misspelt option is no default
        raise TypeError(f"unexpected options: {', '.join(sorted(unknown))}")
    state_dir, swarm = options.get("state_dir"), options.get("swarm")
    transport, clock = options.get("transport"), options.get("clock")
    api_listen, api_token = options.get("api_listen"), options.get("api_token")
    cluster, otlp = options.get("cluster"), options.get("otlp")
    state = (state_dir or default_state_dir(bundle_path)).resolve()
    bundle = load_bundle(bundle_path, check_handlers=False)
    resource = bundle.swarm(swarm)
    plans = agent_plans(bundle, swarm, state, options.get("cassette"))
    # Tokens resolved before anything opens: one that is not set stops the start, loudly.
    remote = RemoteAgents(remote_targets(bundle, resource))
    for secret in remote.secrets():
        withhold(secret)  # a RemoteAgent's token reaches no agent, connector or tool
    prepare_state_dir(state)
    events = EventLog(state)
    output = ProcessOutput(state)
    own_lines = log_writer().mirror = output.own_lines()
    live = EventHub()
    events.listeners.append(live.publish)
    tasks, helpers, clock = TaskOwner(), TaskOwner(), clock or LoopClock()
    log = structlog.get_logger("goondan.orchestrator").bind(swarm=resource.name)
    own_transport: MultiprocessingTransport | ClusterTransport | None = None
    leader: ClusterTransport | None = None
    placement = bundle.placement(swarm)
    # The supervisor does not exist yet when the cluster transport is made: its callbacks
    # reach it through this cell.
    supervisor_cell: list[Supervisor] = []
    if transport is None and cluster is not None:
        from orchestrator.cluster.leader import ClusterTransport

        transport = own_transport = leader = ClusterTransport(
            cluster.named_for(resource.name),
            placement=placement,
            fingerprint=bundle.fingerprint(),
            on_node_joined=lambda node: supervisor_cell[0].wake(),
            on_adopt=lambda name, worker: supervisor_cell[0].adopt(name, worker),
        )
    elif transport is None:
        if placement:
            log.warning(
                "Swarm.spec.placement is ignored without --cluster; every agent runs here",
                placed=sorted(placement),
            )
        transport = own_transport = MultiprocessingTransport(output=output)
    supervisor = Supervisor(
        plans, transport, on_lifecycle=events.lifecycle, clock=clock, tasks=tasks
    )
    supervisor_cell.append(supervisor)
    telemetry = _open_telemetry(otlp, resource.name, supervisor, events, log)
    timeout_ms = int(resource.spec.policy.request_timeout_seconds * 1000)
    router = Router(
        supervisor, default_timeout_ms=timeout_ms, clock=clock, tasks=tasks, remote=remote
    )
    _recall_spawned(state, supervisor, router)
    # Under test the agents alone run: no connector reaches out to its service.
    connected = options.get("connections", True)
    connecting = connection_plans(bundle, swarm, state) if connected else []
    entry_agent = resource.spec.entry_agent.name
    connections = Connections(
        connecting,
        ingress_tables(bundle, connecting, entry_agent, sorted(supervisor.names())),
        transport,
        router=router,
        events=events,
        on_finished=_unlinked,
        clock=clock,
        tasks=tasks,
    )

    def reports_usage(agent: str) -> bool:
        """Whether ``agent`` reports each model call's usage itself (it asks permits)."""
        plan = agent_plan(supervisor, agent)
        return plan is not None and plan.ask_permits

    def trace_budget_of(agent: str) -> dict[str, float]:
        """The trace budget of requests entering the swarm at ``agent`` (figure → limit)."""
        plan = agent_plan(supervisor, agent)
        trace = plan.budgets.trace if plan is not None else None
        return trace.limits() if trace is not None else {}

    broker = ModelBroker(
        bundle.model_pools(),
        usage=UsageBook(trace_budget_of),
        reply=router.answer,
        record=events.record,
        clock=clock,
        reports=reports_usage,
    )
    events.listeners.append(broker.observe)
    api_policy = resource.spec.policy.api
    if api_token is None and api_policy.token_from is not None:
        # Resolved now, so a token variable that is not set stops the start, loudly.
        api_token = ApiToken.from_policy(api_policy.token_from)
    token = ApiToken.named(api_token)
    withhold(token.secret if token else None)  # no agent or connector gets it
    return SwarmParts(
        bundle_path=bundle_path,
        bundle=bundle,
        swarm_choice=swarm,
        state_dir=state,
        events=events,
        output=output,
        own_lines=own_lines,
        live=live,
        tasks=tasks,
        helpers=helpers,
        supervisor=supervisor,
        router=router,
        connections=connections,
        broker=broker,
        own_transport=own_transport,
        cluster=leader,
        telemetry=telemetry,
        api_listen=api_listen or api_policy.listen,
        api_token=token,
    )


def _open_telemetry(
    otlp: OtlpSettings | None,
    swarm: str,
    supervisor: Supervisor,
    events: EventLog,
    log: structlog.typing.FilteringBoundLogger,
) -> TraceExport | None:
    """Span export, fed by the event log. Without the ``otel`` extra, ``--otlp-endpoint``
    stops the start (``TelemetryUnavailable``) while an endpoint from the environment,
    perhaps set for other programs, only costs a warning."""
    if otlp is None:
        return None

    def model_of(agent: str) -> tuple[str, str] | None:
        """``(provider, model)`` of ``agent``'s plan, for the spans of its Turns and Steps."""
        plan = agent_plan(supervisor, agent)
        return (plan.model.provider, plan.model.model) if plan is not None else None

    try:
        telemetry = TraceExport.open(otlp, swarm=swarm, model_of=model_of)
    except TelemetryUnavailable as exc:
        if otlp.from_flag:
            raise
        log.warning("spans are not exported", reason=str(exc))
        return None
    events.listeners.append(telemetry.observe)
    return telemetry


def _recall_spawned(state_dir: Path, supervisor: Supervisor, router: Router) -> None:
    """``agents__list`` rows from the instances on disk, so a restarted daemon still lists
    what was spawned before (of agents the swarm still has)."""
    for row in spawn_records(state_dir):
        if row["target"] not in supervisor.names():
            continue
        record = SpawnedInstance(
            target=row["target"],
            instance_key=row["instanceKey"],
            owner_agent=row["ownerAgent"],
            owner_instance_key=row["ownerInstanceKey"],
            created_at=row["createdAt"],
            cwd=row["cwd"],
        )
        key = (record.owner_agent, record.owner_instance_key, record.target)
        router.spawned[(*key, record.instance_key)] = record
