"""What the studio makes of the runtime event log: events with a level, traces and their spans,
the handoffs between agents, the agents' last recorded state, and what model calls used (tokens
and cost, from each Step's ``tokenUsage``; budgets reached and waits for a model permit, as marks
on a trace).

:class:`EventIndex` reads ``<state>/runtime-events.jsonl`` incrementally (only the lines added
since the last read) and keeps a bounded window of the newest events, so every API call sees
the file as it is now without reading it again from the start.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import UNSET

from goondan.usage import Usage
from ipc.runtime_events import (
    AnyEvent,
    ApprovalDecidedEvent,
    BudgetExceededEvent,
    EventType,
    ModelPermitEvent,
    NetworkConnectionEvent,
    ProcessEvent,
    ProcessExitedEvent,
    RuntimeEvent,
    StepCompletedEvent,
    StepFailedEvent,
    ToolCalledEvent,
    ToolCompletedEvent,
    TurnEvent,
    TurnResumedEvent,
    TurnStartedEvent,
    given,
)
from orchestrator.eventlog import FILE_NAME, read_typed
from orchestrator.limits.usage import trace_root
from orchestrator.studio.agents import AgentRecords, is_crash
from orchestrator.studio.attempts import group_attempts, latest_attempt, mark_interrupted
from orchestrator.studio.phrases import event_sentence
from orchestrator.telemetry.spans import Span, epoch_ms, fold

__all__ = ["Span", "epoch_ms", "is_crash"]

MAX_EVENTS = 100_000
"""Newest events the index keeps in memory (older ones stay in the file only)."""
MAX_TRACES = 5_000
"""Newest traces the index keeps; the oldest are forgotten first."""
HANDOFF_TOOLS = frozenset({"agents__request", "agents__send", "agents__spawn"})
"""Tools whose ``args.target`` names the agent a call hands work to."""
MARK_TYPES = frozenset(
    {
        EventType.BUDGET_EXCEEDED,
        EventType.MODEL_PERMIT_WAITING,
        EventType.MODEL_PERMIT_GRANTED,
        EventType.MODEL_PERMIT_TIMEOUT,
        EventType.MODEL_RATE_LIMITED,
        EventType.NETWORK_CONNECTION,
    }
)
"""Events of a trace that are moments, not spans: shown on the span they happened in (a
sandboxed program's connections on the tool call's span)."""
MAX_MARKS = 1_000
"""Marks one trace keeps (a trace that waits for permits all day keeps its first ones)."""

_ERROR_TYPES = frozenset(
    {
        EventType.DELIVERY_LOST,
        EventType.INBOX_OVERFLOW,
        EventType.PROCESS_BROKEN_FDS,
        EventType.APPROVAL_REFUSED,
    }
)
_WARNING_TYPES = frozenset(
    {
        EventType.PROCESS_BACKOFF,
        EventType.PROCESS_RESTARTING,
        EventType.PROCESS_RESTART_REQUESTED,
        EventType.PROCESS_CONFIG_REJECTED,
        EventType.TURN_CANCELLING,
        EventType.TURN_RESUMED,
        EventType.REQUEST_CANCELLED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESUMED,
        EventType.APPROVAL_EXPIRED,
        EventType.APPROVAL_CANCELLED,
        EventType.BUDGET_EXCEEDED,
        EventType.MODEL_PERMIT_TIMEOUT,
        EventType.MODEL_RATE_LIMITED,
    }
)
_FAILED_SUFFIX = ".failed"
"""Every ``*.failed`` event is an error, of a type this runtime knows or not."""


LEVELS = ("info", "warning", "error")
"""Event levels, least to most severe; a level filter keeps that level and those above it."""


def event_key(event: AnyEvent) -> str:
    """A stable id of ``event``: the same whether it was read from the file or pushed live."""
    return _key_of(event.to_builtins())


def _key_of(data: dict[str, Any]) -> str:
    """:func:`event_key` of an event's JSON object."""
    canonical = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(canonical.encode(), digest_size=8).hexdigest()


def event_level(event: AnyEvent) -> str:
    """``error``, ``warning`` or ``info``: how much an operator should care about ``event``."""
    kind = event.type
    if kind.endswith(_FAILED_SUFFIX) or kind in _ERROR_TYPES:
        return "error"
    if isinstance(event, ProcessExitedEvent) and event.expected is False:
        return "error" if is_crash(event) else "warning"
    if isinstance(event, ToolCompletedEvent) and event.status == "error":
        return "error"
    if (
        kind in _WARNING_TYPES
        or (isinstance(event, ApprovalDecidedEvent) and event.status != "approved")
        or (isinstance(event, NetworkConnectionEvent) and event.allowed is False)
    ):
        return "warning"
    return "info"


def wrap(event: AnyEvent) -> dict[str, Any]:
    """The form the studio's API hands out: ``{key, level, event, sentence}`` (``sentence``:
    :func:`~orchestrator.studio.phrases.event_sentence`, or ``None``)."""
    data = event.to_builtins()
    sentence = event_sentence(event)
    return {"key": _key_of(data), "level": event_level(event), "event": data, "sentence": sentence}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def step_usage(event: AnyEvent) -> tuple[int, int, float] | None:
    """Input tokens, output tokens and cost of one model-calling Step, from the ``tokenUsage``
    of its ``step.completed`` (``None`` for any other event, or one without usage)."""
    if not isinstance(event, StepCompletedEvent | StepFailedEvent):
        return None
    usage = given(event.token_usage)
    if usage is None:
        return None
    return usage.input_tokens, usage.output_tokens, float(given(usage.cost) or 0.0)


_MARK_SKIP = frozenset(
    {"type", "timestamp", "agentName", "instanceKey", "traceId", "spanId", "parentSpanId"}
)
"""Fields of a mark's event said in the mark's own keys (or not at all)."""


@dataclass(slots=True)
class Trace:
    """The spans of one trace id, and its other events (approvals, cancellations)."""

    trace_id: str
    spans: dict[str, Span] = field(default_factory=dict)
    event_count: int = 0
    first_ms: float | None = None
    last_ms: float | None = None
    usage: Usage = field(default_factory=Usage)
    """What the trace's Steps used, every agent's together (one call per Step with usage)."""
    marks: list[RuntimeEvent] = field(default_factory=list)
    """Its :data:`MARK_TYPES` events: budgets reached, waits for a model permit."""
    root_span_id: str | None = None
    """The span of the Turn that began the trace (:func:`orchestrator.limits.usage.trace_root`)."""

    def add(self, event: AnyEvent) -> None:
        """Fold one event of this trace into its spans."""
        self.event_count += 1
        stamp = epoch_ms(event.timestamp)
        if stamp is not None:
            self.first_ms = stamp if self.first_ms is None else min(self.first_ms, stamp)
            self.last_ms = stamp if self.last_ms is None else max(self.last_ms, stamp)
        used = step_usage(event)
        if used is not None:
            self.usage.add(*used)
        if event.type in MARK_TYPES and isinstance(event, RuntimeEvent):
            if len(self.marks) < MAX_MARKS:
                self.marks.append(event)
            return
        span = fold(self.spans, event)
        if isinstance(event, TurnResumedEvent):
            mark_interrupted(self.spans, given(event.resumed_span_id))
        if span is not None and self.root_span_id is None and trace_root(event) is not None:
            self.root_span_id = span.span_id

    def ordered(self) -> list[tuple[Span, int]]:
        """Every span with its depth, parents before children, siblings by start time."""
        children: dict[str | None, list[Span]] = {}
        for span in self.spans.values():
            parent = span.parent_span_id if span.parent_span_id in self.spans else None
            children.setdefault(parent, []).append(span)
        for group in children.values():
            group.sort(key=lambda s: s.start if s.start is not None else float("inf"))
        out: list[tuple[Span, int]] = []
        stack = [(span, 0) for span in reversed(children.get(None, []))]
        while stack:
            span, depth = stack.pop()
            out.append((span, depth))
            stack.extend((child, depth + 1) for child in reversed(children.get(span.span_id, [])))
        return out

    def first_error(self) -> str | None:
        """The error of the first failed span in waterfall order; the order is worked out only
        for a trace that has one (the trace list asks this of every trace)."""
        if not any(span.error for span in self.spans.values()):
            return None
        return next((span.error for span, _ in self.ordered() if span.error), None)

    def root(self) -> Span | None:
        """The span that began the trace: its first Turn started by no caller; when the log no
        longer holds that Turn's start, the earliest span without a parent in it."""
        if self.root_span_id in self.spans:
            return self.spans[self.root_span_id]
        roots = [s for s in self.spans.values() if s.parent_span_id not in self.spans]
        turns = [s for s in roots if s.kind == "turn"] or roots
        return min(turns, key=lambda s: s.start or float("inf"), default=None)

    def _span_of(self, mark: RuntimeEvent, stamp: float | None) -> str | None:
        """The span a mark happened in: the one its event names, else the agent's Step that
        had begun by then (the latest such), else its first Step or its Turn."""
        named = mark.span
        if named is not None and named in self.spans:
            return named
        agent, key = mark.agent_name, mark.instance
        mine = [
            s
            for s in self.spans.values()
            if s.agent == agent and (not key or s.instance_key == key)
        ]
        # The Orchestrator stamps a moment when the agent's message reaches it: after the
        # Step began, on the same clock.
        steps = [(start, s) for s in mine if s.kind == "step" and (start := s.start) is not None]
        if steps:
            begun = [(start, s) for start, s in steps if stamp is None or start <= stamp]
            if begun:
                return max(begun, key=lambda pair: pair[0])[1].span_id
            return min(steps, key=lambda pair: pair[0])[1].span_id
        turns = [s for s in mine if s.kind == "turn"]
        return turns[0].span_id if turns else None

    def mark_rows(self) -> list[dict[str, Any]]:
        """The marks as the API hands them out, each with the span it happened in."""
        rows = []
        for mark in self.marks:
            stamp = epoch_ms(mark.timestamp)
            data = mark.to_builtins()
            rows.append(
                {
                    "type": mark.type,
                    "atMs": stamp,
                    "agent": mark.agent_name or None,
                    "instanceKey": None if mark.instance_key is UNSET else mark.instance_key,
                    "spanId": self._span_of(mark, stamp),
                    **{k: v for k, v in data.items() if k not in _MARK_SKIP},
                }
            )
        return rows

    def exceeded(self) -> list[dict[str, Any]]:
        """The budgets the trace reached: ``{budget, figure, used, limit, agent}`` each."""
        return [
            {
                "budget": given(mark.budget),
                "figure": given(mark.figure),
                "used": given(mark.used),
                "limit": given(mark.limit),
                "agent": mark.agent_name or None,
            }
            for mark in self.marks
            if isinstance(mark, BudgetExceededEvent)
        ]

    def waited_ms(self) -> float:
        """How long its model calls waited for permits, all together."""
        return sum(
            float(given(mark.waited_ms) or 0)
            for mark in self.marks
            if isinstance(mark, ModelPermitEvent)
            and mark.type in (EventType.MODEL_PERMIT_GRANTED, EventType.MODEL_PERMIT_TIMEOUT)
        )

    def summary(self) -> dict[str, Any]:
        """One row of the trace list."""
        starts = [s.start for s in self.spans.values() if s.start is not None]
        ends = [s.end for s in self.spans.values() if s.end is not None]
        start = min(starts, default=self.first_ms)
        end = max([*ends, *starts], default=self.last_ms)
        statuses = {s.status for s in self.spans.values()} - {"interrupted"}
        root = self.root()
        if root is not None:  # a Turn its agent died under comes to what its last attempt did
            root = latest_attempt(self.spans, root)
        if root is not None and root.status != "running":
            status = "error" if "error" in statuses else root.status
        elif "awaiting" in statuses:
            status = "awaiting"  # a call waits for an operator: nothing else can move
        elif "running" in statuses:
            status = "running"
        else:
            status = "error" if "error" in statuses else "ok"
        agents = sorted({s.agent for s in self.spans.values() if s.agent})
        return {
            "traceId": self.trace_id,
            "rootAgent": root.agent if root is not None else None,
            "rootInstanceKey": root.instance_key if root is not None else None,
            "startMs": start,
            "durationMs": (end - start) if start is not None and end is not None else None,
            "status": status,
            "spanCount": len(self.spans),
            "eventCount": self.event_count,
            "agents": agents,
            "error": self.first_error(),
            "usage": self.usage.to_json(),
            "exceeded": self.exceeded(),
            "permitWaitMs": self.waited_ms(),
        }

    def to_json(self) -> dict[str, Any]:
        """The trace with its spans in waterfall order.

        Stamps are whole milliseconds while durations are measured finer, so a parent's
        stamped start plus its duration can end a little before its last child: each span's
        ``startMs``/``endMs`` (where its bar goes) are widened to cover its children, while
        ``durationMs`` stays what was measured.
        """
        ordered = self.ordered()
        rows = [span.to_json(depth) for span, depth in ordered]
        by_id = {row["spanId"]: row for row in rows}
        for row in reversed(rows):  # children come after their parent: fold them upwards
            parent = by_id.get(row["parentSpanId"]) if row["parentSpanId"] else None
            if parent is None:
                continue
            for edge, pick in (("startMs", min), ("endMs", max)):
                if row[edge] is not None:
                    parent[edge] = (
                        row[edge] if parent[edge] is None else pick(parent[edge], row[edge])
                    )
        rows = group_attempts(rows)
        return {"trace": self.summary(), "spans": rows, "marks": self.mark_rows()}


class EventIndex:
    """The runtime event log of a state directory, read as it grows."""

    def __init__(self, state_dir: Path, max_events: int = MAX_EVENTS) -> None:
        self.path = state_dir / FILE_NAME
        self.max_events = max_events
        self._reset()

    def _reset(self) -> None:
        self.offset = 0
        self._identity: tuple[int, int] | None = None
        self.events: deque[AnyEvent] = deque(maxlen=self.max_events)
        self.traces: OrderedDict[str, Trace] = OrderedDict()
        self.agents = AgentRecords()
        """Each agent's last recorded state, and the swarm the last daemon ran."""
        self.edges: dict[tuple[str, str], dict[str, Any]] = {}
        self._span_agents: dict[str, str] = {}
        self.usage: dict[str, Usage] = {}
        """What each agent's Steps used, by the log (every line read, not only the window)."""

    def refresh(self) -> None:
        """Take in the lines appended since the last call (all of them after a rotation)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self.offset:
                self._reset()
            return
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self.offset:
            self._reset()  # a new file, or one cut short: read it afresh
            self._identity = identity
        if stat.st_size == self.offset:
            return
        for end, event in read_typed(self.path, self.offset):
            self.offset = end
            self.add(event)

    def add(self, event: AnyEvent) -> None:
        """Fold one event into the index."""
        if event.type == EventType.TEXT_DELTA:
            return  # streamed text is never in the log: the live view skips it too
        self.events.append(event)
        agent = event.agent_name
        used = step_usage(event)
        if used is not None and agent:
            self.usage.setdefault(agent, Usage()).add(*used)
        if agent and isinstance(event, ProcessEvent | TurnEvent):
            self.agents.add(event)
        trace_id = event.trace
        if trace_id:
            trace = self.traces.get(trace_id)
            if trace is None:
                trace = self.traces[trace_id] = Trace(trace_id)
                while len(self.traces) > MAX_TRACES:
                    self.traces.popitem(last=False)
            trace.add(event)
        if isinstance(event, RuntimeEvent):
            self._note_handoff(event)

    def _note_handoff(self, event: RuntimeEvent) -> None:
        """An edge between two agents, from a handoff tool call or a Turn another agent's
        tool call started."""
        agent = event.agent_name
        span = event.span
        if span is not None and isinstance(event, ToolCalledEvent | TurnStartedEvent):
            self._span_agents[span] = agent
            if len(self._span_agents) > 4 * self.max_events:
                self._span_agents.clear()  # bounded: an old caller is simply not linked
        if isinstance(event, ToolCalledEvent) and event.tool_name in HANDOFF_TOOLS:
            args = event.args  # the model's JSON, not ours: any shape may come
            target = args.get("target") if isinstance(args, dict) else None
            if isinstance(target, str) and target:
                tool = str(event.tool_name)
                self._edge(agent, target, tool.removeprefix("agents__"), event)
        elif isinstance(event, TurnStartedEvent):
            caller = self._span_agents.get(str(event.parent_span))
            if caller is not None and caller != agent:
                self._edge(caller, agent, None, event)

    def _edge(self, source: str, target: str, kind: str | None, event: RuntimeEvent) -> None:
        edge = self.edges.get((source, target))
        if edge is None:
            edge = self.edges[(source, target)] = {
                "from": source,
                "to": target,
                "kinds": [],
                "calls": 0,
                "lastAt": None,
            }
        if kind is not None:
            edge["calls"] += 1
            if kind not in edge["kinds"]:
                edge["kinds"].append(kind)
        edge["lastAt"] = event.timestamp or edge["lastAt"]

    def trace_list(self, agent: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """The newest traces first (those ``agent`` took part in, if given)."""
        rows = []
        for trace in reversed(self.traces.values()):
            if not trace.spans:
                continue
            summary = trace.summary()
            if agent is not None and agent not in summary["agents"]:
                continue
            rows.append(summary)
        rows.sort(key=lambda r: r["startMs"] or 0, reverse=True)
        return rows[:limit]

    def select(
        self,
        *,
        agent: str | None = None,
        trace: str | None = None,
        types: Iterable[str] = (),
        level: str | None = None,
        since_ms: float | None = None,
        limit: int = 500,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` events that pass the filters, oldest first, wrapped."""
        prefixes = tuple(t for t in types if t)
        picked: list[dict[str, Any]] = []
        for event in reversed(self.events):
            if agent and event.agent_name != agent:
                continue
            if trace and event.trace != trace:
                continue
            if prefixes and not event.type.startswith(prefixes):
                continue
            if level and LEVELS.index(event_level(event)) < LEVELS.index(level):
                continue
            if since_ms is not None:
                stamp = epoch_ms(event.timestamp)
                if stamp is None or stamp < since_ms:
                    continue
            picked.append(wrap(event))
            if len(picked) >= limit:
                break
        picked.reverse()
        return picked
