"""Prometheus metrics of a running swarm, derived from the events the Orchestrator already sees.

Every runtime event (Turns, Steps, tool calls) and lifecycle event (spawns, exits, restarts)
passes through the event log; :class:`SwarmMetrics` counts them as they pass, so agents need
no metrics code of their own. Gauges read live state (statuses, pending requests, sends in
flight) when scraped. Each Orchestrator has its own registry, so two daemons in one process (the
tests) do not mix.

No label takes a value from outside a set the configuration fixes: a client chooses HTTP
methods and paths, a model chooses tool names, and each new value would be a series kept for
the life of the daemon. HTTP methods outside :data:`HTTP_METHODS`, tool names outside the
agent's own tools and the bundle's Tools, agents, budgets, statuses and lifecycle events
unknown to the swarm are all counted as :data:`OTHER`; routes are their templates.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bundle.plan import AgentPlan
from ipc.protocol import CONNECTION_SENDER_PREFIX
from ipc.runtime_events import (
    PROCESS_FAMILY,
    AnyEvent,
    BudgetExceededEvent,
    EventType,
    ProcessEvent,
    StepCompletedEvent,
    StepFailedEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    TurnCompletedEvent,
    TurnFailedEvent,
    event_family,
    given,
    lifecycle_kind,
)
from orchestrator.operations import SwarmOperations

if TYPE_CHECKING:
    from orchestrator.telemetry import TraceExport

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OTHER = "other"
"""The label of every value outside a label's fixed set."""
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""HTTP methods counted by name."""
_TOOL_STATUSES = frozenset({"ok", "error", "pending", "raised"})
_BUDGETS = frozenset({"turn", "instance", "trace"})
_LIFECYCLE = frozenset(
    lifecycle_kind(kind)
    for kind in (
        EventType.PROCESS_SPAWNED,
        EventType.PROCESS_READY,
        EventType.PROCESS_EXITED,
        EventType.PROCESS_BACKOFF,
        EventType.PROCESS_RESTARTING,
        EventType.PROCESS_RESTART_REQUESTED,
        EventType.PROCESS_RESUME_PENDING,
        EventType.PROCESS_BROKEN_FDS,
        EventType.PROCESS_CONFIG_APPLIED,
        EventType.PROCESS_CONFIG_REJECTED,
    )
)
"""The lifecycle kinds labelled by name (an adoption is counted as ``other``)."""


class SwarmMetrics:
    """The swarm's counters and histograms, fed by :meth:`observe`."""

    def __init__(self, swarm: SwarmOperations, *, telemetry: TraceExport | None = None) -> None:
        self.swarm = swarm
        self._tool_names: dict[str, tuple[AgentPlan, frozenset[str]]] = {}
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry()
        registry = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=_SECONDS, registry=registry)

        self.http_requests = counter(
            "goondan_http_requests",
            "HTTP API requests, by route and status code.",
            ("route", "method", "status"),
        )
        self.http_seconds = histogram(
            "goondan_http_request_seconds", "HTTP API request latency.", ("route",)
        )
        self.turns = counter(
            "goondan_turns", "Turns that ended, by agent and outcome.", ("agent", "status")
        )
        self.turn_seconds = histogram("goondan_turn_seconds", "Turn duration.", ("agent",))
        self.steps = counter(
            "goondan_steps", "Steps that ended, by agent and outcome.", ("agent", "status")
        )
        self.tool_calls = counter(
            "goondan_tool_calls",
            "Tool calls, by agent, tool and result status.",
            ("agent", "tool", "status"),
        )
        self.tokens = counter(
            "goondan_tokens",
            "Model tokens of finished Turns, by agent and kind.",
            ("agent", "kind"),
        )
        self.process_events = counter(
            "goondan_process_events",
            "Agent process lifecycle events (spawned, ready, exited, backoff, restarting).",
            ("agent", "event"),
        )
        self.crashes = counter(
            "goondan_agent_crashes", "Unexpected agent process exits.", ("agent",)
        )
        self.budgets_exceeded = counter(
            "goondan_budget_exceeded",
            "Model calls refused because a budget was used up, by budget (turn, instance, "
            "trace) and agent.",
            ("budget", "agent"),
        )
        registry.register(_LiveState(swarm))
        registry.register(_ConnectionHealth(swarm))
        registry.register(_ModelUsage(swarm))
        if telemetry is not None:
            registry.register(_SpanExport(telemetry))

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one HTTP request: ``route`` is its template (``unmatched`` for none)."""
        # Each label from a fixed set (any method a client invents is "other").
        method = method if method in HTTP_METHODS else OTHER
        self._labelled(self.http_requests, route, method, str(status)).inc()
        self._labelled(self.http_seconds, route).observe(seconds)

    def observe(self, event: AnyEvent) -> None:
        """Count one runtime or lifecycle event."""
        agent = self._agent(event.agent_name)
        if isinstance(event, TurnCompletedEvent | TurnFailedEvent):
            ok = isinstance(event, TurnCompletedEvent)
            self._labelled(self.turns, agent, "ok" if ok else "error").inc()
            duration = given(event.duration)
            if duration is not None:
                self._labelled(self.turn_seconds, agent).observe(duration / 1000)
            usage = given(event.token_usage)
            if usage is not None:
                for value, label in (
                    (usage.input_tokens, "prompt"),
                    (usage.output_tokens, "completion"),
                ):
                    if value > 0:
                        self._labelled(self.tokens, agent, label).inc(value)
        elif isinstance(event, StepCompletedEvent | StepFailedEvent):
            ok = isinstance(event, StepCompletedEvent)
            self._labelled(self.steps, agent, "ok" if ok else "error").inc()
        elif isinstance(event, ToolCompletedEvent | ToolFailedEvent):
            completed = isinstance(event, ToolCompletedEvent)
            status = (given(event.status) or "ok") if completed else "raised"
            tool = self._tool(agent, given(event.tool_name))
            self._labelled(self.tool_calls, agent, tool, _known(status, _TOOL_STATUSES)).inc()
        elif isinstance(event, BudgetExceededEvent):
            self._labelled(
                self.budgets_exceeded, _known(given(event.budget), _BUDGETS), agent
            ).inc()
        elif isinstance(event, ProcessEvent) or event_family(event.type) == PROCESS_FAMILY:
            name = _known(lifecycle_kind(event.type), _LIFECYCLE)
            self._labelled(self.process_events, agent, name).inc()
            expected = isinstance(event, ProcessEvent) and event.expected is True
            if event.type == EventType.PROCESS_EXITED and not expected:
                self._labelled(self.crashes, agent).inc()

    def _labelled(self, family: Counter | Histogram, *values: str) -> Any:
        """``family.labels(*values)``, looked up once per label set: every request and runtime
        event counts in one, and the family's lookup and lock cost more than the count. The
        label values come from bounded sets (routes, the swarm's agents and tools, fixed
        statuses)."""
        key = (id(family), values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = family.labels(*values)
        return series

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    def _agent(self, name: object) -> str:
        """``name`` when it is an agent or a Connection of the swarm, or the daemon itself."""
        if not isinstance(name, str):
            return OTHER
        swarm = self.swarm
        if name in swarm.agent_names() or name == "orchestrator":
            return name
        connection = name.removeprefix(CONNECTION_SENDER_PREFIX)
        if connection != name and connection in swarm.connection_names():
            return name
        return OTHER

    def _tool(self, agent: str, name: object) -> str:
        """``name`` when ``agent`` may call it: one of its own tools, or of the bundle's Tools
        it reaches through the registry (a model may name any tool at all)."""
        handle = self.swarm.agent(agent)
        plan = handle.plan if handle is not None else None
        if not isinstance(name, str) or not isinstance(plan, AgentPlan):
            return OTHER
        known = self._tool_names.get(agent)
        if known is None or known[0] is not plan:  # first use, or a reload changed the plan
            registry = (f"{t.name}__{e.name}" for t in plan.registry_tools for e in t.exports)
            known = (plan, frozenset([*plan.catalog_tools, *registry]))
            self._tool_names[agent] = known
        return name if name in known[1] else OTHER


def _known(value: object, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else OTHER


class _LiveState(Collector):
    """Gauges read from the supervisor and the router at scrape time."""

    def __init__(self, swarm: SwarmOperations) -> None:
        self.swarm = swarm

    def collect(self) -> Iterable[Metric]:
        swarm = self.swarm
        up = GaugeMetricFamily(
            "goondan_agent_up", "1 while the agent process is ready.", labels=["agent", "status"]
        )
        restarts = GaugeMetricFamily(
            "goondan_agent_restarts", "Restarts of the agent process.", labels=["agent"]
        )
        pending = GaugeMetricFamily(
            "goondan_pending_requests",
            "Requests waiting for their answer, by target.",
            labels=["agent"],
        )
        waiting = Tally(row.agent for row in swarm.pending())
        for name in list(swarm.agent_names()):
            handle = swarm.agent(name)
            if handle is None:
                continue
            up.add_metric([name, handle.status.value], 1.0 if handle.ready else 0.0)
            restarts.add_metric([name], float(handle.restarts))
            pending.add_metric([name], float(waiting[name]))
        sends = GaugeMetricFamily("goondan_sends_in_flight", "Sends delivered but not done.")
        sends.add_metric([], float(swarm.sends_in_flight()))
        return [up, restarts, pending, sends]

    def describe(self) -> Iterable[Metric]:
        return []


class _ConnectionHealth(Collector):
    """Each Connection's health (``status``'s), read at scrape time; labelled by the
    Connection's name only, a set the configuration fixes."""

    def __init__(self, swarm: SwarmOperations) -> None:
        self.swarm = swarm

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "goondan_connection_up",
            "1 while the Connection's connector runs and its last report was no failure.",
            labels=["connection"],
        )
        in_a_row = GaugeMetricFamily(
            "goondan_connection_consecutive_failures",
            "Failures of the Connection since its last success.",
            labels=["connection"],
        )
        failures = CounterMetricFamily(
            "goondan_connection_failures",
            "Failures of the Connection (boot errors, failures its connector reported, crashes).",
            labels=["connection"],
        )
        last_event = GaugeMetricFamily(
            "goondan_connection_last_event_timestamp_seconds",
            "Unix time of the Connection's last event (absent before its first).",
            labels=["connection"],
        )
        for connection in self.swarm.connection_states():
            name, health = connection.name, connection.health
            running = connection.ready and health.consecutive_failures == 0
            up.add_metric([name], 1.0 if running else 0.0)
            in_a_row.add_metric([name], float(health.consecutive_failures))
            failures.add_metric([name], float(health.failures))
            if health.last_event_at is not None:
                last_event.add_metric([name], health.last_event_at)
        return [up, in_a_row, failures, last_event]

    def describe(self) -> Iterable[Metric]:
        return []


_POOL_FIGURES: tuple[tuple[str, str, type[GaugeMetricFamily | CounterMetricFamily], str], ...] = (
    (
        "goondan_model_permits_in_use",
        "Model calls under way, by pool.",
        GaugeMetricFamily,
        "in_use",
    ),
    (
        "goondan_model_permits_waiting",
        "Model calls waiting for a permit, by pool.",
        GaugeMetricFamily,
        "waiting",
    ),
    (
        "goondan_model_pool_paused_seconds",
        "Seconds left of a pool's pause after a provider's 429.",
        GaugeMetricFamily,
        "paused_for_seconds",
    ),
    ("goondan_model_permits_granted", "Permits granted, by pool.", CounterMetricFamily, "granted"),
    (
        "goondan_model_permit_waits",
        "Permits granted after a wait, by pool.",
        CounterMetricFamily,
        "waited",
    ),
    (
        "goondan_model_permit_wait_seconds",
        "Time permits waited before their grant, by pool.",
        CounterMetricFamily,
        "wait_seconds",
    ),
    (
        "goondan_model_permit_timeouts",
        "Permit requests refused E_MODEL_PERMIT_TIMEOUT, by pool.",
        CounterMetricFamily,
        "timed_out",
    ),
    (
        "goondan_model_rate_limit_pauses",
        "Pauses of a pool after a provider's 429, by pool.",
        CounterMetricFamily,
        "pauses",
    ),
)
"""``(name, help, family, snapshot key)`` of each per-pool metric (``ModelBroker.snapshot``)."""


class _ModelUsage(Collector):
    """Model usage and the rate-limit pools, read from the broker at scrape time (usage is
    counted as the agents report each call; nothing more is counted per call here)."""

    def __init__(self, swarm: SwarmOperations) -> None:
        self.swarm = swarm

    def collect(self) -> Iterable[Metric]:
        calls = CounterMetricFamily(
            "goondan_model_calls", "Model calls, by agent.", labels=["agent"]
        )
        tokens = CounterMetricFamily(
            "goondan_model_tokens",
            "Model tokens as each call reports them, by agent and kind (input, output).",
            labels=["agent", "kind"],
        )
        cost = CounterMetricFamily(
            "goondan_model_cost",
            "Cost of model calls by the Models' pricing (their currency), by agent.",
            labels=["agent"],
        )
        for agent, used in sorted(self.swarm.model_usage().items()):
            calls.add_metric([agent], float(used.calls))
            tokens.add_metric([agent, "input"], float(used.input_tokens))
            tokens.add_metric([agent, "output"], float(used.output_tokens))
            cost.add_metric([agent], used.cost)
        pools = self.swarm.pools()
        families: list[Metric] = [calls, tokens, cost]
        for name, documentation, family, key in _POOL_FIGURES:
            metric = family(name, documentation, labels=["pool"])
            for row in pools:
                metric.add_metric([row.pool], float(getattr(row, key)))
            families.append(metric)
        return families

    def describe(self) -> Iterable[Metric]:
        return []


class _SpanExport(Collector):
    """OpenTelemetry span export: spans sent, dropped (by reason) and waiting, at scrape time
    (the sending thread counts; nothing is counted per span on the event loop's behalf here)."""

    def __init__(self, telemetry: TraceExport) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterable[Metric]:
        exported, dropped = self.telemetry.counts.snapshot()
        sent = CounterMetricFamily(
            "goondan_otel_spans_exported", "Spans the OTLP collector accepted."
        )
        sent.add_metric([], float(exported))
        lost = CounterMetricFamily(
            "goondan_otel_spans_dropped",
            "Spans not exported, by reason: queue_full, export_failed (collector unreachable or"
            " refusing), shutdown (still queued when the daemon stopped), never_ended, invalid.",
            labels=["reason"],
        )
        for reason, count in dropped.items():
            lost.add_metric([reason], float(count))
        queued = GaugeMetricFamily(
            "goondan_otel_spans_queued", "Spans waiting to be sent to the OTLP collector."
        )
        queued.add_metric([], float(self.telemetry.queued()))
        return [sent, lost, queued]

    def describe(self) -> Iterable[Metric]:
        return []
