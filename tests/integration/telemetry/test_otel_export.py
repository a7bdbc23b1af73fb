"""OpenTelemetry export of a real daemon, received by a real OTLP/HTTP server in the test.

The daemon runs the offline example (coordinator hands ``write FILE TEXT`` to worker); what
reaches the receiver is decoded with the official protobuf messages and compared with the
daemon's own event log, which ``logs --trace ID`` shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.daemon import Daemon, run_cli, wait_gone
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
SPANS_PER_HANDOFF = 8
"""Two Turns, two Steps each, a tool call in each first Step."""
CLOSE_BOUND = 2.0
"""How long closing the export may take at most (``telemetry.SHUTDOWN_SECONDS``)."""
STOP_ALLOWANCE = 6.0
"""What a daemon's stop may take besides, on a busy machine (its agents drain, exit)."""
UNSET, ERROR = 0, 2
INTERNAL, CLIENT = 1, 3
FAST = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
"""Batches leave within 50 ms instead of the SDK's 5 s."""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as server:
        yield server


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    return tmp_path


def started(directory: Path, *, args: list[str], env: dict[str, str]) -> Daemon:
    daemon = Daemon(directory, bundle="goondan.yaml", args=args, env=env)
    try:
        daemon.wait_for("orchestrator started")
    except BaseException:
        daemon.stop()
        raise
    return daemon


def stopped(daemon: Daemon) -> tuple[float, list[dict[str, Any]]]:
    """SIGTERM, then the seconds until it exited and its whole log."""
    began = time.monotonic()
    daemon.process.send_signal(signal.SIGTERM)
    daemon.process.wait(timeout=60)
    took = time.monotonic() - began
    daemon.read_to_end()
    return took, daemon.events


def nanoseconds(stamp: str) -> int:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def traced_events(directory: Path, trace: str) -> list[dict[str, Any]]:
    """The event log's view of one trace, as ``logs --trace`` prints it."""
    done = run_cli("logs", "goondan.yaml", "--trace", trace, "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def last_trace(directory: Path) -> str:
    lines = (directory / ".goondan" / "runtime-events.jsonl").read_text().splitlines()
    starts = [json.loads(line) for line in lines if '"turn.started"' in line]
    return str(next(e for e in reversed(starts) if e["agentName"] == "coordinator")["traceId"])


def scrape(directory: Path) -> str:
    transport = httpx2.HTTPTransport(uds=str(directory / ".goondan" / "api.sock"))
    with httpx2.Client(transport=transport, base_url="http://goondan", timeout=30) as http:
        answer = http.get("/metrics")
    assert answer.status_code == 200
    return answer.text


def sample(metrics: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (re.escape("{" + labels + "}") if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", metrics, re.MULTILINE)
    assert found, f"{name}{{{labels}}} not in /metrics"
    return float(found.group(1))


def of_trace(trace: str, count: int = SPANS_PER_HANDOFF) -> Any:
    return lambda spans: sum(1 for s in spans if s.trace_id == trace) >= count


def lines(events: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == event and e.get("process") == "orchestrator"]


def test_a_handoff_arrives_as_one_trace_with_the_runtimes_ids_and_times(
    bundle: Path, receiver: OtlpReceiver
) -> None:
    daemon = started(bundle, args=["--otlp-endpoint", receiver.url], env=FAST)
    try:
        sent = run_cli("send", "coordinator", "write notes.txt hi", "--json", cwd=bundle)
        assert sent.returncode == 0, sent.stderr
        trace = json.loads(sent.stdout)["turn"]["traceId"]
        spans = [s for s in receiver.wait_for(of_trace(trace)) if s.trace_id == trace]
        events = traced_events(bundle, trace)

        assert len(spans) == SPANS_PER_HANDOFF
        by_id = {s.span_id: s for s in spans}
        starts = {e["spanId"]: e for e in events if e["type"].endswith((".started", ".called"))}
        ends = {e["spanId"]: e for e in events if e["type"].endswith(".completed")}
        assert set(by_id) == set(starts) == set(ends)

        def the(agent: str, kind: str, **fields: Any) -> ReceivedSpan:
            (event,) = [
                e
                for e in ends.values()
                if e["agentName"] == agent
                and e["type"] == f"{kind}.completed"
                and all(e.get(k) == v for k, v in fields.items())
            ]
            return by_id[event["spanId"]]

        coordinator = the("coordinator", "turn")
        asked = the("coordinator", "step", stepIndex=0)
        request = the("coordinator", "tool")
        answered = the("coordinator", "step", stepIndex=1)
        worker = the("worker", "turn")
        writing = the("worker", "step", stepIndex=0)
        write = the("worker", "tool")
        replying = the("worker", "step", stepIndex=1)

        # The tree: the worker's Turn under the coordinator's agents__request call.
        assert coordinator.parent_span_id == ""
        assert asked.parent_span_id == answered.parent_span_id == coordinator.span_id
        assert request.parent_span_id == asked.span_id
        assert worker.parent_span_id == request.span_id
        assert writing.parent_span_id == replying.parent_span_id == worker.span_id
        assert write.parent_span_id == writing.span_id

        # Names and kinds after the GenAI conventions.
        assert (coordinator.name, worker.name) == (
            "invoke_agent coordinator",
            "invoke_agent worker",
        )
        assert {s.name for s in (asked, answered, writing, replying)} == {"chat rules"}
        assert (request.name, write.name) == (
            "execute_tool agents__request",
            "execute_tool file-system__write",
        )
        assert {s.kind for s in (asked, answered, writing, replying)} == {CLIENT}
        assert {s.kind for s in (coordinator, worker, request, write)} == {INTERNAL}
        assert {s.status_code for s in spans} == {UNSET}

        # Times are the events' own.
        for span in spans:
            assert span.start_ns == nanoseconds(starts[span.span_id]["timestamp"])
            assert span.end_ns == nanoseconds(ends[span.span_id]["timestamp"])
            if span.parent_span_id:
                parent = by_id[span.parent_span_id]
                assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns

        # Attributes.
        for span in spans:
            event = ends[span.span_id]
            assert span.attributes["gen_ai.agent.name"] == event["agentName"]
            assert span.attributes["goondan.agent"] == event["agentName"]
            assert span.attributes["goondan.instance_key"] == "default"
            assert span.attributes["goondan.turn_id"] == event["turnId"]
        for turn in (coordinator, worker):
            assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
            assert turn.attributes["gen_ai.request.model"] == "rules"
            assert turn.attributes["gen_ai.provider.name"] == "scripted"
            assert turn.attributes["goondan.step_count"] == 2
        for step in (asked, answered, writing, replying):
            event = ends[step.span_id]
            assert step.attributes["gen_ai.operation.name"] == "chat"
            assert step.attributes["gen_ai.request.model"] == "rules"
            assert step.attributes["goondan.step_id"] == event["stepId"]
            assert step.attributes["goondan.step_index"] == event["stepIndex"]
        for tool in (request, write):
            event = ends[tool.span_id]
            assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
            assert tool.attributes["gen_ai.tool.name"] == event["toolName"]
            assert tool.attributes["gen_ai.tool.call.id"] == event["toolCallId"]
            assert tool.attributes["goondan.tool.status"] == "ok"
        # Token usage as the scripted provider reports it: the Step's and the Turn's sums.
        for span in (coordinator, worker, asked, answered, writing, replying):
            usage = ends[span.span_id]["tokenUsage"]
            assert span.attributes["gen_ai.usage.input_tokens"] == usage["promptTokens"]
            assert span.attributes["gen_ai.usage.output_tokens"] == usage["completionTokens"]
        assert writing.attributes["gen_ai.usage.output_tokens"] == 0  # a tool call, no text
        assert replying.attributes["gen_ai.usage.output_tokens"] > 0  # "wrote 2 bytes to ..."
        assert worker.attributes["gen_ai.usage.input_tokens"] == (
            writing.attributes["gen_ai.usage.input_tokens"]
            + replying.attributes["gen_ai.usage.input_tokens"]
        )
        assert {s.resource["service.name"] for s in spans} == {"goondan"}
        assert {s.resource["goondan.swarm"] for s in spans} == {"default"}
        assert {s.scope for s in spans} == {"goondan.orchestrator"}

        # A request that fails: the tool's error and the Turns' failures are error spans.
        failed = run_cli("send", "coordinator", "write ../../../escape.txt hi", cwd=bundle)
        assert failed.returncode == 1
        second = last_trace(bundle)
        assert second != trace
        spans = [s for s in receiver.wait_for(of_trace(second)) if s.trace_id == second]
        events = {e["spanId"]: e for e in traced_events(bundle, second)}
        named = {(s.attributes["goondan.agent"], s.name): s for s in spans if s.kind != CLIENT}
        refused = named[("worker", "execute_tool file-system__write")]
        assert refused.status_code == ERROR
        assert "outside the workdir" in refused.status_message
        assert refused.attributes["error.type"] == "E_FS_PATH_OUTSIDE_WORKDIR"
        assert refused.attributes["goondan.tool.status"] == "error"
        for agent in ("worker", "coordinator"):
            turn = named[(agent, f"invoke_agent {agent}")]
            event = events[turn.span_id]
            assert event["type"] == "turn.failed"
            assert turn.status_code == ERROR
            assert turn.status_message == event["errorMessage"]
            assert turn.attributes["error.type"] == event["errorCode"] == "E_MODEL_SCRIPT_TEMPLATE"
        failed_steps = [s for s in spans if events[s.span_id]["type"] == "step.failed"]
        assert len(failed_steps) == 2
        assert {s.status_code for s in failed_steps} == {ERROR}

        metrics = scrape(bundle)
        # The first request's batch was counted long ago; the second's maybe not yet.
        assert sample(metrics, "goondan_otel_spans_exported_total") >= SPANS_PER_HANDOFF
        for reason in ("queue_full", "export_failed", "shutdown", "never_ended", "invalid"):
            assert sample(metrics, "goondan_otel_spans_dropped_total", f'reason="{reason}"') == 0
        took, log = stopped(daemon)
    finally:
        daemon.stop()
    assert took < CLOSE_BOUND + STOP_ALLOWANCE
    (summary,) = lines(log, "span export stopped")
    assert (summary["exported"], summary["dropped"]) == (2 * SPANS_PER_HANDOFF, {})


def test_the_wait_for_an_operators_approval_is_a_span_of_its_own(
    bundle: Path, receiver: OtlpReceiver
) -> None:
    """The example's worker parks every ``bash__exec`` call until an operator approves it."""
    daemon = started(bundle, args=["--otlp-endpoint", receiver.url], env=FAST)
    send: subprocess.Popen[str] | None = None
    try:
        send = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "send", "worker", "run echo approved", "--json"],
            cwd=bundle,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waiting = daemon.wait_for("tool call waits for approval", process="agent:worker")
        approved = run_cli("approve", str(waiting["approval_id"]), cwd=bundle)
        assert approved.returncode == 0, approved.stderr
        answer, complaint = send.communicate(timeout=60)
        assert send.returncode == 0, complaint
        trace = json.loads(answer)["turn"]["traceId"]
        spans = {s.span_id: s for s in receiver.wait_for(of_trace(trace, 5)) if s.trace_id == trace}
    finally:
        if send is not None and send.poll() is None:
            send.kill()
            send.wait()
        daemon.stop()
    events = traced_events(bundle, trace)
    requested = next(e for e in events if e["type"] == "approval.requested")
    decided = next(e for e in events if e["type"] == "approval.decided")
    called = next(e for e in events if e["type"] == "tool.called")
    assert len(spans) == 5  # the Turn, two Steps, the wait, the call
    wait = spans[requested["spanId"]]
    assert wait.name == "await_approval bash__exec"
    assert wait.parent_span_id == requested["parentSpanId"] == called["parentSpanId"]
    assert (wait.start_ns, wait.end_ns) == (
        nanoseconds(requested["timestamp"]),
        nanoseconds(decided["timestamp"]),
    )
    assert wait.status_code == UNSET
    assert wait.attributes["goondan.approval.id"] == waiting["approval_id"]
    assert wait.attributes["goondan.approval.status"] == "approved"
    assert wait.attributes["gen_ai.tool.call.id"] == called["toolCallId"]
    run = spans[called["spanId"]]
    assert run.name == "execute_tool bash__exec"
    assert run.start_ns >= wait.end_ns


def test_the_standard_variables_configure_it_and_a_last_batch_leaves_at_exit(
    bundle: Path, receiver: OtlpReceiver
) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` appended), headers and service name; a
    one-shot run exits before the 5 s schedule, so its spans leave in the closing flush."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url + "/",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=acme-7f3c",
        "OTEL_SERVICE_NAME": "notes-swarm",
    }
    done = run_cli(
        "run",
        "goondan.yaml",
        "--input",
        "write a.txt hi",
        "--json",
        cwd=bundle,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["traceId"]
    spans = receiver.wait_for(of_trace(trace), timeout=30)
    assert len(spans) == SPANS_PER_HANDOFF
    assert {s.resource["service.name"] for s in spans} == {"notes-swarm"}
    assert {r.get("x-tenant") for r in receiver.requests} == {"acme-7f3c"}
    assert "acme-7f3c" not in done.stderr  # headers may hold credentials: never logged
    (line,) = [json.loads(x) for x in done.stderr.splitlines() if "span export stopped" in x]
    assert line["exported"] == SPANS_PER_HANDOFF


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_collector_that_is_not_there_costs_neither_answers_nor_the_stop(bundle: Path) -> None:
    """Nothing listens on the port: the exporter retries (with a 30 s export timeout, for up
    to 30 s), yet requests are answered as usual and the daemon stops within the bound."""
    env = {**FAST, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "30"}
    endpoint = f"http://127.0.0.1:{closed_port()}"
    daemon = started(bundle, args=["--otlp-endpoint", endpoint], env=env)
    try:
        began = time.monotonic()
        sent = run_cli("send", "coordinator", "write notes.txt hi", cwd=bundle)
        assert (sent.returncode, sent.stdout.strip()) == (
            0,
            "Done. The worker reports: wrote 2 bytes to notes.txt",
        ), sent.stderr
        assert time.monotonic() - began < 20
        metrics = scrape(bundle)
        assert sample(metrics, "goondan_otel_spans_exported_total") == 0
        exporter = exporter_pid(daemon)
        took, log = stopped(daemon)
    finally:
        daemon.stop()
    assert took < CLOSE_BOUND + STOP_ALLOWANCE
    assert wait_gone(exporter, 5)
    (summary,) = lines(log, "span export stopped")
    assert summary["exported"] == 0
    assert sum(summary["dropped"].values()) == SPANS_PER_HANDOFF
    assert lines(log, "orchestrator stopped")


def test_the_exporter_process_does_not_outlive_a_killed_daemon(
    bundle: Path, receiver: OtlpReceiver
) -> None:
    """Its request held by the collector, the exporter process still ends as soon as the
    daemon is gone (SIGKILL: nothing closes anything on purpose)."""
    receiver.hold.clear()
    daemon = started(bundle, args=["--otlp-endpoint", receiver.url], env=FAST)
    try:
        exporter = exporter_pid(daemon)
        sent = run_cli("send", "coordinator", "write notes.txt hi", cwd=bundle)
        assert sent.returncode == 0, sent.stderr
        assert receiver.held.wait(10)  # a batch is in the collector's hands, unanswered
        os.kill(daemon.process.pid, signal.SIGKILL)
        assert wait_gone(exporter, 5)
    finally:
        daemon.stop()
        receiver.hold.set()


def exporter_pid(daemon: Daemon) -> int:
    (spawned,) = lines(daemon.events, "span exporter process started")
    return int(spawned["pid"])


def test_export_failures_are_counted_and_logged_once(bundle: Path) -> None:
    """Each export fails at once (a short timeout leaves no time to retry): every span is
    counted, and one warning covers the whole outage."""
    env = {**FAST, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "0.3"}
    endpoint = f"http://127.0.0.1:{closed_port()}"
    daemon = started(bundle, args=["--otlp-endpoint", endpoint], env=env)
    try:
        for name in ("a.txt", "b.txt", "c.txt"):
            sent = run_cli("send", "coordinator", f"write {name} hi", cwd=bundle)
            assert sent.returncode == 0, sent.stderr
        daemon.wait_for("span export failing: spans are dropped until the collector takes them")
        took, log = stopped(daemon)
    finally:
        daemon.stop()
    assert took < CLOSE_BOUND + STOP_ALLOWANCE
    (warning,) = lines(log, "span export failing: spans are dropped until the collector takes them")
    assert warning["level"] == "warning"
    assert "Failed to export" in warning["reason"]  # the exporter's own words, kept
    (summary,) = lines(log, "span export stopped")
    assert summary["exported"] == 0
    assert summary["dropped"]["export_failed"] >= 1
    assert sum(summary["dropped"].values()) == 3 * SPANS_PER_HANDOFF
    # The SDK's own per-batch complaints do not reach stderr unstructured.
    assert all(line.startswith(b"{") for line in daemon.log.splitlines() if line.strip())


def test_a_full_queue_drops_the_oldest_counts_them_and_says_so_once(
    bundle: Path, receiver: OtlpReceiver
) -> None:
    """The collector takes the first request and never answers: one span is in flight, four
    wait (the queue's size), the other eleven of two handoffs are dropped and counted."""
    receiver.hold.clear()
    env = {
        **FAST,
        "OTEL_BSP_MAX_QUEUE_SIZE": "4",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
    }
    daemon = started(bundle, args=["--otlp-endpoint", receiver.url], env=env)
    try:
        for name in ("a.txt", "b.txt"):
            began = time.monotonic()
            sent = run_cli("send", "coordinator", f"write {name} hi", cwd=bundle)
            assert sent.returncode == 0, sent.stderr
            assert time.monotonic() - began < 20
        assert receiver.held.wait(10)
        metrics = scrape(bundle)
        dropped = sample(metrics, "goondan_otel_spans_dropped_total", 'reason="queue_full"')
        assert dropped == 2 * SPANS_PER_HANDOFF - 1 - 4
        assert sample(metrics, "goondan_otel_spans_queued") == 4
        assert sample(metrics, "goondan_otel_spans_exported_total") == 0
        took, log = stopped(daemon)
    finally:
        daemon.stop()
        receiver.hold.set()
    assert took < CLOSE_BOUND + STOP_ALLOWANCE
    (warning,) = lines(log, "span export queue full: dropping the oldest spans")
    assert warning["max_queue_size"] == 4
    (summary,) = lines(log, "span export stopped")
    assert summary["dropped"] == {"queue_full": 11, "shutdown": 5}


def without_otel_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def otel_imports(stderr: str) -> set[str]:
    """The OpenTelemetry modules ``PYTHONPROFILEIMPORTTIME`` saw imported, in any process of
    the run (the variable reaches every process the daemon starts)."""
    found = re.findall(r"^import time:.*\|\s*(opentelemetry[\w.]*)\s*$", stderr, re.MULTILINE)
    return set(found)


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported(bundle: Path) -> None:
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "run",
                "goondan.yaml",
                "--input",
                "write a.txt hi",
                *extra,
            ],
            cwd=bundle,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**without_otel_variables(), "PYTHONPROFILEIMPORTTIME": "1"},
        )

    plain = run()
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "import time:" in plain.stderr
    assert otel_imports(plain.stderr) == set()
    # The same count with an endpoint sees them (in the exporter process): it can fail.
    exporting = run("--otlp-endpoint", f"http://127.0.0.1:{closed_port()}")
    assert exporting.returncode == 0, exporting.stderr[-2000:]
    assert "opentelemetry.sdk.trace" in otel_imports(exporting.stderr)


BLOCK_OTEL = (
    "import sys; sys.modules['opentelemetry'] = None; "
    "from orchestrator.cli import main; sys.exit(main(sys.argv[1:]))"
)
"""``python -c`` running the CLI as if the ``otel`` extra were not installed."""
WITHOUT_OTEL = (sys.executable, "-c", BLOCK_OTEL)


def test_without_the_extra_the_flag_stops_the_start_and_a_variable_only_warns(
    bundle: Path,
) -> None:
    def run(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*WITHOUT_OTEL, "run", "goondan.yaml", "--input", "write a.txt hi", *extra],
            cwd=bundle,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**without_otel_variables(), **env},
        )

    refused = run({}, "--otlp-endpoint", "http://127.0.0.1:4318")
    assert refused.returncode == 3  # the configuration asks for what is not installed
    assert (
        "--otlp-endpoint needs the `otel` extra: pip install 'goondan-py[otel]'" in refused.stderr
    )
    # Set for other programs, perhaps: the swarm runs, and says why nothing is exported.
    warned = run({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert warned.returncode == 0, warned.stderr[-2000:]
    (line,) = [json.loads(x) for x in warned.stderr.splitlines() if "spans are not exported" in x]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT needs the `otel` extra" in line["reason"]
