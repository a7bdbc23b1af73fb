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

TRACES_KEPT = 10_000
"""Traces whose usage is remembered (the least recently active are forgotten first)."""

BudgetOf = Callable[[str], Mapping[str, float]]
"""``agent → ceilings`` (figure → limit) of the traces that enter the swarm at that agent."""


@dataclass(slots=True)
class TraceUsage:
    """One trace's usage and the budget it is held to."""

    trace_id: str
    root: str
    """The agent the request entered the swarm at (the first to call a model in it)."""
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

    def trace(self, trace_id: str, agent: str) -> TraceUsage:
        """The trace's entry, opened with ``agent`` as its root if this is its first sight."""
        entry = _recent(
            self.traces,
            trace_id,
            lambda: TraceUsage(trace_id, agent, self.budget_of(agent)),
            TRACES_KEPT,
        )
        entry.agents.add(agent)
        return entry

    def add(
        self, agent: str, trace_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        """Count one model call."""
        tallies = [self.total, self.agents.setdefault(agent, Usage())]
        if trace_id:
            tallies.append(self.trace(trace_id, agent).usage)
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
