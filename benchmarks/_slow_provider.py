"""A slow OpenAI-compatible provider for ``benchmarks/slow_model.py``, in a process of its own.

Every ``POST .../chat/completions`` is answered after ``--delay`` seconds (the model's time),
on a keep-alive HTTP/1.1 connection, whole or as server-sent events when the request asks to
stream. What it answers is read from the conversation it is sent, as a model would:

* no tool result yet: a call of the request's tool whose name ends in ``wait`` (``wait__wait``
  of ``@goondan/base``, or the peer's ``wait``) with ``{"seconds": 0}``; a coordinator (its
  system prompt says ``delegate to NAME``) calls ``agents__request`` of ``NAME`` instead, with
  the user's text as its input;
* after the tool's result: ``done: TEXT`` (``TEXT``: the conversation's first user message),
  or ``relayed: done: TEXT`` from a coordinator whose worker answered ``done: TEXT``. A result
  that is not what the call must return gets ``wrong tool result``, so the client sees it.

A streamed answer's text starts with a chunk of its own, ``[T] ``, where ``T`` is
``time.monotonic()`` when the chunk was written: the client, on the same machine, reads from
it how long the chunk took to reach it.

The accept backlog is raised (``--backlog``) so that a thousand callers at once all wait in it
instead of being refused: the server must never be what is measured. ``GET /stats`` answers
what ``benchmarks/_chat_server.py`` counts (``requests``, ``maxInFlight``).

Run: ``python benchmarks/_slow_provider.py --delay S``; prints its port, serves until killed.

The bare client (:func:`bare_client`, ``--bare-client URL``) is the floor of a model call's
CPU: the same conversations the agents hold with this provider, made on the event loop's own
streams with ``json`` and nothing else, its CPU read with ``time.process_time``. It prints one
JSON object and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._chat_server import HttpConnection, Stats
from tests.support.wire_server import openai_completion, openai_stream

COORDINATOR = re.compile(r"delegate to ([\w-]+)")
STAMP = re.compile(r"\[(\d+\.\d+)\] ")
"""The stamp a streamed answer starts with (and how a client takes it off again)."""


def text_of(content: Any) -> str:
    """A message's text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def reply_to(request: dict[str, Any]) -> dict[str, Any]:
    """The assistant message a model would answer ``request`` with (see the module doc)."""
    messages: list[dict[str, Any]] = request.get("messages") or []
    user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    system = next((text_of(m.get("content")) for m in messages if m.get("role") == "system"), "")
    coordinator = COORDINATOR.search(system)
    last = messages[-1] if messages else {}
    if last.get("role") != "tool":
        if coordinator is not None:
            name, arguments = "agents__request", {"target": coordinator[1], "input": user}
        else:
            tools = [t.get("function", {}).get("name", "") for t in request.get("tools") or ()]
            name = next((tool for tool in tools if tool.endswith("wait")), "no wait tool")
            arguments = {"seconds": 0}
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"content": None, "tool_calls": [call]}
    result = text_of(last.get("content"))
    if coordinator is not None:
        right = f"done: {user}" in result
        answer = f"relayed: done: {user}"
    else:
        right = "waitedMs" in result
        answer = f"done: {user}"
    return {"content": answer if right else f"wrong tool result: {result[:200]}"}


def sse_body(message: dict[str, Any]) -> bytes:
    """``message`` as the Chat Completions stream, its text after a stamp chunk of its own."""
    content = message.get("content")
    events = openai_stream({**message, "content": content}, "tool_calls" if not content else "stop")
    if content:
        stamp = json.loads(json.dumps(events[1][1]))  # a content chunk, copied
        stamp["choices"][0]["delta"] = {"content": f"[{time.monotonic():.6f}] "}
        events.insert(1, (None, stamp))
    lines = [
        f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n" for _, data in events
    ]
    return "".join(lines).encode()


class SlowConnection(HttpConnection):
    """One connection of the slow provider: each call answered after ``delay`` seconds."""

    def __init__(self, stats: Stats, delay: float) -> None:
        super().__init__(stats)
        self.delay = delay

    def _handle(self, request_line: str, body: bytes) -> None:
        method, path, _ = request_line.split(" ", 2)
        if method == "GET" and path == "/stats":
            self._send(self.stats.read())
            return
        self.stats.began()
        request = json.loads(body) if body else {}
        asyncio.get_running_loop().call_later(self.delay, self._reply, request)

    def _reply(self, request: dict[str, Any]) -> None:
        message = reply_to(request)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if request.get("stream"):
                body = sse_body(message)
                head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            else:
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                body = json.dumps(openai_completion(message, finish)).encode()
                head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            transport.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
        self.stats.ended()


BARE_ROUNDS = 5
"""Rounds of the bare client's conversations (see :func:`bare_client`)."""
BARE_TOOLS = [{"type": "function", "function": {"name": "wait__wait", "parameters": {}}}]


async def bare_call(
    streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], host: str, body: dict[str, Any]
) -> dict[str, Any]:
    """One Chat Completions call on a kept-alive connection: the assistant message, its text
    and tool calls put together from the events when streamed."""
    reader, writer = streams
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    )
    writer.write(f"{head}content-length: {len(data)}\r\n\r\n".encode() + data)
    lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    length = next(int(line[15:]) for line in lines if line.lower().startswith(b"content-length:"))
    answer = await reader.readexactly(length)
    if not body.get("stream"):
        message: dict[str, Any] = json.loads(answer)["choices"][0]["message"]
        return message
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for line in answer.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text.append(choice["delta"].get("content") or "")
                for part in choice["delta"].get("tool_calls") or ():
                    call = calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
                    function = part.get("function") or {}
                    call["id"] = part.get("id") or call["id"]
                    call["name"] += function.get("name") or ""
                    call["arguments"] += function.get("arguments") or ""
    tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls.values()
    ]
    return {"content": STAMP.sub("", "".join(text)), "tool_calls": tool_calls}


async def bare_client(
    url: str, requests: int, calls: int, stream: bool, rounds: int = BARE_ROUNDS
) -> dict[str, Any]:
    """``requests`` conversations at once, each ``calls`` model calls (a call that asks for
    ``wait__wait``, then the call after its result, again for each pair), every answer
    checked; the CPU seconds they took, connecting aside: the least of ``rounds`` rounds (a
    floor this small moves with every other process on the machine; its least does not)."""
    parts = urlsplit(url)
    host = parts.netloc
    connections = [
        await asyncio.open_connection(parts.hostname, parts.port) for _ in range(requests)
    ]
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}

    async def conversation(n: int) -> None:
        text = f"conversation {n}"
        messages = [
            {"role": "system", "content": "You wait, then answer."},
            {"role": "user", "content": text},
        ]
        for _ in range(calls // 2):
            body = {"model": "slow", "messages": messages, "tools": BARE_TOOLS, **extra}
            asked = await bare_call(connections[n], host, body)
            [call] = asked["tool_calls"]
            result = {"role": "tool", "tool_call_id": call["id"], "content": '{"waitedMs": 0}'}
            called = {"role": "assistant", "content": None, "tool_calls": [call]}
            body = {**body, "messages": [*messages, called, result]}
            answered = await bare_call(connections[n], host, body)
            if answered["content"] != f"done: {text}":
                raise RuntimeError(f"bare client: wrong answer {answered['content']!r}")

    cpu = []
    for _ in range(rounds):
        started = time.process_time()
        await asyncio.gather(*(conversation(n) for n in range(requests)))
        cpu.append(time.process_time() - started)
    for _, writer in connections:
        writer.close()
    return {"calls": requests * calls, "cpu_s": min(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0, help="seconds before each answer")
    parser.add_argument("--backlog", type=int, default=4096, help="the listen backlog")
    parser.add_argument("--bare-client", metavar="URL", help="be the bare client of URL instead")
    parser.add_argument("--requests", type=int, default=1, help="the bare client's conversations")
    parser.add_argument("--calls", type=int, default=2, help="model calls per conversation")
    parser.add_argument("--stream", action="store_true", help="the bare client streams")
    options = parser.parse_args()
    if options.bare_client:
        bare = bare_client(options.bare_client, options.requests, options.calls, options.stream)
        print(json.dumps(uvloop.run(bare)), flush=True)
        return

    async def serve() -> None:
        stats = Stats()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(
            lambda: SlowConnection(stats, options.delay), sock=sock, backlog=options.backlog
        )
        print(sock.getsockname()[1], flush=True)
        await server.serve_forever()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
