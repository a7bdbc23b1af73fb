"""The OpenTelemetry SDK's side of span export (the ``otel`` extra): spans out over OTLP/HTTP.

Imported by :class:`orchestrator.telemetry.TraceExport` only when an endpoint is configured.
Spans are built as the SDK's ``ReadableSpan`` directly rather than through a ``Tracer``: their
ids and times were chosen by the agents when the work happened, not generated now.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from orchestrator.telemetry import DEFAULT_SERVICE_NAME, SpanData

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
            instrumentation_scope=self._scope,
        )
