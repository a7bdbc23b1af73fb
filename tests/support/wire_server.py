"""A local HTTP server that answers like a model API, from a script of responses.

Runs in a thread on 127.0.0.1; records every request (path, headers, JSON body) so tests can
assert what the real SDK sent over the wire. A :class:`Reply` with ``events`` answers as a
server-sent event stream (``text/event-stream``), the way the APIs stream: build the events of
one with :func:`openai_stream`, :func:`anthropic_stream` or :func:`gemini_stream`.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP response."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str | None, Any]] | None = None
    """``(event name or None, data)`` pairs sent as SSE, each flushed on its own; ``data`` is
    JSON-encoded unless it is a string."""


def send_reply(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
    """Write ``reply`` as a whole response: its body (``raw``, or ``body`` as JSON), its headers
    and a ``content-type`` of JSON unless it names its own; a reply with ``events`` as a
    server-sent event stream, each event flushed on its own, the connection closed after."""
    if reply.events is not None:
        handler.send_response(reply.status)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("connection", "close")
        handler.end_headers()
        for name, data in reply.events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            handler.wfile.write(f"{head}data: {text}\n\n".encode())
            handler.wfile.flush()
        handler.close_connection = True
        return
    payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
    handler.send_response(reply.status)
    if "content-type" not in {name.lower() for name in reply.headers}:
        handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(payload)))
    for key, value in reply.headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(payload)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    """Serve :class:`Reply` s in order; the last one repeats when the script runs out."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.on_request: Callable[[Recorded], None] | None = None
        """Called (in the server's thread) with each request before it is answered."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                data = self.rfile.read(length)
                try:
                    body = json.loads(data)
                except ValueError:
                    body = data.decode(errors="replace")
                recorded = Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                server.requests.append(recorded)
                if server.on_request is not None:
                    server.on_request(recorded)
                reply = server.replies.pop(0) if len(server.replies) > 1 else server.replies[0]
                # A client that timed out meanwhile is gone: nothing to answer.
                with contextlib.suppress(OSError):
                    if reply.events is not None:
                        self._stream(reply)
                    else:
                        send_reply(self, reply)

            def _stream(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for name, data in reply.events or ():
                    text = data if isinstance(data, str) else json.dumps(data)
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {text}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> WireServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve() -> Iterator[WireServer]:
    """Fixture body: a running server, shut down afterwards."""
    with WireServer() as server:
        yield server


def openai_completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    """A Chat Completions response body whose one choice is the assistant ``message``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def openai_stream(
    message: dict[str, Any],
    finish: str = "stop",
    *,
    pieces: int = 3,
    usage: dict[str, int] | None = None,
) -> list[tuple[str | None, Any]]:
    """The Chat Completions SSE stream of the assistant ``message`` (the same shape
    :func:`openai_completion` answers whole): content in ``pieces`` parts, each tool call as a
    first delta with id and name then its arguments in parts, the finish reason, a usage chunk
    (``stream_options.include_usage``) and ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    content = message.get("content") or ""
    events += [(None, chunk({"content": part})) for part in _split(content, pieces) if part]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        first = {"index": index, "id": call["id"], "type": "function"}
        first["function"] = {"name": function["name"], "arguments": ""}
        events.append((None, chunk({"tool_calls": [first]})))
        for part in _split(function["arguments"], pieces):
            more = {"index": index, "function": {"arguments": part}}
            events.append((None, chunk({"tool_calls": [more]})))
    events.append((None, chunk({}, finish)))
    usage = usage or {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    events.append((None, {**chunk({}), "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return events


def anthropic_stream(
    content: list[dict[str, Any]], stop: str = "end_turn", *, pieces: int = 3
) -> list[tuple[str | None, Any]]:
    """The Messages API SSE stream of a reply with ``content`` blocks: text in ``pieces``
    ``text_delta`` parts, tool input as ``input_json_delta`` parts, usage in
    ``message_start`` (input) and ``message_delta`` (output)."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(content):
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _split(block["text"], pieces)]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _split(arguments, pieces)
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
            if d.get("text", d.get("partial_json"))
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 4},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


GEMINI_USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 4, "totalTokenCount": 16}


def gemini_response(
    parts: list[dict[str, Any]],
    finish: str = "STOP",
    *,
    usage: dict[str, int] | None = None,
    response_id: str = "resp-1",
) -> dict[str, Any]:
    """A ``generateContent`` response body whose one candidate holds ``parts``."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        ],
        "usageMetadata": usage or GEMINI_USAGE,
        "modelVersion": "gemini-test-001",
        "responseId": response_id,
    }


def gemini_stream(
    parts: list[dict[str, Any]],
    finish: str = "STOP",
    *,
    pieces: int = 3,
    usage: dict[str, int] | None = None,
    response_id: str = "resp-1",
) -> list[tuple[str | None, Any]]:
    """The ``streamGenerateContent?alt=sse`` stream of :func:`gemini_response`: each text
    part in ``pieces`` chunks, each function call whole in a chunk of its own, the finish
    reason in the last chunk; every chunk carries the usage so far, the last one all of it."""
    usage = usage or GEMINI_USAGE
    chunks: list[tuple[list[dict[str, Any]], dict[str, int]]] = []
    for part in parts:
        if "text" in part:
            chunks += [
                ([{**part, "text": text}], {"promptTokenCount": usage["promptTokenCount"]})
                for text in _split(part["text"], pieces)
            ]
        else:
            chunks.append(([part], {"promptTokenCount": usage["promptTokenCount"]}))
    events: list[tuple[str | None, Any]] = []
    for index, (chunk_parts, chunk_usage) in enumerate(chunks):
        last = index == len(chunks) - 1
        body = gemini_response(
            chunk_parts, finish, usage=usage if last else chunk_usage, response_id=response_id
        )
        if not last:
            del body["candidates"][0]["finishReason"]
        events.append((None, body))
    return events


def _split(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` parts of about the same size (fewer when it is short)."""
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]
