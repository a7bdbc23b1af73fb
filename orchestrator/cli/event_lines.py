"""One runtime event as ``logs`` prints it: a line a terminal shows whole.

``time who type trace what``, where ``what`` is the event's sentence when it has one (the
approvals: :func:`orchestrator.studio.phrases.event_sentence`, the studio's own phrasing), else
its fields as ``key=value``, each value cut at :data:`VALUE_CHARS`. On a terminal the line is
cut at its width; ``--json`` prints every event whole.
"""

from __future__ import annotations

import json
import sys

from ipc.runtime_events import AnyEvent
from orchestrator.tables import cut, printable, terminal_width

VALUE_CHARS = 60
"""A field's value is cut after this many characters (``…`` says so)."""
PIPED_LINE_CHARS = 240
"""A line written to a pipe or a file is cut after this many characters."""
_SAID_ELSEWHERE = frozenset(
    {"timestamp", "type", "agentName", "instanceKey", "traceId", "spanId", "parentSpanId"}
)
"""Fields the line says in its own columns (or the trace says)."""


def line_width() -> int:
    """How long a line may be: the terminal's width, or :data:`PIPED_LINE_CHARS`."""
    if sys.stdout.isatty():
        return max(40, terminal_width(sys.stdout))
    return PIPED_LINE_CHARS


def event_line(event: AnyEvent, width: int) -> str:
    """``event`` in one line of at most ``width`` characters."""
    from orchestrator.studio.phrases import event_sentence

    data = event.to_builtins()
    who = event.agent_name or "?"
    if event.instance:
        who += f"@{event.instance}"
    trace = f" trace={event.trace[:8]}" if event.trace else ""
    what = event_sentence(event)
    if what is None:
        what = " ".join(
            f"{key}={cut(json.dumps(value, ensure_ascii=False), VALUE_CHARS)}"
            for key, value in data.items()
            if key not in _SAID_ELSEWHERE
        )
    # One line per event whatever a value holds: a newline would start a line of its own, and
    # a control character (a model's arguments are anyone's) must not drive the terminal.
    what = " ".join(what.split())
    line = f"{event.timestamp} {who:<20} {event.type:<16}{trace} {what}".rstrip()
    return cut(printable(line), width)
