"""The typed runtime events on their way through the daemon: the event log types what it
appends and keeps what it cannot type, the live hub hands subscribers JSON objects and watchers
typed events, and the studio and the exporter read one span model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from ipc.runtime_events import (
    AnyEvent,
    EventType,
    ProcessSpawnedEvent,
    RawEvent,
    StepCompletedEvent,
    TextDeltaEvent,
    TokenCounts,
    ToolCompletedEvent,
    TurnStartedEvent,
    read_event,
)
from orchestrator.eventlog import EventLog, read_events, read_typed
from orchestrator.operations.live import END_OF_STREAM, EventHub
from orchestrator.telemetry.spans import FinishedSpan, build_span, fold

TRACE = "4de2e69222be64696d7a1756bb520517"
STEP, TOOL = "3ebc0435ea5987d6", "985cfea1041601d6"


def tool_completed(status: str, error: Any) -> dict[str, Any]:
    return {
        "type": "tool.completed",
        "timestamp": "2026-11-23T17:57:09.757Z",
        "agentName": "worker",
        "instanceKey": "u42",
        "traceId": TRACE,
        "spanId": TOOL,
        "parentSpanId": STEP,
        "toolCallId": "call_1",
        "toolName": "bash__exec",
        "stepId": "s0",
        "turnId": "turn-1",
        "status": status,
        "duration": 12.5,
        "output": None,
        "error": error,
    }


def test_the_log_types_what_it_appends_and_keeps_what_it_cannot(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    heard: list[AnyEvent] = []
    log.listeners.append(heard.append)
    newer = {"type": "turn.paused", "timestamp": "t", "agentName": "a", "why": [1, 2]}
    log.append(read_event(tool_completed("ok", None)))
    log.append(read_event(newer))
    log.emit(TurnStartedEvent(agent_name="a", trace_id=TRACE, turn_id="turn-1"))
    log.lifecycle(ProcessSpawnedEvent(pid=7), "b")
    log.close()
    assert [type(event) for event in heard] == [
        ToolCompletedEvent,
        RawEvent,
        TurnStartedEvent,
        ProcessSpawnedEvent,
    ]
    assert heard[3].type is EventType.PROCESS_SPAWNED
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert lines[0]["type"] == "eventlog.opened"
    assert lines[1] == tool_completed("ok", None)
    assert lines[2] == newer  # written back whole
    assert lines[3]["timestamp"]  # stamped when emitted
    assert lines[4] == {**lines[4], "type": "process.spawned", "agentName": "b", "pid": 7}
    typed = [event for _, event in read_typed(log.path)]
    assert [event.to_builtins() for event in typed] == [e for _, e in read_events(log.path)]
    assert isinstance(typed[0], ToolCompletedEvent)
    assert isinstance(typed[1], RawEvent)


async def test_the_hub_gives_subscribers_json_and_watchers_typed_events() -> None:
    hub = EventHub()
    watched: list[AnyEvent] = []
    delta = TextDeltaEvent(agent_name="a", trace_id=TRACE, text="hel")
    with hub.watching(watched.append):
        async with hub.subscribe() as subscription:
            hub.publish(delta)
            hub.close()
            got = [await asyncio.wait_for(subscription.queue.get(), 5) for _ in range(2)]
    assert watched[0] is delta
    assert got[0] == {"type": "text.delta", "agentName": "a", "traceId": TRACE, "text": "hel"}
    assert got[1] is END_OF_STREAM


def test_the_studio_and_the_exporter_agree_on_a_failed_tool_call() -> None:
    error = {"code": "E_TOOL_EXIT", "message": "exit status 2"}
    end = tool_completed("error", error)
    spans: dict[str, Any] = {}
    span = fold(spans, _typed(end))
    assert span is not None
    assert (span.status, span.error) == ("error", "exit status 2 (E_TOOL_EXIT)")
    built = build_span(FinishedSpan(None, end, None))
    assert built is not None
    assert (built.attributes["error.type"], built.error) == ("E_TOOL_EXIT", "exit status 2")
    ok = build_span(FinishedSpan(None, tool_completed("ok", None), None))
    assert ok is not None
    assert ok.error is None
    fine = fold({}, _typed(tool_completed("ok", None)))
    assert fine is not None
    assert fine.status == "ok"


def _typed(data: dict[str, Any]) -> AnyEvent:
    return read_event(data)


def test_token_counts_read_an_answers_usage_and_nothing_else() -> None:
    counts = TokenCounts.read({"promptTokens": 5, "completionTokens": 2, "totalTokens": 7})
    assert (counts.input_tokens, counts.output_tokens) == (5, 2)
    assert TokenCounts.read(None) == TokenCounts()
    assert TokenCounts.read({"promptTokens": "many"}) == TokenCounts()
    step = _typed(
        {
            "type": "step.completed",
            "agentName": "a",
            "tokenUsage": {"promptTokens": 5, "completionTokens": 2, "totalTokens": 7},
        }
    )
    assert isinstance(step, StepCompletedEvent)
    assert step.token_usage == counts
