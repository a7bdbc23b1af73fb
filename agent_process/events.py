"""Runtime events with trace context: what an agent reports about its Turns, Steps and tools.

Dot-notation types: ``turn.started|completed|failed|cancelling``,
``step.started|completed|failed``, ``tool.called|completed|failed`` (and the ``approval.*``
events of parked calls). Every event carries
``agentName``, ``instanceKey``, ``traceId``, ``spanId`` and ``parentSpanId`` (none for a Turn
that starts a trace; a delegated Turn's parent is the caller's tool span, so one trace id links
the whole causal chain across agents). Step spans hang under their Turn, tool spans under their
Step. Tool arguments and outputs are cut to :data:`MAX_FIELD_CHARS` characters.

Producers build the typed event of :mod:`ipc.runtime_events` (the fields of its family); the
recorder stamps it and hands it to the sink (the outbox, which reports it to the Orchestrator).
The sink contract: ``emit`` never blocks and never raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import secrets
from collections.abc import Callable
from typing import Any

from goondan.time import utc_timestamp
from ipc.runtime_events import RuntimeEvent

MAX_FIELD_CHARS = 2000

EventSink = Callable[[RuntimeEvent], None]

current_span: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "goondan_span", default=None
)
"""The innermost span of the running code (the tool span inside a tool call)."""


def new_span_id() -> str:
    """16 hex characters (8 random bytes)."""
    return secrets.token_hex(8)


def capped(value: Any) -> Any:
    """``value`` as JSON, or its first :data:`MAX_FIELD_CHARS` characters as text."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= MAX_FIELD_CHARS:
        return value
    return text[:MAX_FIELD_CHARS] + f"... ({len(text)} chars)"


class EventRecorder:
    """Stamps events with time, agent, instance and trace context, and hands them to a sink.

    A Turn's :class:`~agent_process.scope.TurnScope` builds its own from its identity.
    """

    __slots__ = ("_identity", "_sink")

    def __init__(
        self, sink: EventSink | None, *, agent_name: str, instance_key: str, trace_id: str
    ) -> None:
        self._sink = sink
        self._identity = (agent_name, instance_key, trace_id)

    @property
    def active(self) -> bool:
        """Whether events go anywhere; callers skip building costly fields when not."""
        return self._sink is not None

    def emit(self, event: RuntimeEvent, span_id: str, parent_span_id: str | None) -> None:
        """Stamp and record one event; a failing sink is ignored (events must never break a
        Turn)."""
        if self._sink is None:
            return
        with contextlib.suppress(Exception):
            event.timestamp = utc_timestamp()
            event.agent_name, event.instance_key, event.trace_id = self._identity
            event.span_id = span_id
            if parent_span_id:
                event.parent_span_id = parent_span_id
            self._sink(event)
