"""The span exporter process (:func:`main`): the OpenTelemetry SDK's side of span export (the
``otel`` extra), started by the daemon only when an endpoint is configured.

It reads its setup, then batches of finished spans, from its standard input (length-prefixed
frames, see :class:`orchestrator.telemetry.ExporterProcess`), sends each batch with the SDK's
OTLP/HTTP exporter and answers on its standard output with what became of it. It leaves when
its input closes. Spans are built as the SDK's ``ReadableSpan`` directly rather than through a
``Tracer``: their ids and times were chosen by the agents when the work happened.
"""

from __future__ import annotations

import logging
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import IO

import msgspec
import structlog
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from orchestrator.telemetry import (
    DEFAULT_SERVICE_NAME,
    READY_FRAME,
    ExportOutcome,
    SpanData,
    build_span,
    decode_batch,
    read_frame,
    write_frame,
)

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class _Problems(logging.Handler):
    """Keeps, per thread, the warnings the SDK logs during one export: why it failed, for the
    one structured line this runtime logs per outage (the SDK's own lines, one or more per
    failed batch, go nowhere)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is no reason at all
            return
        messages: list[str] = getattr(self.seen, "messages", [])
        if message not in messages and len(messages) < 4:
            messages.append(message)
        self.seen.messages = messages

    def take(self) -> str | None:
        """What was logged since the last call (``None``: nothing), and forget it."""
        messages: list[str] = getattr(self.seen, "messages", [])
        self.seen.messages = []
        return " / ".join(messages) or None


_PROBLEMS = _Problems()
_SDK_LOGGER = logging.getLogger("opentelemetry")
if _PROBLEMS not in _SDK_LOGGER.handlers:
    _SDK_LOGGER.addHandler(_PROBLEMS)
    # Nothing of the SDK's reaches stderr unstructured (Python's last-resort handler).
    _SDK_LOGGER.propagate = False


def resource_of(swarm: str) -> Resource:
    """``service.name`` (``OTEL_SERVICE_NAME``, else ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES``, else ``goondan``), ``goondan.swarm``, and the SDK's own
    attributes."""
    resource = Resource.create({"goondan.swarm": swarm})
    name = resource.attributes.get(SERVICE_NAME)
    if not isinstance(name, str) or name.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def _scope() -> InstrumentationScope:
    try:
        own = version("goondan")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree, not installed
        own = None
    return InstrumentationScope("goondan.orchestrator", own)


class OtlpSink:
    """Sends spans with the SDK's OTLP/HTTP exporter (protobuf), which reads the standard
    variables for what the settings leave out: ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``,
    ``…_TIMEOUT`` (10 s), ``…_COMPRESSION``, ``…_CERTIFICATE`` and the client key pair."""

    def __init__(self, endpoint: str, *, swarm: str) -> None:
        self._exporter = OTLPSpanExporter(endpoint=endpoint)
        self._resource = resource_of(swarm)
        self._scope = _scope()

    def export(self, spans: Sequence[SpanData]) -> str | None:
        """Send ``spans``; ``None`` once the collector took them, else why not."""
        _PROBLEMS.take()
        try:
            result = self._exporter.export([self._readable(span) for span in spans])
        except Exception as exc:  # the exporter catches its own; anything else is a failure
            return f"{type(exc).__name__}: {exc}"
        if result is SpanExportResult.SUCCESS:
            return None
        return _PROBLEMS.take() or "the exporter reported a failure"

    def shutdown(self) -> None:
        """Stop the exporter: a retry it waits to make gives up at once."""
        stop: Callable[[], object] = self._exporter.shutdown  # untyped in the SDK
        try:
            stop()
        except Exception:  # stopping must not fail the daemon's shutdown
            return

    def _readable(self, span: SpanData) -> ReadableSpan:
        context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=_SAMPLED)
        parent = (
            SpanContext(span.trace_id, span.parent_span_id, is_remote=False, trace_flags=_SAMPLED)
            if span.parent_span_id is not None
            else None
        )
        status = (
            Status(StatusCode.ERROR, span.error)
            if span.error is not None
            else Status(StatusCode.UNSET)
        )
        links = [
            Link(SpanContext(link.trace_id, link.span_id, False, _SAMPLED), link.attributes)
            for link in span.links
        ]
        return ReadableSpan(
            name=span.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=span.attributes,
            kind=_KINDS[span.kind],
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            links=links,
            instrumentation_scope=self._scope,
        )


class _Setup(msgspec.Struct):
    endpoint: str
    swarm: str


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Read the setup, then answer every batch, until ``requests`` ends.

    A thread sends; this one only reads, so the end of the input is seen at once, even while
    a batch is being sent to a collector that does not answer: the daemon closes it when it
    needs nothing more (or is gone, killed), and this process then ends without waiting.
    """
    setup_frame = read_frame(requests)
    if setup_frame is None:
        return
    setup = msgspec.json.decode(setup_frame, type=_Setup)
    sink = OtlpSink(setup.endpoint, swarm=setup.swarm)
    write_frame(answers, READY_FRAME)
    batches: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def send() -> None:
        while True:
            frame = batches.get()
            try:
                write_frame(answers, msgspec.json.encode(_export(sink, frame)))
            except (OSError, ValueError):  # the daemon stopped listening
                return

    threading.Thread(target=send, name="goondan-otlp-send", daemon=True).start()
    try:
        while (frame := read_frame(requests)) is not None:
            batches.put(frame)
    finally:
        sink.shutdown()  # a retry waiting to happen gives up at once


def _export(sink: OtlpSink, frame: bytes) -> ExportOutcome:
    spans: list[SpanData] = []
    invalid = 0
    try:
        batch = decode_batch(frame)
    except (msgspec.DecodeError, TypeError, ValueError):
        return ExportOutcome(0, 0, "a batch the exporter process could not read")
    for finished in batch:
        try:
            span = build_span(finished)
        except Exception:  # an event of an unexpected shape costs its span, nothing more
            span = None
        if span is None:
            invalid += 1
        else:
            spans.append(span)
    if not spans:
        return ExportOutcome(0, invalid)
    problem = sink.export(spans)
    return ExportOutcome(len(spans) if problem is None else 0, invalid, problem)


def main() -> int:
    """The exporter process: structured logs on stderr, signals left to the daemon."""
    from ipc.logs import configure_logging

    # Ctrl-C reaches the whole process group and systemd may signal every process of the
    # unit: the daemon decides when this process stops (by closing its input).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    configure_logging(process="otlp-exporter")
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # standard output carries answers only
    try:
        serve(requests, answers)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    except Exception:
        structlog.get_logger("goondan.otlp").exception("span exporter process failed")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
