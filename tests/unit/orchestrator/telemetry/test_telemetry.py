"""From runtime events to spans: the settings, the pairing of start and end events, and what
becomes of spans whose start or end never comes."""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ipc.runtime_events import read_event
from orchestrator import telemetry
from orchestrator.telemetry import (
    DROP_REASONS,
    SHUTDOWN_SECONDS,
    STARTUP_SECONDS,
    ExporterProcess,
    ExportOutcome,
    FinishedSpan,
    SpanAssembler,
    SpanData,
    TelemetryUnavailable,
    TraceExport,
    build_span,
    decode_batch,
    encode_batch,
    otlp_settings,
    read_frame,
    redacted,
    write_frame,
)

TRACE = "4de2e69222be64696d7a1756bb520517"
TURN, STEP, TOOL, CALLER = (
    "b72080c8949f655a",
    "3ebc0435ea5987d6",
    "985cfea1041601d6",
    "52ce1f2e81b694c3",
)


def event(kind: str, span: str, parent: str | None, stamp: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind,
        "timestamp": f"2026-11-23T17:57:{stamp}Z",
        "agentName": "worker",
        "instanceKey": "u42",
        "traceId": TRACE,
        "spanId": span,
        "turnId": "turn-a77f3441a011",
    }
    if parent:
        out["parentSpanId"] = parent
    out.update(fields)
    return out


def nanos(stamp: str) -> int:
    moment = datetime.fromisoformat(f"2026-11-23T17:57:{stamp}+00:00")
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


class Spans:
    """An assembler and the spans it finished, built as the export thread builds them."""

    def __init__(self, max_open: int = 100) -> None:
        self.finished: list[FinishedSpan] = []
        self.forgotten = 0
        self.assembler = SpanAssembler(
            self.finished.append,
            model_of=lambda agent: ("openai", "gpt-4o-mini") if agent == "worker" else None,
            on_forgotten=self._forgot,
            max_open=max_open,
        )

    def _forgot(self) -> None:
        self.forgotten += 1

    def feed(self, *events: dict[str, Any]) -> None:
        for one in events:
            self.assembler.observe(read_event(one))

    def built(self) -> dict[int, SpanData]:
        spans = [build_span(f) for f in self.finished]
        return {s.span_id: s for s in spans if s is not None}


# --- settings -----------------------------------------------------------------------------


def test_no_flag_and_no_variable_is_no_export() -> None:
    assert otlp_settings(None, {}) is None
    assert otlp_settings(None, {"OTEL_SERVICE_NAME": "x"}) is None


def test_the_flag_is_a_base_url_and_wins_over_the_variables() -> None:
    environ = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/v1/traces"}
    settings = otlp_settings("http://127.0.0.1:4318", environ)
    assert settings is not None
    assert (settings.endpoint, settings.source) == (
        "http://127.0.0.1:4318/v1/traces",
        "--otlp-endpoint",
    )
    assert settings.from_flag
    # Already a traces URL: kept as it is.
    again = otlp_settings("https://collector.example/v1/traces", {})
    assert again is not None
    assert again.endpoint == "https://collector.example/v1/traces"


def test_the_variables_are_read_as_the_sdk_reads_them() -> None:
    base = otlp_settings(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert base is not None
    assert (base.endpoint, base.source) == (
        "http://c:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    )
    assert not base.from_flag
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9999/custom",
    }
    traces = otlp_settings(None, both)
    assert traces is not None
    assert traces.endpoint == "http://t:9999/custom"
    assert otlp_settings(None, {**both, "OTEL_SDK_DISABLED": "true"}) is None
    assert otlp_settings(None, {**both, "OTEL_TRACES_EXPORTER": "none"}) is None


def test_batching_follows_the_bsp_variables() -> None:
    environ = {
        "OTEL_BSP_MAX_QUEUE_SIZE": "64",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "512",
        "OTEL_BSP_SCHEDULE_DELAY": "250",
    }
    settings = otlp_settings("http://c:4318", environ)
    assert settings is not None
    assert (settings.max_queue_size, settings.max_export_batch_size) == (64, 64)
    assert settings.schedule_delay == 0.25


@pytest.mark.parametrize(
    ("flag", "environ"),
    [
        ("127.0.0.1:4318", {}),
        ("grpc://c:4317", {}),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4318"}),
        ("http://c:4318", {"OTEL_BSP_MAX_QUEUE_SIZE": "0"}),
        ("http://c:4318", {"OTEL_BSP_SCHEDULE_DELAY": "soon"}),
    ],
)
def test_an_unusable_setting_is_refused_with_its_name(
    flag: str | None, environ: dict[str, str]
) -> None:
    with pytest.raises(TelemetryUnavailable) as refused:
        otlp_settings(flag, environ)
    assert any(name in str(refused.value) for name in ("--otlp-endpoint", *environ))


def test_an_endpoint_is_logged_without_its_credentials() -> None:
    assert redacted("https://user:s3cret@c.example:4318/v1/traces?key=abc") == (
        "https://c.example:4318/v1/traces"
    )


# --- events to spans ----------------------------------------------------------------------


def test_a_turn_its_step_and_its_tool_call() -> None:
    spans = Spans()
    spans.feed(
        event("turn.started", TURN, CALLER, "09.745"),
        event("step.started", STEP, TURN, "09.746", stepId="s0", stepIndex=0),
        event("tool.called", TOOL, STEP, "09.751", toolName="file-system__write", toolCallId="c1"),
        event(
            "tool.completed",
            TOOL,
            STEP,
            "09.754",
            toolName="file-system__write",
            toolCallId="c1",
            status="ok",
            duration=2.589,
        ),
        event(
            "step.completed",
            STEP,
            TURN,
            "09.755",
            stepId="s0",
            stepIndex=0,
            toolCallCount=1,
            tokenUsage={"promptTokens": 17, "completionTokens": 0, "totalTokens": 17},
        ),
        event(
            "turn.completed",
            TURN,
            CALLER,
            "09.757",
            stepCount=1,
            duration=9.759,
            tokenUsage={
                "promptTokens": 17,
                "completionTokens": 0,
                "totalTokens": 17,
                "cost": 4e-05,
            },
        ),
    )
    built = spans.built()
    assert len(spans.assembler) == 0
    turn, step, tool = built[int(TURN, 16)], built[int(STEP, 16)], built[int(TOOL, 16)]
    assert (turn.name, step.name, tool.name) == (
        "invoke_agent worker",
        "chat gpt-4o-mini",
        "execute_tool file-system__write",
    )
    assert (turn.kind, step.kind, tool.kind) == ("internal", "client", "internal")
    assert turn.trace_id == int(TRACE, 16)
    assert (turn.parent_span_id, step.parent_span_id, tool.parent_span_id) == (
        int(CALLER, 16),
        int(TURN, 16),
        int(STEP, 16),
    )
    assert (turn.start_ns, turn.end_ns) == (nanos("09.745"), nanos("09.757"))
    assert step.attributes["gen_ai.provider.name"] == "openai"
    assert step.attributes["gen_ai.usage.input_tokens"] == 17
    assert turn.attributes["goondan.usage.cost"] == 4e-05
    assert "goondan.usage.cost" not in step.attributes  # unpriced: no figure at all
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert "gen_ai.request.model" not in tool.attributes
    assert {s.error for s in built.values()} == {None}
    assert not any("goondan.span.start_estimated" in s.attributes for s in built.values())


def test_an_end_without_its_start_is_timed_back_from_its_duration() -> None:
    """A daemon that took over mid-Turn sees the end only: the ids are all there."""
    spans = Spans()
    spans.feed(
        event(
            "turn.failed",
            TURN,
            CALLER,
            "09.757",
            duration=250.5,
            errorCode="E_MODEL",
            errorMessage="the provider failed",
        )
    )
    (turn,) = spans.built().values()
    assert turn.end_ns == nanos("09.757")
    assert turn.start_ns == nanos("09.757") - 250_500_000
    assert turn.parent_span_id == int(CALLER, 16)
    assert turn.attributes["goondan.span.start_estimated"] is True
    assert turn.attributes["error.type"] == "E_MODEL"
    assert turn.error == "the provider failed"


def test_what_a_turn_leaves_open_ends_with_it_as_incomplete() -> None:
    """A Step cut short (its Turn suspended for an approval) has no end event of its own."""
    spans = Spans()
    spans.feed(
        event("turn.started", TURN, None, "09.745"),
        event("step.started", STEP, TURN, "09.746", stepId="s0", stepIndex=0),
        event("tool.called", TOOL, STEP, "09.751", toolName="bash__exec", toolCallId="c1"),
        event(
            "turn.failed",
            TURN,
            None,
            "09.800",
            errorCode="SHUTTING_DOWN",
            errorMessage="waiting for approval",
        ),
    )
    built = spans.built()
    assert len(built) == 3
    assert len(spans.assembler) == 0
    # The innermost first, as they would have ended.
    assert [f.end["spanId"] for f in spans.finished] == [TURN, TOOL, STEP]
    for span_id in (STEP, TOOL):
        span = built[int(span_id, 16)]
        assert span.end_ns == nanos("09.800")
        assert span.error == "its Turn ended before it did"
        assert span.attributes["goondan.span.incomplete"] == "its Turn ended before it did"
        assert span.attributes["error.type"] == "incomplete"
    assert built[int(TURN, 16)].error == "waiting for approval"


def test_an_agents_exit_ends_its_open_spans() -> None:
    spans = Spans()
    spans.feed(
        event("turn.started", TURN, None, "09.745"),
        event("step.started", STEP, TURN, "09.746", stepId="s0", stepIndex=0),
        {**event("turn.started", CALLER, None, "09.747"), "agentName": "coordinator"},
        {
            "type": "process.exited",
            "timestamp": "2026-11-23T17:57:10.000Z",
            "agentName": "worker",
            "reason": "killed by SIGKILL",
        },
    )
    built = spans.built()
    assert set(built) == {int(TURN, 16), int(STEP, 16)}
    assert len(spans.assembler) == 1  # the coordinator's Turn goes on
    turn = built[int(TURN, 16)]
    assert turn.end_ns == nanos("10.000")
    assert turn.error is not None
    assert "killed by SIGKILL" in turn.error


def test_too_many_open_spans_forget_the_oldest() -> None:
    spans = Spans(max_open=2)
    spans.feed(
        event("turn.started", TURN, None, "09.745"),
        event("step.started", STEP, TURN, "09.746", stepId="s0", stepIndex=0),
        event("tool.called", TOOL, STEP, "09.747", toolName="t", toolCallId="c1"),
    )
    assert (spans.forgotten, len(spans.assembler)) == (1, 2)
    # The Turn forgotten, its end still makes a span (timed back from its duration).
    spans.feed(event("turn.completed", TURN, None, "09.800", duration=55.0))
    built = spans.built()
    assert built[int(TURN, 16)].attributes["goondan.span.start_estimated"] is True


@pytest.mark.parametrize(
    "broken",
    [
        {"traceId": "not-hex-not-hex-not-hex-not-hex!"},
        {"traceId": "00000000000000000000000000000000"},
        {"spanId": "short"},
        {"timestamp": "yesterday"},
        {"timestamp": "2026-11-23T17:57:09.757"},  # no zone
    ],
)
def test_events_without_usable_ids_or_times_make_no_span(broken: dict[str, Any]) -> None:
    finished = FinishedSpan(None, {**event("turn.completed", TURN, None, "09.757"), **broken}, None)
    assert build_span(finished) is None


# --- the exporter process's input -----------------------------------------------------------


class Unusual:
    def __str__(self) -> str:
        return "unusual"


def test_a_batch_crosses_the_pipe_unchanged() -> None:
    spans = Spans()
    spans.feed(
        event("turn.started", TURN, CALLER, "09.745"),
        event("turn.completed", TURN, CALLER, "09.757", stepCount=1, output={"odd": Unusual()}),
        event("step.started", STEP, TURN, "09.758", stepId="s0", stepIndex=0),
        {"type": "process.exited", "timestamp": "2026-11-23T17:57:10.000Z", "agentName": "worker"},
    )
    stream = io.BytesIO()
    write_frame(stream, encode_batch(spans.finished))
    stream.seek(0)
    frame = read_frame(stream)
    assert frame is not None
    (turn, step) = decode_batch(frame)
    assert turn.start == spans.finished[0].start
    assert turn.end["output"] == {"odd": "unusual"}  # what msgpack cannot hold, as text
    assert turn.model == ("openai", "gpt-4o-mini")
    assert (step.incomplete, step.end["timestamp"]) == (
        spans.finished[1].incomplete,
        "2026-11-23T17:57:10.000Z",
    )
    assert build_span(step) == build_span(spans.finished[1])
    assert read_frame(stream) is None  # the end


def test_a_resumed_attempt_links_to_the_one_its_agent_died_under_across_the_pipe() -> None:
    spans = Spans()
    resumed = {"attempt": 2, "requestId": "req_1", "resumedTurnId": "turn-1", "replayed": False}
    spans.feed(
        event("turn.started", STEP, CALLER, "09.745"),
        event("turn.resumed", STEP, CALLER, "09.746", **resumed, resumedSpanId=TURN),
        event("turn.completed", STEP, CALLER, "09.757", stepCount=1),
        event("turn.started", TOOL, CALLER, "09.760"),  # an attempt that resumed nothing
        event("turn.completed", TOOL, CALLER, "09.761", stepCount=1),
    )
    stream = io.BytesIO()
    write_frame(stream, encode_batch(spans.finished))
    stream.seek(0)
    frame = read_frame(stream)
    assert frame is not None
    second, fresh = (build_span(f) for f in decode_batch(frame))
    assert second is not None
    assert fresh is not None
    (link,) = second.links
    assert (link.trace_id, link.span_id) == (int(TRACE, 16), int(TURN, 16))
    assert link.attributes == {
        "goondan.link.type": "resumes",
        "goondan.turn.attempt": 2,
        "goondan.turn_id": "turn-1",
        "goondan.turn.replayed": False,
    }
    assert second.attributes["goondan.turn.attempt"] == 2
    assert fresh.links == ()
    assert "goondan.turn.attempt" not in fresh.attributes


def test_a_frame_cut_short_or_absurd_is_the_end_of_the_stream() -> None:
    stream = io.BytesIO()
    write_frame(stream, b"0123456789")
    assert read_frame(io.BytesIO(stream.getvalue()[:-1])) is None
    assert read_frame(io.BytesIO(stream.getvalue()[:3])) is None
    assert read_frame(io.BytesIO(b"\xff\xff\xff\xff" + b"x" * 16)) is None


def test_an_approval_that_expires_is_an_error_and_one_cut_short_ends_with_its_turn() -> None:
    fields = {"approvalId": "apr_1", "toolName": "bash__exec", "toolCallId": "c1"}
    spans = Spans()
    spans.feed(
        event("turn.started", TURN, None, "09.745"),
        event("step.started", STEP, TURN, "09.746", stepId="s0", stepIndex=0),
        event("approval.requested", TOOL, STEP, "09.747", status="pending", **fields),
        event("approval.expired", TOOL, STEP, "19.747", status="expired", **fields),
    )
    (expired,) = spans.built().values()
    assert expired.name == "await_approval bash__exec"
    assert expired.attributes["error.type"] == "E_TOOL_APPROVAL_TIMEOUT"
    assert expired.attributes["goondan.approval.status"] == "expired"
    assert expired.error == "nobody decided before the approval expired"
    assert expired.start_ns == nanos("09.747")
    # Parked again, and the agent stops: the Turn ends, and the wait with it.
    spans.feed(
        event("approval.requested", CALLER, STEP, "20.000", status="pending", **fields),
        event("turn.failed", TURN, None, "21.000", errorCode="SHUTTING_DOWN", errorMessage="x"),
    )
    cut = spans.built()[int(CALLER, 16)]
    assert cut.attributes["error.type"] == "incomplete"
    assert cut.end_ns == nanos("21.000")


class SlowStartingSink:
    """An exporter process still loading the SDK when closing begins (a loaded host)."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.sent: list[FinishedSpan] = []

    def start(self) -> None:
        pass

    def export(self, batch: Sequence[FinishedSpan]) -> ExportOutcome:
        assert self.ready.wait(30)
        self.sent.extend(batch)
        return ExportOutcome(len(batch))

    def shutdown(self, wait: float) -> None:
        pass

    def wait_started(self, timeout: float) -> bool:
        return self.ready.wait(timeout)


def test_closing_waits_for_an_exporter_still_starting_and_its_last_batch_leaves() -> None:
    """A one-shot run ends before its exporter process is up: the start is not counted
    against the collector, so the spans leave instead of being dropped (``shutdown``)."""
    sink = SlowStartingSink()
    export = TraceExport(otlp_settings("http://127.0.0.1:4318", environ={}), sink)
    export.start()
    export.observe(read_event(event("turn.started", TURN, CALLER, "09.000")))
    export.observe(read_event(event("turn.completed", TURN, CALLER, "09.500", duration=500.0)))
    # Started only once closing has used up its share for the collector.
    threading.Timer(SHUTDOWN_SECONDS + 0.5, sink.ready.set).start()
    export.close()
    assert [build_span(span).span_id for span in sink.sent] == [int(TURN, 16)]  # type: ignore[union-attr]
    assert export.counts.snapshot() == (1, dict.fromkeys(DROP_REASONS, 0))


def test_an_exporter_that_dies_before_it_is_ready_holds_nobody_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing waits for an exporter process still starting, but not for one already dead:
    its failed start ends the wait at once instead of after the whole start allowance."""
    monkeypatch.setattr(telemetry, "_BOOTSTRAP", "raise SystemExit(3)")
    sink = ExporterProcess("http://127.0.0.1:4318", swarm="default")
    sink.start()
    try:
        outcome = sink.export([])
        assert outcome.exported == 0
        assert outcome.problem is not None
        assert "exited" in outcome.problem
        answers: list[bool] = []
        waiter = threading.Thread(target=lambda: answers.append(sink.wait_started(600)))
        waiter.start()
        waiter.join(STARTUP_SECONDS * 3)  # a bound far past the allowance it must not use
        assert answers == [False]
    finally:
        sink.shutdown(1)
