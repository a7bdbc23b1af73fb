"""A real OTLP/HTTP trace receiver on a loopback port: what a collector would get.

Each ``POST /v1/traces`` body is decoded with the official protobuf messages
(``opentelemetry-proto``) into :class:`ReceivedSpan` rows. ``hold`` makes it take a request and
answer only once released (a collector that stalls).
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass(frozen=True)
class ReceivedLink:
    """A span's link to another span, ids in hex."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as decoded from the wire, ids in hex as the runtime events spell them."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    resource: dict[str, Any]
    scope: str
    links: tuple[ReceivedLink, ...] = ()


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof("value")
    if field is None:
        return None
    if field == "array_value":
        return [_value(v) for v in value.array_value.values]
    if field == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, field)


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        out[pair.key] = _value(pair.value)
    return out


class OtlpReceiver:
    """The server; :meth:`wait_for` blocks until the spans wanted have arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests: list[dict[str, str]] = []
        """The headers of every export request, lower-cased."""
        self.hold = threading.Event()
        self.hold.set()
        """Cleared: requests are taken and left unanswered until it is set again."""
        self.held = threading.Event()
        """Set once a request waits on :attr:`hold`."""
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if not receiver.hold.is_set():
                    receiver.held.set()
                    receiver.hold.wait(60)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request, {k.lower(): v for k, v in self.headers.items()})
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A held request whose client gave up (the daemon stopped): answering it
                # fails, which is expected, and must not print over the test run.
                return

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _add(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> None:
        rows: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    rows.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            status_code=span.status.code,
                            status_message=span.status.message,
                            resource=resource,
                            scope=scope_spans.scope.name,
                            links=tuple(
                                ReceivedLink(
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    _attributes(link.attributes),
                                )
                                for link in span.links
                            ),
                        )
                    )
        with self._changed:
            self.requests.append(headers)
            self.spans.extend(rows)
            self._changed.notify_all()

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30
    ) -> list[ReceivedSpan]:
        """The spans received, once ``done`` holds for them (``AssertionError`` after
        ``timeout`` seconds)."""
        with self._changed:
            if not self._changed.wait_for(lambda: done(self.spans), timeout):
                names = [s.name for s in self.spans]
                raise AssertionError(f"not received within {timeout} s; got {names}")
            return list(self.spans)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver serving for the duration of the ``with``."""
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.close()
