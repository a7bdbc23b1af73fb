"""Spans from runtime events: one model, read by the studio's waterfall and the OTLP exporter.

A span is a Turn, a Step, a tool call, or a tool call's wait for an operator's approval. Which
event opens and which ends each kind, and how an ended span failed, are the events' own rules
(:mod:`ipc.runtime_events.spans`). Two readers fold events into spans:

- :class:`SpanAssembler` pairs each end event with its start as the daemon appends them, for the
  exporter (:func:`build_span` then names and attributes the span after the OpenTelemetry GenAI
  conventions, in the exporter process); spans left open are ended for them when their Turn ends
  or their agent exits.
- :func:`fold` folds every event of a trace into its :class:`Span` rows as the studio shows them
  (a span still running, an approval still awaited).

Trace and span ids are the runtime's own (``traceId``, ``spanId``, ``parentSpanId``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from goondan.time import parse_timestamp
from ipc.runtime_events import (
    AnyEvent,
    ApprovalDecidedEvent,
    ApprovalEvent,
    EventType,
    ProcessExitedEvent,
    RawEvent,
    RuntimeEvent,
    StepEvent,
    ToolEvent,
    TurnCancellingEvent,
    TurnEvent,
    TurnResumedEvent,
    given,
    read_event,
)
from ipc.runtime_events.spans import (
    CANCELLED,
    INCOMPLETE_END,
    SPAN_ENDS,
    SPAN_STARTS,
    SpanKind,
    error_object,
    failure,
    span_kind,
)

SpanKindName = Literal["internal", "client"]
AttributeValue = str | bool | int | float
MAX_OPEN_SPANS = 10_000
"""Spans started and not yet ended that are remembered; past it the oldest is forgotten."""


# --- pairs of events, for the exporter --------------------------------------------------------

ModelOf = Callable[[str], tuple[str, str] | None]
"""``(provider, model)`` of an agent, when known."""


@dataclass(slots=True)
class _Open:
    event: RuntimeEvent
    model: tuple[str, str] | None
    resumed: dict[str, Any] | None = None
    """A Turn's ``turn.resumed`` event: the attempt before it, which its span links to."""


@dataclass(frozen=True, slots=True)
class FinishedSpan:
    """A span's end event and, when it was seen, its start event, as their JSON objects: all a
    span is made of, and what crosses to the exporter process."""

    start: dict[str, Any] | None
    end: dict[str, Any]
    model: tuple[str, str] | None
    incomplete: str | None = None
    """Why it was ended for it (its end event never came); ``None`` for an ordinary end."""
    resumed: dict[str, Any] | None = None
    """A Turn attempt's ``turn.resumed`` event, when it took up an interrupted attempt."""


def _turn_of(event: RuntimeEvent) -> str | None:
    if isinstance(event, TurnEvent | StepEvent | ToolEvent | ApprovalEvent):
        return given(event.turn_id)
    return None


class SpanAssembler:
    """Pairs start and end events as they are appended (on the event loop: little work).

    Every finished span goes to ``emit``; open spans are kept by span id, with an index of the
    Steps and tool calls of each open Turn so the Turn's end closes what it left open.
    """

    def __init__(
        self,
        emit: Callable[[FinishedSpan], None],
        *,
        model_of: ModelOf,
        on_forgotten: Callable[[], None],
        max_open: int = MAX_OPEN_SPANS,
    ) -> None:
        self._emit = emit
        self._model_of = model_of
        self._on_forgotten = on_forgotten
        self._max_open = max_open
        self._open: dict[str, _Open] = {}
        self._turn_children: dict[tuple[str, str | None], dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def observe(self, event: AnyEvent) -> None:
        """Take one runtime event (an ``EventLog`` listener)."""
        if isinstance(event, RawEvent):
            return
        if event.type in SPAN_STARTS:
            self._started(SPAN_STARTS[event.type], event)
        elif event.type in SPAN_ENDS:
            self._ended(SPAN_ENDS[event.type], event)
        elif isinstance(event, ProcessExitedEvent):
            self._agent_exited(event)
        elif isinstance(event, TurnResumedEvent) and event.span in self._open:
            self._open[event.span].resumed = event.to_builtins()

    def _started(self, kind: SpanKind, event: RuntimeEvent) -> None:
        span_id = event.span
        if span_id is None:
            return
        if len(self._open) >= self._max_open:
            oldest = next(iter(self._open))
            self._forget(oldest)
            self._on_forgotten()
        model = self._model_of(event.agent_name) if kind in ("turn", "step") else None
        self._open[span_id] = _Open(event, model)
        if kind != "turn":
            key = (event.agent_name, _turn_of(event))
            self._turn_children.setdefault(key, {})[span_id] = None

    def _forget(self, span_id: str) -> _Open | None:
        opened = self._open.pop(span_id, None)
        if opened is not None and opened.event.type != EventType.TURN_STARTED:
            key = (opened.event.agent_name, _turn_of(opened.event))
            children = self._turn_children.get(key)
            if children is not None:
                children.pop(span_id, None)
                if not children:
                    del self._turn_children[key]
        return opened

    def _ended(self, kind: SpanKind, event: RuntimeEvent) -> None:
        span_id = event.span
        opened = self._forget(span_id) if span_id is not None else None
        if opened is not None:
            model = opened.model
        else:
            model = self._model_of(event.agent_name) if kind in ("turn", "step") else None
        start = opened.event.to_builtins() if opened else None
        resumed = opened.resumed if opened else None
        self._emit(FinishedSpan(start, event.to_builtins(), model, resumed=resumed))
        if kind == "turn":
            children = self._turn_children.pop((event.agent_name, _turn_of(event)), {})
            # The latest started first: a tool call ends before its Step, as it would have.
            for child in reversed(list(children)):
                self._end_for_it(child, event, "its Turn ended before it did")

    def _agent_exited(self, event: ProcessExitedEvent) -> None:
        agent = event.agent_name
        left = [s for s, o in self._open.items() if o.event.agent_name == agent]
        reason = f"its agent's process exited ({given(event.reason) or 'no reason given'})"
        for span_id in reversed(left):  # the innermost (latest started) first
            self._end_for_it(span_id, event, reason)

    def _end_for_it(self, span_id: str, cause: RuntimeEvent, reason: str) -> None:
        opened = self._forget(span_id)
        if opened is None:
            return
        start = opened.event.to_builtins()
        end = {
            **start,
            "type": INCOMPLETE_END[SPAN_STARTS[opened.event.type]].value,
            "timestamp": cause.timestamp,
            "errorMessage": reason,
        }
        self._emit(
            FinishedSpan(start, end, opened.model, incomplete=reason, resumed=opened.resumed)
        )


@dataclass(frozen=True, slots=True)
class SpanLink:
    """A link from a span to another one (of its trace or another), with why it is there."""

    trace_id: int
    span_id: int
    attributes: dict[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class SpanData:
    """One span, ready for an exporter: plain values, no OpenTelemetry types."""

    name: str
    kind: SpanKindName
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    error: str | None = None
    """The status message of a failed span; ``None``: status unset (it did not fail)."""
    links: tuple[SpanLink, ...] = ()
    """A resumed Turn attempt's link to the attempt its agent died under."""


def build_span(finished: FinishedSpan) -> SpanData | None:
    """The span of ``finished``, named and attributed after the OpenTelemetry GenAI semantic
    conventions; ``None`` when its events lack usable ids or a timestamp."""
    end = read_event(finished.end)
    start = read_event(finished.start) if finished.start is not None else None
    if isinstance(end, RawEvent) or end.type not in SPAN_ENDS:
        return None
    ids = _ids(end)
    if ids is None:
        return None
    trace_id, span_id, end_ns = ids
    parent = end.parent_span or (start.parent_span if start is not None else None)
    agent = end.agent_name
    attributes: dict[str, AttributeValue] = {
        "gen_ai.agent.name": agent,
        "goondan.agent": agent,
        "goondan.instance_key": end.instance or "",
    }
    start_ns = _start_ns(start, end, end_ns, attributes)
    _put(attributes, "goondan.turn_id", _turn_of(end))
    if finished.model is not None:
        attributes["gen_ai.provider.name"], attributes["gen_ai.request.model"] = finished.model
    name, span_kind_name = _describe(end, finished.model, attributes)
    _put_usage(attributes, end)
    failed = _put_failure(attributes, finished, end)
    links = _resumed_link(finished.resumed, attributes)
    return SpanData(
        name=name,
        kind=span_kind_name,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_hex_id(parent, 16),
        start_ns=min(start_ns, end_ns),
        end_ns=end_ns,
        attributes=attributes,
        error=None if failed is None else failed[1],
        links=links,
    )


def _resumed_link(
    resumed: dict[str, Any] | None, attributes: dict[str, AttributeValue]
) -> tuple[SpanLink, ...]:
    """A resumed Turn attempt: its number on the span, and a link to the span of the attempt
    its agent died under (``resumedSpanId``), when that one is named."""
    event = read_event(resumed) if resumed is not None else None
    if not isinstance(event, TurnResumedEvent):
        return ()
    attempt = given(event.attempt)
    _put(attributes, "goondan.turn.attempt", attempt)
    _put(attributes, "goondan.request_id", given(event.request_id))
    trace_id = _hex_id(event.trace_id, 32)
    span_id = _hex_id(given(event.resumed_span_id), 16)
    if trace_id is None or span_id is None:
        return ()
    why: dict[str, AttributeValue] = {"goondan.link.type": "resumes"}
    _put(why, "goondan.turn.attempt", attempt)
    _put(why, "goondan.turn_id", given(event.resumed_turn_id))
    _put(why, "goondan.turn.replayed", given(event.replayed))
    return (SpanLink(trace_id, span_id, why),)


def _ids(end: RuntimeEvent) -> tuple[int, int, int] | None:
    """The trace id, span id and end (ns) of an end event, ``None`` if one is unusable."""
    trace_id = _hex_id(end.trace_id, 32)
    span_id = _hex_id(end.span_id, 16)
    end_ns = _nanoseconds(end.timestamp)
    if trace_id is None or span_id is None or end_ns is None:
        return None
    return trace_id, span_id, end_ns


def _start_ns(
    start: AnyEvent | None,
    end: RuntimeEvent,
    end_ns: int,
    attributes: dict[str, AttributeValue],
) -> int:
    """When the span began: its start event's stamp, else its end less its duration (and
    the span says it was estimated)."""
    start_ns = _nanoseconds(start.timestamp) if start is not None else None
    if start_ns is not None:
        return start_ns
    duration = given(end.duration) if isinstance(end, TurnEvent | StepEvent | ToolEvent) else None
    attributes["goondan.span.start_estimated"] = True
    return end_ns - int((duration or 0) * 1_000_000)


def _put_usage(attributes: dict[str, AttributeValue], end: RuntimeEvent) -> None:
    """The tokens (and cost, by the Model's pricing) of a Turn or Step."""
    usage = given(end.token_usage) if isinstance(end, TurnEvent | StepEvent) else None
    if usage is not None:
        _put(attributes, "gen_ai.usage.input_tokens", usage.input_tokens)
        _put(attributes, "gen_ai.usage.output_tokens", usage.output_tokens)
        _put(attributes, "goondan.usage.cost", given(usage.cost))


def _put_failure(
    attributes: dict[str, AttributeValue], finished: FinishedSpan, end: RuntimeEvent
) -> tuple[str, str] | None:
    """How the span failed (type, message), if it did, put in ``attributes``; a span left
    incomplete fails as such."""
    failed = ("incomplete", finished.incomplete) if finished.incomplete else failure(end)
    if failed is not None:
        attributes["error.type"] = failed[0]
    if finished.incomplete is not None:
        attributes["goondan.span.incomplete"] = finished.incomplete
    return failed


def _describe(
    end: RuntimeEvent, model: tuple[str, str] | None, attributes: dict[str, AttributeValue]
) -> tuple[str, SpanKindName]:
    """The span's name and kind, and the attributes of its kind."""
    if isinstance(end, TurnEvent):
        attributes["gen_ai.operation.name"] = "invoke_agent"
        _put(attributes, "goondan.step_count", given(end.step_count))
        return f"invoke_agent {attributes['goondan.agent']}", "internal"
    if isinstance(end, StepEvent):
        attributes["gen_ai.operation.name"] = "chat"
        _put(attributes, "goondan.step_id", given(end.step_id))
        _put(attributes, "goondan.step_index", given(end.step_index))
        _put(attributes, "goondan.tool_call_count", given(end.tool_call_count))
        return f"chat {model[1] if model else ''}".rstrip(), "client"  # a call to the provider
    if isinstance(end, ToolEvent):
        tool = given(end.tool_name) or ""
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool
        attributes["gen_ai.tool.type"] = "function"
        _put(attributes, "gen_ai.tool.call.id", given(end.tool_call_id))
        _put(attributes, "goondan.step_id", given(end.step_id))
        _put(attributes, "goondan.tool.status", given(end.status))
        return f"execute_tool {tool}".rstrip(), "internal"
    # The wait for an operator's decision on a tool call (no GenAI operation: the runtime's).
    assert isinstance(end, ApprovalEvent)
    tool = given(end.tool_name) or ""
    attributes["gen_ai.tool.name"] = tool
    _put(attributes, "gen_ai.tool.call.id", given(end.tool_call_id))
    _put(attributes, "goondan.approval.id", given(end.approval_id))
    _put(attributes, "goondan.approval.status", given(end.status))
    return f"await_approval {tool}".rstrip(), "internal"


def _put(attributes: dict[str, AttributeValue], key: str, value: object) -> None:
    if isinstance(value, str | bool | int | float):
        attributes[key] = value


def _hex_id(value: object, digits: int) -> int | None:
    """The id ``value`` (``digits`` hex digits, not all zero) as an integer."""
    if not isinstance(value, str) or len(value) != digits:
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    return number or None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _nanoseconds(stamp: object) -> int | None:
    """An event's ISO 8601 timestamp as nanoseconds since the epoch."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = parse_timestamp(stamp)
    except ValueError:
        return None
    # Whole microseconds, exactly (a float of seconds since 1970 loses some).
    return (moment - _EPOCH) // _MICROSECOND * 1000


# --- every event of a trace, for the studio ---------------------------------------------------


def epoch_ms(stamp: object) -> float | None:
    """Milliseconds since the epoch of an ISO 8601 timestamp, ``None`` if it is none."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = parse_timestamp(stamp, naive_is_utc=True)
    except ValueError:
        return None
    return moment.timestamp() * 1000


@dataclass(slots=True)
class Span:
    """One Turn, Step or tool call of a trace, from its started and finished events."""

    span_id: str
    kind: str
    """``turn``, ``step``, ``tool``, or ``approval`` (a tool call waiting for an operator)."""
    agent: str = ""
    instance_key: str = ""
    parent_span_id: str | None = None
    started_ms: float | None = None
    finished_ms: float | None = None
    duration_ms: float | None = None
    status: str = "running"
    """``running`` until its end is recorded, then ``ok``, ``error`` or ``cancelled``;
    ``awaiting`` while a tool call is parked for an operator's decision (no failure);
    ``interrupted``: its agent died under it and a later attempt took its Turn up."""
    error: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """What the events said besides the above: ids, tool name, arguments, output, usage."""

    @property
    def start(self) -> float | None:
        """When it began: its started event, else its end less its duration."""
        if self.started_ms is not None:
            return self.started_ms
        if self.finished_ms is not None and self.duration_ms is not None:
            return self.finished_ms - self.duration_ms
        return self.finished_ms

    @property
    def end(self) -> float | None:
        """When it ended (its start plus the measured duration, which is finer than stamps)."""
        start = self.start
        if start is not None and self.duration_ms is not None:
            return start + self.duration_ms
        return self.finished_ms

    def name(self) -> str:
        """What the waterfall calls it."""
        if self.kind == "turn":
            return f"{self.agent} turn"
        if self.kind == "step":
            return f"step {self.fields.get('stepIndex', '?')}"
        if self.kind == "approval":
            return str(self.fields.get("toolName") or "approval")
        return str(self.fields.get("toolName") or "tool")

    def to_json(self, depth: int = 0) -> dict[str, Any]:
        """The span as the studio's API hands it out."""
        return {
            "spanId": self.span_id,
            "parentSpanId": self.parent_span_id,
            "kind": self.kind,
            "name": self.name(),
            "agent": self.agent,
            "instanceKey": self.instance_key,
            "startMs": self.start,
            "endMs": self.end,
            "durationMs": self.duration_ms,
            "status": self.status,
            "error": self.error,
            "depth": depth,
            **self.fields,
        }


SPAN_FIELDS = (
    "turnId",
    "stepId",
    "stepIndex",
    "toolCallId",
    "toolName",
    "args",
    "output",
    "tokenUsage",
    "toolCallCount",
    "stepCount",
    "requestId",
    "attempt",
    "resumedTurnId",
    "resumedSpanId",
    "replayed",
)
"""The JSON fields of a span's events that its row shows."""


def _error_text(end: RuntimeEvent) -> str | None:
    """``message (code)`` of what an end event says went wrong, ``None`` when nothing did."""
    message = (
        given(end.error_message) if isinstance(end, TurnEvent | StepEvent | ToolEvent) else None
    )
    code = given(end.error_code) if isinstance(end, TurnEvent | StepEvent) else None
    error = error_object(end)
    if error:
        message = message or error.get("message")
        code = code or error.get("code")
    if message is None and code is None:
        return None
    return f"{message} ({code})" if message and code else str(message or code)


def fold(spans: dict[str, Span], event: AnyEvent) -> Span | None:
    """Fold one event of a trace into its spans (``spans``, by id): the span it opened, ended
    or spoke of, ``None`` when it is no span's event."""
    kind = span_kind(event)
    span_id = event.span
    if kind is None or span_id is None or isinstance(event, RawEvent):
        return None
    span = _span_for(spans, span_id, kind)
    _identify(span, event)
    stamp = epoch_ms(event.timestamp)
    if isinstance(event, ApprovalEvent):
        _approval(span, stamp, event)
    elif event.type in SPAN_STARTS:
        span.started_ms = stamp
    elif event.type in SPAN_ENDS:
        _close(span, stamp, event)
    elif isinstance(event, TurnCancellingEvent) and span.status == "running":
        span.error = f"cancelling: {given(event.reason)}"
    return span


def _span_for(spans: dict[str, Span], span_id: str, kind: str) -> Span:
    """The span ``span_id`` of ``spans``, opened when it is new."""
    span = spans.get(span_id)
    if span is None:
        span = spans[span_id] = Span(span_id, kind)
    elif kind == "tool" and span.kind == "approval":
        span.kind = "tool"  # the approved call runs in the span that waited for it
    return span


def _identify(span: Span, event: RuntimeEvent) -> None:
    """What ``event`` says of ``span``'s agent, instance, parent and fields."""
    span.agent = event.agent_name or span.agent
    span.instance_key = event.instance or span.instance_key
    if event.parent_span:
        span.parent_span_id = event.parent_span
    data = event.to_builtins()
    for name in SPAN_FIELDS:
        if data.get(name) is not None:
            span.fields[name] = data[name]


def _close(span: Span, stamp: float | None, event: RuntimeEvent) -> None:
    """``span`` ended by ``event``: when, how long, and how it went."""
    span.finished_ms = stamp
    duration = (
        given(event.duration) if isinstance(event, TurnEvent | StepEvent | ToolEvent) else None
    )
    span.duration_ms = float(duration) if duration is not None else None
    failed = failure(event) is not None
    code = given(event.error_code) if isinstance(event, TurnEvent | StepEvent) else None
    span.status = "cancelled" if code == CANCELLED else "error" if failed else "ok"
    span.error = _error_text(event) if failed else None


def _approval(span: Span, stamp: float | None, event: ApprovalEvent) -> None:
    """A tool call parked for an operator: a span of its own while it waits (the call's own
    span when it then runs)."""
    span.fields["approvalId"] = given(event.approval_id)
    span.fields["approvalStatus"] = given(event.status)
    if isinstance(event.decided_by, dict):
        span.fields["decidedBy"] = event.decided_by
    if span.kind != "approval":
        return  # the tool's own events say when it ran and how it ended
    if event.type in SPAN_STARTS:
        span.started_ms = span.started_ms if span.started_ms is not None else stamp
        span.status, span.error = "awaiting", None  # parked, not failed
        return
    if event.type not in SPAN_ENDS:
        return
    span.finished_ms = stamp
    if span.started_ms is not None and stamp is not None:
        span.duration_ms = stamp - span.started_ms
    if isinstance(event, ApprovalDecidedEvent) and event.status == "approved":
        span.status, span.error = "ok", None
    elif isinstance(event, ApprovalDecidedEvent):
        span.status = "error"
        span.error = f"rejected by an operator: {given(event.reason)} (E_TOOL_REJECTED)"
    elif event.type == EventType.APPROVAL_EXPIRED:
        span.status = "error"
        span.error = "no decision before the approval expired (E_TOOL_APPROVAL_TIMEOUT)"
    else:
        span.status, span.error = "cancelled", "the request was cancelled (E_TOOL_CANCELLED)"
