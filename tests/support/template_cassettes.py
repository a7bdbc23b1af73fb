"""The cassettes shipped with the ``openai`` and ``anthropic`` templates, recorded against local
stand-ins of the two APIs (their users record the real models' with ``--record``).

A stand-in greets as the template's agent would: asked "I am NAME" it calls ``greet__hello``,
given the tool's result it answers with the greeting. :func:`record` writes a template with
``init``, points its Model at the stand-in for the recording, and returns the cassettes it
recorded; ``python -m tests.support.template_cassettes`` writes them into the templates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.model_server import ModelServer, call_reply, text_reply
from tests.support.suite_swarm import as_asked
from tests.support.wire_server import Reply, anthropic_stream, send_reply

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "orchestrator" / "templates"
NAME = re.compile(r"\bI am (\w+)")
MODEL_LINE = {"openai": "  model: gpt-4o-mini\n", "anthropic": "  model: claude-sonnet-4-5\n"}
KEY = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def openai_answer(agent: str, body: dict[str, Any]) -> Reply:
    """The stand-in's Chat Completions answer (streamed when asked)."""
    return as_asked(_openai_whole(body), body)


def _openai_whole(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        greeting = json.loads(last["content"]).get("output", {}).get("greeting", "?")
        return text_reply(greeting)
    asked = NAME.search(last.get("content") or "")
    if asked:
        return call_reply("greet__hello", {"name": asked.group(1)}, call_id="call_greet_1")
    return text_reply("Hi! Tell me your name.")


def anthropic_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The stand-in's Messages API answer."""
    content = body["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    reply: dict[str, Any] = {
        "id": "msg_stand_in",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude"),
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }
    for block in blocks:
        if block.get("type") == "tool_result":
            result = block.get("content")
            text = result if isinstance(result, str) else json.dumps(result)
            greeting = json.loads(text).get("output", {}).get("greeting", "?")
            return {**reply, "content": [{"type": "text", "text": greeting}]}
    asked = NAME.search(" ".join(str(b.get("text", "")) for b in blocks))
    if asked:
        call = {"type": "tool_use", "id": "toolu_greet_1", "name": "greet__hello"}
        call["input"] = {"name": asked.group(1)}
        return {**reply, "stop_reason": "tool_use", "content": [call]}
    return {**reply, "content": [{"type": "text", "text": "Hi! Tell me your name."}]}


@contextmanager
def anthropic_stand_in() -> Iterator[str]:
    """A Messages API stand-in on loopback; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            message = anthropic_answer(body)
            if body.get("stream"):
                events = anthropic_stream(message["content"], message["stop_reason"])
                send_reply(self, Reply(events=events))
            else:
                send_reply(self, Reply(body=message))

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def stand_in(template: str) -> Iterator[str]:
    """The stand-in of ``template``'s provider; yields the ``baseUrl`` to reach it."""
    if template == "openai":
        with ModelServer(openai_answer) as server:
            yield server.url
    else:
        with anthropic_stand_in() as url:
            yield url


def record(template: str, directory: Path) -> dict[str, str]:
    """Write ``template`` into ``directory``, record its suite against the stand-in, and return
    ``relative path → text`` of every cassette recorded."""
    python = [sys.executable, "-m", "orchestrator"]
    subprocess.run(
        [*python, "init", str(directory), "--template", template],
        check=True,
        capture_output=True,
        timeout=120,
    )
    bundle = directory / "goondan.yaml"
    with stand_in(template) as url:
        line = MODEL_LINE[template]
        bundle.write_text(bundle.read_text().replace(line, f"{line}  baseUrl: {url}\n", 1))
        done = subprocess.run(
            [*python, "test", "--record"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, KEY[template]: "sk-stand-in"},
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"recording the {template} template failed:\n{done.stdout}{done.stderr}")
    cassettes = directory / "tests" / "cassettes"
    return {
        str(path.relative_to(cassettes)): path.read_text()
        for path in sorted(cassettes.rglob("*.cassette.yaml"))
    }


def main() -> None:
    """Record both templates' cassettes into ``orchestrator/templates/<template>/tests/``."""
    import tempfile

    for template in ("openai", "anthropic"):
        with tempfile.TemporaryDirectory() as scratch:
            recorded = record(template, Path(scratch) / "swarm")
        target = TEMPLATES / template / "tests" / "cassettes"
        shutil.rmtree(target, ignore_errors=True)
        for relative, text in recorded.items():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_text(text)
        print(f"{template}: {len(recorded)} cassette(s)")


if __name__ == "__main__":
    main()
