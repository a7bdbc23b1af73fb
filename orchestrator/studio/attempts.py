"""A Turn its agent died under, as the studio shows it: one Turn with its attempts.

Each attempt at such a Turn is a Turn span of its own (the runtime's ids), the later ones
carrying what their ``turn.resumed`` event said: ``attempt`` and ``resumedSpanId``, the
attempt before it, which :func:`mark_interrupted` marks ``interrupted`` with whatever it left
running. :func:`group_attempts` puts a Turn's attempts one after the other in
the waterfall, each with its Steps and tool calls, says on every attempt which one it is and
how many there were, and on every later attempt what became of the work the crash cut short:
a tool call run again (its tool is idempotent), answered ``E_TOOL_INTERRUPTED`` (it may or
may not have run), or a model call asked again.
"""

from __future__ import annotations

from typing import Any

from goondan.errors import ToolCode
from orchestrator.telemetry.spans import Span

Row = dict[str, Any]
"""A span as the studio's API hands it out (:meth:`Span.to_json`): its own keys always there,
the fields its events gave it (``attempt``, ``resumedSpanId``, ``toolCallId``...) only when they
did, hence read with ``get``."""


def group_attempts(rows: list[Row]) -> list[Row]:
    """``rows`` (waterfall order: parents before children), each Turn's attempts together and
    annotated: ``attempt``, ``attempts``, ``attemptOf`` (the first attempt's span) on each,
    ``crash`` on each later one, ``resumedAs`` on what an interrupted attempt left running."""
    by_id = {row["spanId"]: row for row in rows}
    before = {
        row["spanId"]: row["resumedSpanId"]
        for row in rows
        if row["kind"] == "turn" and row.get("resumedSpanId") in by_id
    }
    if not before:
        return rows
    chains: dict[str, list[Row]] = {}
    for row in rows:
        span_id = row["spanId"]
        if row["kind"] == "turn" and (span_id in before or span_id in before.values()):
            chains.setdefault(_first(span_id, before), []).append(row)
    subtrees = _subtrees(rows)
    for members in chains.values():
        members.sort(key=_attempt_order)
        for number, attempt in enumerate(members, start=1):
            _annotate(attempt, members, number, subtrees)
    placed: set[str] = set()
    out: list[Row] = []
    for row in rows:
        if row["spanId"] in placed:
            continue
        chain = chains.get(_first(row["spanId"], before)) if row["kind"] == "turn" else None
        if chain is None:
            out.append(row)
            placed.add(row["spanId"])
            continue
        for attempt in chain:
            shift = chain[0]["depth"] - attempt["depth"]
            for member in subtrees[attempt["spanId"]]:
                member["depth"] += shift
                out.append(member)
                placed.add(member["spanId"])
    return out


def mark_interrupted(spans: dict[str, Span], span_id: str | None) -> None:
    """The attempt ``span_id`` of a Turn, taken up by a later one (a ``turn.resumed`` event
    names it): it, and what it left running (its Step, a tool call in flight), were cut short
    when its agent died."""
    if span_id is None or span_id not in spans:
        return
    agent = spans[span_id].agent  # another agent's Turn it asked for lives on
    under = {span_id}
    grew = True
    while grew:  # its descendants (a Turn holds Steps, a Step tool calls: a few levels)
        more = {
            s.span_id for s in spans.values() if s.parent_span_id in under and s.agent == agent
        } - under
        under |= more
        grew = bool(more)
    for sid in under:
        if spans[sid].status == "running":
            spans[sid].status = "interrupted"


def latest_attempt(spans: dict[str, Span], span: Span) -> Span:
    """The last attempt at the Turn whose attempt ``span`` is (``span`` itself when no later
    attempt took it up): what the Turn came to."""
    later = {
        str(s.fields["resumedSpanId"]): s for s in spans.values() if s.fields.get("resumedSpanId")
    }
    seen = {span.span_id}
    while span.span_id in later and later[span.span_id].span_id not in seen:
        span = later[span.span_id]
        seen.add(span.span_id)
    return span


def _first(span_id: str, before: dict[str, str]) -> str:
    """The first attempt of the Turn whose attempt ``span_id`` is."""
    seen = {span_id}
    while span_id in before and before[span_id] not in seen:
        span_id = before[span_id]
        seen.add(span_id)
    return span_id


def _attempt_order(row: Row) -> tuple[int, float]:
    number = row.get("attempt")
    start = row["startMs"]
    return (number if isinstance(number, int) else 1, start if start is not None else 0.0)


def _subtrees(rows: list[Row]) -> dict[str, list[Row]]:
    """Each Turn row's rows: itself and those below it (depth-first order)."""
    out: dict[str, list[Row]] = {}
    for index, row in enumerate(rows):
        if row["kind"] != "turn":
            continue
        end = index + 1
        while end < len(rows) and rows[end]["depth"] > row["depth"]:
            end += 1
        out[row["spanId"]] = rows[index:end]
    return out


def _annotate(attempt: Row, chain: list[Row], number: int, subtrees: dict[str, list[Row]]) -> None:
    attempt["attempt"] = number
    attempt["attempts"] = len(chain)
    attempt["attemptOf"] = chain[0]["spanId"]
    if number == 1:
        return
    previous = chain[number - 2]
    later_calls = {
        row["toolCallId"]
        for later in chain[number - 1 :]
        for row in subtrees[later["spanId"]]
        if row["kind"] == "tool" and row.get("toolCallId")
    }
    crash: Row = {
        "after": number - 1,
        "agent": previous["agent"],
        "replayed": bool(attempt.get("replayed")),
        "rerun": [],
        "interrupted": [],
        "modelAskedAgain": False,
    }
    if previous["status"] == "interrupted":
        previous["error"] = previous["error"] or (
            f"{previous['agent']}'s process died under this attempt; "
            f"attempt {number} took the Turn up"
        )
    for row in subtrees[previous["spanId"]][1:]:
        if row["status"] != "interrupted" or row["agent"] != previous["agent"]:
            continue
        if row["kind"] == "tool":
            rerun = row.get("toolCallId") in later_calls
            row["resumedAs"] = "rerun" if rerun else ToolCode.E_TOOL_INTERRUPTED.value
            crash["rerun" if rerun else "interrupted"].append(row["name"])
        elif row["kind"] == "step" and not _has_tool_calls(row, subtrees[previous["spanId"]]):
            row["resumedAs"] = "askedAgain"  # cut in its model call: nothing recorded
            crash["modelAskedAgain"] = True
    attempt["crash"] = crash


def _has_tool_calls(step: Row, rows: list[Row]) -> bool:
    """Whether ``step``'s model answer came (it asked for tool calls, which ran under it)."""
    return any(row["parentSpanId"] == step["spanId"] for row in rows)
