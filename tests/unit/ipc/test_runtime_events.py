"""Typed runtime events: every line the runtime writes reads back typed and encodes to the same
JSON object, key for key; a line of an unknown type is kept whole."""

from __future__ import annotations

import json

import msgspec
import pytest

from ipc.runtime_events import (
    UNSET,
    EventType,
    ProcessExitedEvent,
    RawEvent,
    RuntimeEvent,
    StepCompletedEvent,
    TokenCounts,
    ToolCompletedEvent,
    TurnFailedEvent,
    TurnStartedEvent,
    TypedEvent,
    decode_line,
    encode_event,
    given,
    read_event,
)

TRACE = {
    "agentName": "coordinator",
    "instanceKey": "default",
    "traceId": "c98b39b8ae2edce2a9b385066cb739fc",
    "spanId": "1e4ac2734b771aa7",
    "parentSpanId": "59666042f68b3046",
}
STAMP = "2026-11-26T13:44:52.228Z"


def line(event_type: str, **fields: object) -> dict[str, object]:
    return {"type": event_type, "timestamp": STAMP, **fields}


# One of each line as its producer writes it (from an offline example's log, and the producers'
# fields for the rest), nulls included: a null stays null, an absent key stays absent.
LINES = [
    line("eventlog.opened", formatVersion=1),
    line("process.spawned", agentName="coordinator", pid=11787),
    line("process.spawned", agentName="worker", pid=11787, node="gpu-1"),
    line("process.adopted", agentName="worker", pid=11787, node="gpu-1"),
    line("process.ready", agentName="coordinator", pid=11787),
    line(
        "process.exited",
        agentName="coordinator",
        expected=True,
        consecutiveCrashes=0,
        exitCode=0,
        signal=None,
        reason="exit code 0",
    ),
    line("process.backoff", agentName="w", delaySeconds=1.0),
    line("process.restarting", agentName="w", restarts=2),
    line("process.restart_requested", agentName="w", reason="new tools"),
    line("process.config_rejected", agentName="orchestrator", errors=["bad: x"]),
    line("process.config_applied", agentName="orchestrator", restarted=["w"]),
    line("process.resume_pending", agentName="w", instance="default"),
    line("process.broken_fds", agentName="w", fds=[1, 2]),
    line("turn.started", **{**TRACE, "parentSpanId": "ccdd1716cd25a1b5"}, turnId="turn-1"),
    line("turn.cancelling", **TRACE, turnId="turn-1", reason="cancelled by an operator"),
    line(
        "turn.resumed",
        **TRACE,
        turnId="turn-2",
        requestId="req-1",
        attempt=2,
        resumedTurnId="turn-1",
        resumedSpanId="ccdd1716cd25a1b5",
        replayed=False,
    ),
    line(
        "turn.completed",
        **TRACE,
        turnId="turn-1",
        stepCount=2,
        duration=91.862,
        output="done",
        tokenUsage={"promptTokens": 44, "completionTokens": 13, "totalTokens": 57, "cost": 0.01},
    ),
    line(
        "turn.failed",
        **TRACE,
        turnId="turn-1",
        stepCount=1,
        duration=3.0,
        errorCode=None,
        errorMessage=None,
    ),
    line("step.started", **TRACE, stepId="s-0", stepIndex=0, turnId="turn-1"),
    line(
        "step.completed",
        **TRACE,
        stepId="s-0",
        stepIndex=0,
        turnId="turn-1",
        toolCallCount=1,
        duration=89.392,
        tokenUsage={"promptTokens": 22, "completionTokens": 0, "totalTokens": 22},
    ),
    line(
        "step.completed",
        **TRACE,
        stepId="s-1",
        stepIndex=1,
        turnId="turn-1",
        toolCallCount=0,
        duration=1.5,
        tokenUsage=None,
    ),
    line(
        "step.failed",
        **TRACE,
        stepId="s-0",
        stepIndex=0,
        turnId="turn-1",
        duration=2.0,
        errorCode="E_MODEL",
        errorMessage="boom",
    ),
    line(
        "tool.called",
        **TRACE,
        toolCallId="call_1",
        toolName="agents__request",
        stepId="s-0",
        turnId="turn-1",
        args={"target": "worker", "input": "hi"},
    ),
    line(
        "tool.completed",
        **TRACE,
        toolCallId="call_1",
        toolName="file-system__write",
        stepId="s-0",
        turnId="turn-1",
        status="ok",
        duration=12.28,
        output={"path": "notes.txt", "size": 11},
        error=None,
    ),
    line(
        "tool.failed",
        **TRACE,
        toolCallId="call_1",
        toolName="t",
        stepId="s-0",
        turnId="turn-1",
        duration=1.0,
        errorMessage="RuntimeError('x')",
    ),
    *(
        line(
            kind,
            **TRACE,
            approvalId="apr-1",
            toolCallId="call_1",
            toolName="bash__exec",
            turnId="turn-1",
            status="pending",
            expiresAt=STAMP,
        )
        for kind in (
            "approval.resumed",
            "approval.expired",
            "approval.cancelled",
        )
    ),
    line(
        "approval.requested",
        **TRACE,
        approvalId="apr-1",
        toolCallId="call_1",
        toolName="bash__exec",
        turnId="turn-1",
        status="pending",
        expiresAt=STAMP,
        args={"cmd": "ls"},
    ),
    line(
        "approval.decided",
        **TRACE,
        approvalId="apr-1",
        toolCallId="call_1",
        toolName="bash__exec",
        turnId="turn-1",
        status="approved",
        expiresAt=STAMP,
        reason=None,
        editedArgs=None,
        decidedBy={"kind": "operator"},
    ),
    # Identity first: the Orchestrator's own events used to write it after other fields.
    line(
        "approval.refused",
        agentName="orchestrator",
        instanceKey=None,
        traceId=None,
        approvalId="apr-1",
        toolName=None,
        reason="an agent",
        decidedBy={"kind": "agent"},
    ),
    line(
        "budget.exceeded",
        **TRACE,
        turnId="turn-1",
        budget="turn",
        figure="totalTokens",
        used=1210,
        limit=1000,
    ),
    line(
        "budget.exceeded",
        agentName="a",
        instanceKey="default",
        traceId="t",
        budget="trace",
        root="a",
        figure="cost",
        used=0.5,
        limit=1.0,
        reserved=0.25,
        needed=0.5,
    ),
    line(
        "delivery.lost",
        agentName="w",
        instanceKey="default",
        traceId=None,
        eventId="e-1",
        sender="a",
        senderInstanceKey=None,
        started=False,
        attempts=2,
        error={"code": "E_AGENT_CRASHED", "message": "gone"},
    ),
    line("inbox.overflow", agentName="w", instanceKey="default", kind="send", code="E_INBOX_FULL"),
    line("request.cancelled", agentName="orchestrator", traceId="t", reason="operator"),
    line(
        "model.permit.waiting",
        agentName="a",
        instanceKey="default",
        traceId=None,
        pool="openai",
        reason="rpm",
        position=1,
        inUse=2,
    ),
    line(
        "model.permit.granted",
        agentName="a",
        instanceKey="default",
        traceId="t",
        pool="openai",
        reason=None,
        waitedMs=12,
    ),
    line(
        "model.permit.timeout",
        agentName="a",
        instanceKey="default",
        traceId="t",
        pool="openai",
        reason="rpm",
        waitedMs=5000,
    ),
    line(
        "model.rate_limited",
        agentName="a",
        instanceKey="default",
        traceId="t",
        pool="openai",
        retryAfterMs=None,
    ),
    line(
        "connector.event",
        agentName="a",
        instanceKey="default",
        traceId="t",
        connection="cli",
        event="message",
        rule=0,
    ),
    line("connection.recovered", agentName="connection:cli"),
    line("connection.failed", agentName="connection:cli", error="x", consecutiveFailures=3),
    line("connection.finished", agentName="connection:cli"),
    line(
        "network.connection",
        **TRACE,
        toolCallId="call-1",
        toolName="bash__exec",
        stepId="s-0",
        turnId="turn-1",
        protocol="connect",
        host="169.254.169.254",
        port=80,
        address=None,
        allowed=False,
        reason="169.254.169.254 is in 169.254.0.0/16, not the public internet",
        bytesUp=0,
        bytesDown=0,
        duration=0.0,
    ),
    line(
        "text.delta",
        agentName="a",
        instanceKey="default",
        traceId="t",
        turnId="turn-1",
        stepId="s-0",
        text="hel",
    ),
]


@pytest.mark.parametrize("data", LINES, ids=lambda data: str(data["type"]))
def test_every_line_reads_typed_and_writes_back_key_for_key(data: dict[str, object]) -> None:
    raw = json.dumps(data, separators=(",", ":")).encode()
    for event in (decode_line(raw), read_event(data)):
        assert not isinstance(event, RawEvent), event
        assert event is not None
        assert event.type == data["type"]
        written = json.loads(encode_event(event))
        assert written == data
        assert list(written) == list(data)  # the same keys in the same order
        assert event.to_builtins() == data


def test_the_enum_names_every_typed_event() -> None:
    typed = {str(data["type"]) for data in LINES}
    assert typed | {"stream.end", "agent.request", "agent.send", "approval.resume"} == {
        str(t) for t in EventType
    }


def first(event_type: str) -> dict[str, object]:
    return next(data for data in LINES if data["type"] == event_type)


def test_fields_read_typed() -> None:
    event = decode_line(json.dumps(first("step.completed")))
    assert isinstance(event, StepCompletedEvent)
    assert event.type is EventType.STEP_COMPLETED
    assert event.token_usage == TokenCounts(input_tokens=22, output_tokens=0, total_tokens=22)
    assert event.trace == TRACE["traceId"]
    assert event.parent_span == TRACE["parentSpanId"]
    assert given(event.error_code) is None
    exited = read_event(first("process.exited"))
    assert isinstance(exited, ProcessExitedEvent)
    assert exited.expected is True
    assert exited.signal is None
    assert exited.trace is None


def test_built_events_write_only_what_was_set() -> None:
    started = TurnStartedEvent(
        timestamp=STAMP, agent_name="a", instance_key="default", trace_id="t", turn_id="turn-1"
    )
    assert json.loads(encode_event(started)) == {
        "type": "turn.started",
        "timestamp": STAMP,
        "agentName": "a",
        "instanceKey": "default",
        "traceId": "t",
        "turnId": "turn-1",
    }
    failed = TurnFailedEvent(agent_name="a", error_code=None)
    assert json.loads(encode_event(failed)) == {
        "type": "turn.failed",
        "agentName": "a",
        "errorCode": None,
    }
    assert given(failed.error_message) is None
    assert failed.error_message is UNSET


def test_a_type_named_by_its_enum_member_reads_typed() -> None:
    data = {**first("budget.exceeded"), "type": EventType.BUDGET_EXCEEDED}
    event = read_event(data)
    assert not isinstance(event, RawEvent)
    assert json.loads(encode_event(event)) == first("budget.exceeded")


def test_a_newer_type_is_kept_whole() -> None:
    data = {"type": "turn.paused", "timestamp": STAMP, "agentName": "a", "traceId": "t", "x": [1]}
    for event in (decode_line(json.dumps(data)), read_event(data)):
        assert isinstance(event, RawEvent)
        assert event.type == "turn.paused"
        assert event.agent_name == "a"
        assert event.trace == "t"
        assert event.instance is None
        assert json.loads(encode_event(event)) == data


def test_a_known_type_with_a_field_it_does_not_know_is_kept_whole() -> None:
    data = {**first("tool.completed"), "newField": {"x": 1}}  # from a newer runtime
    event = decode_line(json.dumps(data))
    assert isinstance(event, RawEvent)
    assert json.loads(encode_event(event)) == data
    assert not isinstance(read_event(data), ToolCompletedEvent)


def test_a_known_type_with_a_field_of_another_type_is_kept_whole() -> None:
    data = {**first("step.completed"), "stepIndex": "zero"}
    event = read_event(data)
    assert isinstance(event, RawEvent)
    assert event.to_builtins() == data


@pytest.mark.parametrize("text", [b"[1, 2]", b'"turn.started"', b"{not json", b""])
def test_a_line_that_is_no_json_object_reads_as_nothing(text: bytes) -> None:
    assert decode_line(text) is None


def test_figures_keep_their_number_type() -> None:
    data = first("budget.exceeded")  # integer figures
    event = read_event(data)
    assert json.loads(encode_event(event)) == data
    assert b'"used":1210,' in encode_event(event)


def test_the_tag_is_the_enum_value() -> None:
    assert msgspec.json.encode(StepCompletedEvent()).startswith(b'{"type":"step.completed"')


def test_every_tagged_event_struct_is_read_typed() -> None:
    """A struct given a tag but left out of ``TypedEvent`` would be read back as a RawEvent."""

    types = {member.value for member in EventType}

    def tagged(cls: type[RuntimeEvent]) -> set[type[RuntimeEvent]]:
        # a family's base has its class name as msgspec's tag, no event type
        found = {cls} if cls.__struct_config__.tag in types else set()
        for sub in cls.__subclasses__():
            found |= tagged(sub)
        return found

    structs = tagged(RuntimeEvent)
    assert len(structs) > 40
    assert structs == set(TypedEvent.__args__)
    for cls in structs:
        assert cls.type == cls.__struct_config__.tag
        event = read_event({"type": cls.type})
        assert type(event) is cls
