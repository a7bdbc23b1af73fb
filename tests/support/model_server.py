"""A local Chat Completions server that logs when each call arrived and when it was answered.

Runs in a thread on 127.0.0.1 and speaks the OpenAI wire protocol the official SDK uses, so
agents on the ``openai`` provider (``baseUrl`` pointed here) make real HTTP calls. Each request
is attributed to an agent by its system prompt (``You are NAME.``); ``answer`` decides what it
gets (a :class:`tests.support.wire_server.Reply`), ``delay`` how long the server takes, and
:meth:`ModelServer.hold` parks an agent's calls until released, so a test can kill an agent in
the middle of one. Times are ``time.monotonic()``, the clock asyncio's loop uses too.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.wire_server import Reply, openai_completion, send_reply

AGENT = re.compile(r"You are (\S+?)\.")


@dataclass
class Call:
    """One model call as the server saw it."""

    agent: str
    body: dict[str, Any]
    arrived: float
    answered: float | None = None
    status: int = 200


Answer = Callable[[str, dict[str, Any]], Reply]
"""``(agent, request body) -> reply``."""


def text_reply(text: str, prompt_tokens: int = 100, completion_tokens: int = 20) -> Reply:
    """A text answer with the usage it reports."""
    body = openai_completion({"content": text})
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return Reply(body=body)


def call_reply(tool: str, arguments: dict[str, Any], call_id: str = "call_1") -> Reply:
    """An answer that calls one tool (usage: 100 in, 20 out)."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }
    body = openai_completion({"content": None, "tool_calls": [call]}, "tool_calls")
    body["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    return Reply(body=body)


def rate_limited(retry_after: str) -> Reply:
    """A 429 as OpenAI sends it, with ``retry-after``."""
    error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
    return Reply(status=429, body={"error": error}, headers={"retry-after": retry_after})


class ModelServer:
    """Serve Chat Completions; ``calls`` lists every call, in arrival order."""

    def __init__(self, answer: Answer, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._held: dict[str, threading.Event] = {}
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                system = next(
                    (
                        m.get("content") or ""
                        for m in body.get("messages", [])
                        if m.get("role") == "system"
                    ),
                    "",
                )
                found = AGENT.search(system)
                call = Call(found.group(1) if found else "?", body, time.monotonic())
                server._record(call)
                gate = server._held.get(call.agent)
                if gate is not None:
                    gate.wait(timeout=60)
                if server.delay:
                    server._stopping.wait(server.delay)
                reply = server.answer(call.agent, body)
                call.status = reply.status
                with contextlib.suppress(OSError):  # the caller died meanwhile
                    send_reply(self, reply)
                call.answered = time.monotonic()
                server._record(None)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _record(self, call: Call | None) -> None:
        with self._changed:
            if call is not None:
                self.calls.append(call)
            self._changed.notify_all()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def hold(self, agent: str) -> None:
        """Park ``agent``'s calls (answered once :meth:`release` d)."""
        self._held[agent] = threading.Event()

    def release(self, agent: str) -> None:
        gate = self._held.pop(agent, None)
        if gate is not None:
            gate.set()

    def wait_for(self, condition: Callable[[list[Call]], bool], timeout: float = 30) -> list[Call]:
        """Block (a thread: run it with ``asyncio.to_thread``) until ``condition(calls)``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self.calls):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"server calls never matched; got {self.summary()}")
                self._changed.wait(left)
            return list(self.calls)

    def summary(self) -> list[tuple[str, int, float, float | None]]:
        """``(agent, status, arrived, answered)`` of every call, for failure messages."""
        return [(c.agent, c.status, c.arrived, c.answered) for c in self.calls]

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        for agent in list(self._held):
            self.release(agent)
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(answer: Answer, delay: float = 0.0) -> Iterator[ModelServer]:
    """Fixture body: a running server, shut down afterwards."""
    with ModelServer(answer, delay) as server:
        yield server
