"""What model calls used, per agent and per trace.

Every AgentProcess reports each model call as it ends (``model_usage``); the Orchestrator adds
it up here. The book answers ``status``, ``usage``, ``/v1/usage`` and ``/metrics``, and holds
the figures trace budgets are judged on: a trace is one request across every agent it reaches,
and only the Orchestrator sees all of them.

Counts live in memory since the daemon started; the conversation instances keep their own lasting
totals (``metadata.json``), which the agents judge instance budgets on and ``usage`` reads. Traces
are kept for the most recent :data:`TRACES_KEPT`, so a daemon serving millions of requests holds
a bounded book.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from goondan.time import utc_timestamp
from goondan.usage import Reached, Usage, first_reached, first_short, remaining
from ipc.runtime_events import (
    AnyEvent,
    StepCompletedEvent,
    TurnStartedEvent,
    given,
)

TRACES_KEPT = 10_000
"""Traces whose usage is remembered (the least recently active are forgotten first)."""

BudgetOf = Callable[[str], Mapping[str, float]]
"""``agent → ceilings`` (figure → limit) of the traces that enter the swarm at that agent."""


def trace_root(event: AnyEvent) -> str | None:
    """The agent whose Turn began its trace, when ``event`` is that Turn's ``turn.started``;
    else ``None``.

    This is the one rule for a trace's root, which ``usage``, the budgets and the studio
    share: a delegated Turn's ``parentSpanId`` is its caller's tool span, so the Turn started
    with none is the one the request entered the swarm with. The first agent to call a model
    is no guide: a delegate's Step ends before its caller's Step that waits for it.
    """
    if not isinstance(event, TurnStartedEvent) or event.parent_span:
        return None
    return event.agent_name or None


def step_call(event: AnyEvent) -> tuple[str, int, int, float] | None:
    """``(agent, input tokens, output tokens, cost)`` of the model call a ``step.completed``
    event records (``None`` for any other event)."""
    if not isinstance(event, StepCompletedEvent):
        return None
    usage = given(event.token_usage)
    if usage is None:
        return None
    cost = given(usage.cost) or 0.0
    return (
        event.agent_name,
        max(usage.input_tokens, 0),
        max(usage.output_tokens, 0),
        float(cost) if cost > 0 else 0.0,
    )


@dataclass(slots=True)
class TraceUsage:
    """One trace's usage and the budget it is held to."""

    trace_id: str
    root: str
    """The agent the request entered the swarm at (see :func:`trace_root`; until its Turn's
    start is seen, the first agent to ask or report a model call in it)."""
    limits: Mapping[str, float]
    """Its budget's ceilings (``root``'s trace budget, over the Swarm's); empty: none."""
    usage: Usage = field(default_factory=Usage)
    agents: set[str] = field(default_factory=set)
    started_at: str = field(default_factory=utc_timestamp)
    exceeded: Reached | None = None
    """The ceiling it reached, once it did."""
    reserved: Usage = field(default_factory=Usage)
    """What the calls under way reserved (``calls``: how many), held against the budget beside
    ``usage`` until each call's report settles it."""

    def reached(self) -> Reached | None:
        """The ceiling this trace has reached, if any (remembered once reached)."""
        if self.exceeded is None and self.limits:
            self.exceeded = first_reached(self.limits, self.usage)
        return self.exceeded

    def short_of(self, call: Usage) -> Reached | None:
        """The ceiling ``call``'s reservation does not fit under, if any (see
        :func:`goondan.usage.first_short`)."""
        reached = self.reached()
        if reached is not None:
            return reached
        return first_short(self.limits, self.usage, self.reserved, call) if self.limits else None

    def to_json(self) -> dict[str, Any]:
        """A row of ``usage`` / ``/v1/usage``."""
        row: dict[str, Any] = {
            "traceId": self.trace_id,
            "root": self.root,
            "agents": sorted(self.agents),
            "startedAt": self.started_at,
            "usage": self.usage.to_json(),
        }
        if self.limits:
            row["budget"] = dict(self.limits)
            row["remaining"] = remaining(self.limits, self.usage)
        if self.reserved.calls:
            row["reserved"] = self.reserved.to_json()
        reached = self.reached()
        if reached is not None:
            row["exceeded"] = reached.describe()
        return row


class UsageBook:
    """Usage since the daemon started, added up as the agents report it."""

    def __init__(self, budget_of: BudgetOf) -> None:
        self.budget_of = budget_of
        self.total = Usage()
        self.agents: dict[str, Usage] = {}
        self.traces: OrderedDict[str, TraceUsage] = OrderedDict()

    def trace(self, trace_id: str, agent: str, at: str | None = None) -> TraceUsage:
        """The trace's entry, opened with ``agent`` as its root if this is its first sight
        (begun ``at``, an event's timestamp: else now)."""

        def opened() -> TraceUsage:
            entry = TraceUsage(trace_id, agent, self.budget_of(agent))
            if at:
                entry.started_at = at
            return entry

        entry = _recent(self.traces, trace_id, opened, TRACES_KEPT)
        entry.agents.add(agent)
        return entry

    def observe(self, event: AnyEvent, *, count: Callable[[str], bool]) -> None:
        """Take in one runtime event: a trace's root from its first Turn's start, and the
        model call of a ``step.completed`` of an agent ``count`` says to count (one that does
        not report its calls itself)."""
        root = trace_root(event)
        trace_id = event.trace
        at = event.timestamp or None
        if root is not None and trace_id:
            entry = self.trace(trace_id, root, at)
            if entry.root != root:  # a delegate's call was seen first: the root is known now
                entry.root = root
                entry.limits = self.budget_of(root)
                entry.exceeded = None
            return
        call = step_call(event)
        if call is not None and count(call[0]):
            agent, input_tokens, output_tokens, cost = call
            self.add(agent, trace_id or "", input_tokens, output_tokens, cost, at)

    def add(
        self,
        agent: str,
        trace_id: str,
        input_tokens: int,
        output_tokens: int,
        cost: float,
        at: str | None = None,
    ) -> None:
        """Count one model call (recorded ``at``, when an event tells)."""
        tallies = [self.total, self.agents.setdefault(agent, Usage())]
        if trace_id:
            tallies.append(self.trace(trace_id, agent, at).usage)
        for tally in tallies:
            tally.add(input_tokens, output_tokens, cost)

    def snapshot(self, *, traces: int = 50) -> dict[str, Any]:
        """The book as ``/v1/usage`` shows it: totals, agents, the latest traces."""
        recent = list(self.traces.values())[-traces:] if traces > 0 else []
        return {
            "total": self.total.to_json(),
            "agents": {name: usage.to_json() for name, usage in sorted(self.agents.items())},
            "traces": [entry.to_json() for entry in reversed(recent)],
        }


def usage_report(
    book: UsageBook,
    budgets: Mapping[str, Mapping[str, Mapping[str, float]]],
    instances: list[dict[str, Any]],
    *,
    traces: int = 50,
    pools: list[dict[str, Any]] | None = None,
    price_sources: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The answer of ``usage`` / ``/v1/usage``, whether the daemon's book or one read back from
    the event log fills it: per agent (with its budgets: ``agent → scope → ceilings``, one row
    per agent named there), per conversation instance (lasting, from ``instances``, the rows
    of :func:`orchestrator.state_dir.list_instances`), per trace (the latest ``traces``), and
    each rate-limit pool. ``price_sources`` (``agent → "model" | "genai-prices" | None``, see
    :mod:`bundle.prices`) adds ``priceSource`` to the agents it names."""
    snapshot = book.snapshot(traces=traces)
    agents: list[dict[str, Any]] = [
        {"agent": name, "usage": snapshot["agents"].get(name, Usage().to_json()), "budgets": b}
        for name, b in budgets.items()
    ]
    if price_sources is not None:
        for row in agents:
            if row["agent"] in price_sources:
                row["priceSource"] = price_sources[row["agent"]]
    rows = []
    for row in instances:
        agent = str(row.get("agentName"))
        used = Usage.from_json(row.get("usage"))
        entry: dict[str, Any] = {
            "agent": agent,
            "instanceKey": row.get("instanceKey"),
            "usage": used.to_json(),
        }
        ceilings = budgets.get(agent, {}).get("instance")
        if ceilings:
            entry["budget"] = dict(ceilings)
            entry["remaining"] = remaining(ceilings, used)
        rows.append(entry)
    return {
        "total": snapshot["total"],
        "agents": agents,
        "instances": rows,
        "traces": snapshot["traces"],
        "pools": pools or [],
    }


Key = TypeVar("Key")
Entry = TypeVar("Entry")


def _recent(
    table: OrderedDict[Key, Entry], key: Key, make: Callable[[], Entry], kept: int
) -> Entry:
    """``table[key]`` (made now if absent) as the most recent; past ``kept`` entries, the least
    recent are forgotten."""
    entry = table.get(key)
    if entry is None:
        entry = table[key] = make()
        while len(table) > kept:
            table.popitem(last=False)
    else:
        table.move_to_end(key)
    return entry
