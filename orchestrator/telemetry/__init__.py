"""OpenTelemetry export of every Turn, Step, tool call and approval wait, built from the
runtime events.

The Orchestrator already receives every runtime event, so spans are made here and agents never
talk to a collector. A Turn becomes an ``invoke_agent AGENT`` span, each of its Steps a
``chat MODEL`` span under it, each tool call an ``execute_tool TOOL`` span under its Step (and
a wait for an operator's approval an ``await_approval TOOL`` span beside it); a Turn asked for
by another agent's tool call hangs under that tool span. Trace and span ids are the
runtime's own (``traceId``, ``spanId``, ``parentSpanId`` of the events), so a trace in Jaeger
or Tempo is the trace ``logs --trace ID`` shows; times are the events' timestamps.

Exporting never costs the swarm anything it needs: the event loop only pairs each end event
with its start event and hands the pair to a bounded queue (the oldest dropped and counted when
it is full); a thread hands them in batches to the exporter process (:class:`ExporterProcess`),
which turns them into spans and sends them with the official OTLP/HTTP exporter, away from the
daemon's interpreter. An export that fails is counted and logged once per outage, and closing
waits at most :data:`SHUTDOWN_SECONDS` for what is still queued.

Spans whose start event was never seen (a leader that took over while agents ran, a daemon
restarted mid-Turn) are still exported: every end event carries the ids, and its ``duration``
gives the start (``goondan.span.start_estimated``). Spans whose end never comes are ended for
them, as errors marked ``goondan.span.incomplete``: by their Turn's end (a Step cut short), or
by their agent's exit (a crash mid-Turn).

Nothing here imports OpenTelemetry: :mod:`orchestrator.telemetry.otlp` (the ``otel`` extra) runs in the
exporter process, started only when an endpoint is configured.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol
from urllib.parse import urlsplit, urlunsplit

import msgspec
import structlog

from ipc.runtime_events import AnyEvent
from orchestrator.telemetry.spans import (
    MAX_OPEN_SPANS,
    AttributeValue,
    FinishedSpan,
    ModelOf,
    SpanAssembler,
    SpanData,
    SpanKindName,
    SpanLink,
    build_span,
)

__all__ = [
    "MAX_OPEN_SPANS",
    "AttributeValue",
    "FinishedSpan",
    "ModelOf",
    "SpanAssembler",
    "SpanData",
    "SpanKindName",
    "SpanLink",
    "build_span",
]

TRACES_PATH = "/v1/traces"
"""Appended to a base endpoint (``--otlp-endpoint``, ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
DEFAULT_SERVICE_NAME = "goondan"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) names one."""
SHUTDOWN_SECONDS = 2.0
"""The longest closing waits for queued spans to reach the collector; what is left is dropped."""
DEFAULT_MAX_QUEUE_SIZE = 2048
DEFAULT_MAX_EXPORT_BATCH_SIZE = 512
DEFAULT_SCHEDULE_DELAY_MS = 5000

DROP_REASONS = ("queue_full", "export_failed", "shutdown", "never_ended", "invalid")
"""Why a span was not exported: the queue was full; the collector refused it or could not be
reached (after the exporter's retries); it was still queued when closing ran out of time; it
was forgotten as one of too many open spans; its event lacked usable ids or times."""


class TelemetryUnavailable(ValueError):
    """Export was asked for but cannot be set up (a bad endpoint, the extra not installed)."""


@dataclass(frozen=True)
class OtlpSettings:
    """Where and how spans are exported."""

    endpoint: str
    """The URL spans are POSTed to (``…/v1/traces``)."""
    source: str
    """What configured it: ``--otlp-endpoint`` or the environment variable's name."""
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE
    max_export_batch_size: int = DEFAULT_MAX_EXPORT_BATCH_SIZE
    schedule_delay: float = DEFAULT_SCHEDULE_DELAY_MS / 1000
    """Seconds between exports while fewer than a batch of spans wait."""

    @property
    def from_flag(self) -> bool:
        """Asked for on the command line (an unusable setup is then an error, not a warning)."""
        return self.source == "--otlp-endpoint"


def otlp_settings(flag: str | None, environ: Mapping[str, str]) -> OtlpSettings | None:
    """The export settings of ``--otlp-endpoint`` (``flag``) or the standard variables.

    The flag wins. Like the OpenTelemetry SDK, a base endpoint (the flag, unless it already ends
    with ``/v1/traces``, or ``OTEL_EXPORTER_OTLP_ENDPOINT``) gets ``/v1/traces`` appended and
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as it is. Without the flag,
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turns export off. Batching
    follows ``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` and
    ``OTEL_BSP_SCHEDULE_DELAY`` (milliseconds). ``None``: no export. Raises
    :class:`TelemetryUnavailable` for an endpoint that is not an http(s) URL or a bad number.
    """
    if flag is not None:
        source, endpoint = "--otlp-endpoint", _with_traces_path(flag.strip())
    else:
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return None
        traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if traces:
            source, endpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces
        elif base:
            source = "OTEL_EXPORTER_OTLP_ENDPOINT"
            endpoint = base.removesuffix("/") + TRACES_PATH
        else:
            return None
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TelemetryUnavailable(
            f"{source}: expected an OTLP/HTTP URL such as http://127.0.0.1:4318, got {endpoint!r}"
        )
    max_queue = _positive(environ, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE_SIZE)
    batch = _positive(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_MAX_EXPORT_BATCH_SIZE)
    delay_ms = _positive(environ, "OTEL_BSP_SCHEDULE_DELAY", DEFAULT_SCHEDULE_DELAY_MS)
    return OtlpSettings(
        endpoint=endpoint,
        source=source,
        max_queue_size=max_queue,
        max_export_batch_size=min(batch, max_queue),
        schedule_delay=delay_ms / 1000,
    )


def _with_traces_path(url: str) -> str:
    if url.rstrip("/").endswith(TRACES_PATH):
        return url
    return url.removesuffix("/") + TRACES_PATH


def _positive(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise TelemetryUnavailable(f"{name}: expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise TelemetryUnavailable(f"{name}: expected a positive integer, got {text!r}")
    return value


def redacted(url: str) -> str:
    """``url`` without credentials or query, fit for a log line."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# --- the exporter process ----------------------------------------------------------------

_FRAME = struct.Struct(">I")
MAX_FRAME_BYTES = 256 * 1024 * 1024
"""No batch or answer is ever near this; a bigger length means the stream is corrupt."""
STOP_SECONDS = 0.25
"""How long the exporter process gets to leave after its input closes before it is killed."""
RESPAWN_SECONDS = 10.0
"""An exporter process that died is started again, at most once in this many seconds."""
STARTUP_SECONDS = 10.0
"""How long closing also waits for an exporter process still loading the SDK (a loaded host
can take seconds): its start is not the collector's slowness, and a one-shot run's spans would
otherwise never leave."""
READY_FRAME = b"ready"
"""The exporter process's first answer: the SDK is loaded and batches can be sent."""


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    """One length-prefixed frame, flushed."""
    stream.write(_FRAME.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or ``None`` at the end of the stream (or a corrupt one)."""
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    if size > MAX_FRAME_BYTES:
        return None
    payload = stream.read(size)
    return payload if len(payload) == size else None


def encode_batch(batch: Sequence[FinishedSpan]) -> bytes:
    """``batch`` as the exporter process reads it (:func:`decode_batch`)."""
    rows = [(f.start, f.end, f.model, f.incomplete, f.resumed) for f in batch]
    return _BATCH_ENCODER.encode(rows)


def decode_batch(payload: bytes) -> list[FinishedSpan]:
    rows = msgspec.msgpack.decode(payload)
    return [
        FinishedSpan(start, end, tuple(model) if model else None, incomplete, resumed)
        for start, end, model, incomplete, resumed in rows
    ]


_BATCH_ENCODER = msgspec.msgpack.Encoder(enc_hook=str)
"""Events are JSON objects from agents; anything else in them is sent as its ``str``."""


@dataclass(frozen=True)
class ExportOutcome:
    """What became of one batch."""

    exported: int
    """Spans the collector accepted."""
    invalid: int = 0
    """Spans whose events lacked usable ids or times (never sent)."""
    problem: str | None = None
    """Why the others were not accepted; ``None``: they were."""


class SpanSink(Protocol):
    """Where batches of finished spans go (:class:`ExporterProcess`)."""

    def start(self) -> None:
        """Get ready to take batches."""

    def export(self, batch: Sequence[FinishedSpan]) -> ExportOutcome:
        """Send ``batch`` (blocking; never raises)."""

    def shutdown(self, wait: float) -> None:
        """Stop, giving a batch in progress ``wait`` seconds at most."""

    def wait_started(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the sink can send, or has failed to start;
        whether it can."""


_BOOTSTRAP = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from orchestrator.telemetry.otlp import main; raise SystemExit(main())"
)


class ExporterProcess:
    """The OpenTelemetry SDK runs in a process of its own (:func:`orchestrator.telemetry.otlp.main`).

    Turning events into spans and spans into protobuf costs about a tenth of a millisecond
    per span in the SDK; in the daemon's process that time would be taken from routing (one
    interpreter lock). Here the daemon's share is encoding each batch for a pipe; the exporter
    process builds the spans, sends them with the SDK's OTLP/HTTP exporter, and answers with
    an :class:`ExportOutcome`. It reads the standard variables (headers, timeouts, TLS) from
    the environment it inherits; its endpoint comes on its input, never on a command line other
    users can read. It ignores SIGINT and SIGTERM and ends as soon as its input closes (an
    export in progress abandoned), so it never outlives the daemon, even one killed.
    """

    def __init__(self, endpoint: str, *, swarm: str) -> None:
        self._setup = msgspec.json.encode({"endpoint": endpoint, "swarm": swarm})
        self._process: subprocess.Popen[bytes] | None = None
        self._spawned_at = -RESPAWN_SECONDS
        self._stopping = False
        self._started = threading.Event()
        self._settled = threading.Event()
        """Set once the process started, or died before it did: nobody waits past either."""
        self._log = structlog.get_logger("goondan.otlp").bind(endpoint=redacted(endpoint))

    def start(self) -> None:
        self._spawn()

    def _spawn(self) -> None:
        self._spawned_at = time.monotonic()
        self._started.clear()
        self._settled.clear()
        # The daemon's module path, as multiprocessing gives its children: the process runs
        # this very code, however the daemon found it (installed, a source tree, PYTHONPATH).
        process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, json.dumps(sys.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert process.stdin is not None
        with contextlib.suppress(OSError):  # it died at once: the next export says so
            write_frame(process.stdin, self._setup)
        self._process = process
        self._log.info("span exporter process started", pid=process.pid)

    def _running(self) -> subprocess.Popen[bytes] | None:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if self._stopping or time.monotonic() - self._spawned_at < RESPAWN_SECONDS:
            return None
        self._log.warning(
            "span exporter process exited; starting it again",
            exit_code=None if process is None else process.returncode,
        )
        self._spawn()
        return self._process

    def export(self, batch: Sequence[FinishedSpan]) -> ExportOutcome:
        process = self._running()
        if process is None:
            return ExportOutcome(0, 0, "the span exporter process is not running")
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            if not self._started.is_set():
                if read_frame(process.stdout) != READY_FRAME:
                    raise ValueError("no ready frame")
                self._started.set()
                self._settled.set()
            write_frame(process.stdin, encode_batch(batch))
            answer = read_frame(process.stdout)
        except (OSError, ValueError):  # its pipes closed under us (it died, or shutdown)
            answer = None
            self._settled.set()
        if answer is None:
            return ExportOutcome(0, 0, f"the span exporter process exited ({process.poll()})")
        try:
            return msgspec.json.decode(answer, type=ExportOutcome)
        except msgspec.DecodeError:
            return ExportOutcome(0, 0, "the span exporter process answered nonsense")

    def wait_started(self, timeout: float) -> bool:
        self._settled.wait(timeout)
        return self._started.is_set()

    def shutdown(self, wait: float) -> None:
        self._stopping = True
        process = self._process
        if process is None:
            return
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            process.stdin.close()  # its cue to leave (a batch in progress is abandoned)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()  # a collector too slow or gone: its retries end here
            process.wait()
        process.stdout.close()


# --- the queue and its thread -------------------------------------------------------------


@dataclass
class ExportCounts:
    """Spans exported and dropped, by reason (read by ``/metrics``; updated from two threads)."""

    exported: int = 0
    dropped: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_exported(self, count: int) -> None:
        with self.lock:
            self.exported += count

    def add_dropped(self, reason: str, count: int = 1) -> None:
        with self.lock:
            self.dropped[reason] += count

    def snapshot(self) -> tuple[int, dict[str, int]]:
        """``(exported, {reason: dropped})``, every reason present."""
        with self.lock:
            return self.exported, {reason: self.dropped[reason] for reason in DROP_REASONS}


class TraceExport:
    """Runtime events in, OTLP spans out: an ``EventLog`` listener, the bounded queue, and the
    thread that hands batches to the exporter process and counts what became of them.

    :meth:`observe` runs on the event loop and never blocks; :meth:`close` (blocking, at most
    :data:`SHUTDOWN_SECONDS`) stops the thread and the process after a last flush.
    """

    def __init__(
        self, settings: OtlpSettings, sink: SpanSink, *, model_of: ModelOf = lambda agent: None
    ) -> None:
        self.settings = settings
        self.counts = ExportCounts()
        self._sink = sink
        self._log = structlog.get_logger("goondan.otlp").bind(endpoint=redacted(settings.endpoint))
        self._queue: collections.deque[FinishedSpan] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._started = False
        self._closing = False
        self._aborted = False
        self._abandoned = False
        self._in_flight = 0
        """Spans of the batch being sent, which closing counts if it gives up on it."""
        self._warned_full = False
        self._failing_since: int | None = None
        """``counts.dropped['export_failed']`` when the current outage began; ``None``: none."""
        self._thread = threading.Thread(target=self._run, name="goondan-otlp", daemon=True)
        self.assembler = SpanAssembler(
            self._offer,
            model_of=model_of,
            on_forgotten=lambda: self.counts.add_dropped("never_ended"),
        )

    @classmethod
    def open(cls, settings: OtlpSettings, *, swarm: str, model_of: ModelOf) -> TraceExport:
        """An export to ``settings.endpoint`` through the OpenTelemetry SDK, in the exporter
        process (started by :meth:`start`).

        Raises :class:`TelemetryUnavailable` when the ``otel`` extra is not installed.
        """
        for module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http"):
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise TelemetryUnavailable(
                    f"{settings.source} needs the `otel` extra: pip install 'goondan-py[otel]'"
                    f" ({module} is not installed)"
                )
        return cls(settings, ExporterProcess(settings.endpoint, swarm=swarm), model_of=model_of)

    def start(self) -> None:
        """Start the exporter and the sending thread."""
        if self._started or self._closing:
            return
        self._started = True
        self._sink.start()
        self._thread.start()
        self._log.info(
            "exporting spans over OTLP/HTTP",
            source=self.settings.source,
            max_queue_size=self.settings.max_queue_size,
        )

    def observe(self, event: AnyEvent) -> None:
        """An ``EventLog`` listener: every runtime event passes here."""
        self.assembler.observe(event)

    def queued(self) -> int:
        """Spans waiting to be sent."""
        return len(self._queue)

    def _offer(self, span: FinishedSpan) -> None:
        if self._closing:
            return
        full = False
        with self._lock:
            if len(self._queue) >= self.settings.max_queue_size:
                self._queue.popleft()  # the oldest goes, as the SDK's batch processor does
                full = True
            self._queue.append(span)
            size = len(self._queue)
        if full:
            self.counts.add_dropped("queue_full")
            if not self._warned_full:
                self._warned_full = True
                self._log.warning(
                    "span export queue full: dropping the oldest spans",
                    max_queue_size=self.settings.max_queue_size,
                    counted_in="goondan_otel_spans_dropped_total",
                )
        if size >= self.settings.max_export_batch_size:
            self._wake.set()

    def _take(self) -> list[FinishedSpan]:
        with self._lock:
            count = min(len(self._queue), self.settings.max_export_batch_size)
            batch = [self._queue.popleft() for _ in range(count)]
            self._in_flight = len(batch)
            return batch

    def _run(self) -> None:
        while True:
            self._wake.wait(self.settings.schedule_delay)
            self._wake.clear()
            # Read before draining: once closing, nothing more is queued, so this drain
            # sends everything that was.
            closing = self._closing
            while not self._aborted:
                batch = self._take()
                if not batch:
                    break
                self._send(batch)
            if closing or self._aborted:
                return

    def _send(self, batch: list[FinishedSpan]) -> None:
        try:
            outcome = self._sink.export(batch)
        except Exception as exc:  # the sink never raises; if it does, it is one more failure
            outcome = ExportOutcome(0, 0, f"{type(exc).__name__}: {exc}")
        with self._lock:
            if self._abandoned:  # closing gave up on this batch and counted it already
                return
            self._in_flight = 0
        if outcome.invalid:
            self.counts.add_dropped("invalid", outcome.invalid)
        rest = len(batch) - outcome.invalid
        if outcome.problem is None:
            self.counts.add_exported(rest)
            if self._failing_since is not None:
                _, dropped = self.counts.snapshot()
                lost = dropped["export_failed"] - self._failing_since
                self._failing_since = None
                self._log.info("span export recovered", dropped_meanwhile=lost)
            return
        if self._aborted:  # cut short by closing, not by the collector
            self.counts.add_dropped("shutdown", rest)
            return
        if self._failing_since is None:
            self._failing_since = self.counts.snapshot()[1]["export_failed"]
            self._log.warning(
                "span export failing: spans are dropped until the collector takes them",
                reason=self._scrub(outcome.problem)[:500],
                counted_in="goondan_otel_spans_dropped_total",
            )
        self.counts.add_dropped("export_failed", rest)

    def _scrub(self, problem: str) -> str:
        """``problem`` without the endpoint's credentials or query, should it quote the URL."""
        parts = urlsplit(self.settings.endpoint)
        for secret in (parts.query, parts.password, parts.username):
            if secret:
                problem = problem.replace(secret, "…")
        return problem

    def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Send what is queued, then stop, within ``timeout`` seconds in all.

        Up to ``timeout`` less a moment goes to sending what is queued (and, while the exporter
        process is still starting, up to :data:`STARTUP_SECONDS` more); then a batch still in
        progress (a collector too slow or gone) is given up: the exporter process has
        :data:`STOP_SECONDS` to finish it before it is killed. Spans still queued or in that
        batch are dropped (``shutdown``). Spans ending after this are ignored.
        """
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        began = time.monotonic()
        if self._thread.is_alive():
            self._thread.join(max(0.0, timeout - 2 * STOP_SECONDS))
        # A batch waiting for an exporter process still starting: give it its start, then the
        # collector its share again.
        starting = self._thread.is_alive() and not self._sink.wait_started(0)
        if starting and self._sink.wait_started(STARTUP_SECONDS):
            self._thread.join(max(0.0, timeout - 2 * STOP_SECONDS))
        if self._thread.is_alive():
            self._aborted = True
        self._sink.shutdown(STOP_SECONDS)
        if self._thread.is_alive():
            self._thread.join(max(0.0, timeout - (time.monotonic() - began)))
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
            if self._thread.is_alive():
                self._abandoned = True
                left += self._in_flight
        if left:
            self.counts.add_dropped("shutdown", left)
        exported, dropped = self.counts.snapshot()
        self._log.info(
            "span export stopped",
            exported=exported,
            dropped={k: v for k, v in dropped.items() if v},
            open_spans=len(self.assembler),
        )
