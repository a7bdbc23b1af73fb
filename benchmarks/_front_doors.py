"""The front doors' paths of ``benchmarks/http_api.py``: the same Turn as
``POST /v1/agents/{agent}/requests``, asked through the Responses API, MCP, A2A and AG-UI over
one keep-alive connection each, every answer checked. Each speaks its protocol's wire format
as its clients send it (an MCP session opened once; A2A ``SendMessage``; an AG-UI run read to
``RUN_FINISHED``)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2

from benchmarks._checks import expect

Call = Callable[[], float]
AGENT = "coordinator"
SSE_ACCEPT = {"Accept": "application/json, text/event-stream"}


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON ``data:`` of each server-sent event."""
    for line in lines:
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                yield json.loads(data)


def responding(client: httpx2.Client, key: str, text: str, answer: str) -> Call:
    """``POST /v1/responses`` (the OpenAI Responses API)."""
    body = {"model": AGENT, "input": text, "user": key}

    def call() -> float:
        started = time.perf_counter()
        got = client.post("/v1/responses", json=body)
        taken = time.perf_counter() - started
        output = got.json().get("output") or [{}]
        said = output[-1].get("content", [{}])[0].get("text")
        expect(got.status_code == 200 and said == answer, got.text)
        return taken

    return call


def mcp_calling(client: httpx2.Client, key: str, text: str, answer: str) -> Call:
    """``tools/call`` of the agent's tool in one MCP session (opened here, not timed)."""
    numbers = itertools.count(1)
    opened = client.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": next(numbers),
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "benchmark", "version": "1"},
            },
        },
        headers=SSE_ACCEPT,
    )
    expect(opened.status_code == 200, opened.text)
    session = {**SSE_ACCEPT, "Mcp-Session-Id": opened.headers.get("mcp-session-id", "")}
    client.post(
        "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
    )

    def call() -> float:
        message = {
            "jsonrpc": "2.0",
            "id": next(numbers),
            "method": "tools/call",
            "params": {"name": AGENT, "arguments": {"input": text, "instanceKey": key}},
        }
        started = time.perf_counter()
        with client.stream("POST", "/mcp", json=message, headers=session) as got:
            if got.headers.get("content-type", "").startswith("text/event-stream"):
                replies = [e for e in _events(got.iter_lines()) if "result" in e]
            else:
                replies = [json.loads(got.read())]
        taken = time.perf_counter() - started
        said = replies[-1]["result"]["content"][0]["text"] if replies else None
        expect(said == answer, replies)
        return taken

    return call


def a2a_sending(client: httpx2.Client, key: str, text: str, answer: str) -> Call:
    """A2A ``SendMessage`` (JSON-RPC) to the agent's endpoint."""
    numbers = itertools.count(1)
    headers = {"A2A-Version": "1.0"}

    def call() -> float:
        number = next(numbers)
        message = {
            "messageId": f"bench-{key}-{number}",
            "contextId": key,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        body = {"jsonrpc": "2.0", "id": number, "method": "SendMessage",
                "params": {"message": message}}  # fmt: skip
        started = time.perf_counter()
        got = client.post(f"/a2a/{AGENT}", json=body, headers=headers)
        taken = time.perf_counter() - started
        task = got.json().get("result", {}).get("task", {})
        parts = [p for a in task.get("artifacts", []) for p in a.get("parts", [])]
        expect(got.status_code == 200 and parts and parts[0].get("text") == answer, got.text)
        return taken

    return call


def ag_ui_running(client: httpx2.Client, key: str, text: str, answer: str) -> Call:
    """An AG-UI run (``POST /ag-ui/{agent}``), read to ``RUN_FINISHED``."""
    numbers = itertools.count(1)

    def call() -> float:
        number = next(numbers)
        body = {
            "threadId": key,
            "runId": f"run-{number}",
            "messages": [{"id": f"m-{number}", "role": "user", "content": text}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
        started = time.perf_counter()
        with client.stream("POST", f"/ag-ui/{AGENT}", json=body, headers=SSE_ACCEPT) as got:
            events = list(_events(got.iter_lines()))
        taken = time.perf_counter() - started
        last = events[-1] if events else {}
        expect(last.get("type") == "RUN_FINISHED", events[-3:])
        result = last.get("result")
        said = result.get("output") if isinstance(result, dict) else result
        expect(said == answer, last)
        return taken

    return call


DOORS: dict[str, Callable[[httpx2.Client, str, str, str], Call]] = {
    "responses": responding,
    "mcp": mcp_calling,
    "a2a": a2a_sending,
    "ag_ui": ag_ui_running,
}
"""Each front door's path, by the name its figures carry."""
