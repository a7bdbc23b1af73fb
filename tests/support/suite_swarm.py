"""A two-agent swarm on the ``openai`` provider with a TestSuite, and the local Chat
Completions server that answers it: for ``goondan test`` recorded and replayed for real.

``lead`` greets, or (on ``delegate:``) asks ``helper`` through ``agents__request``; ``helper``
writes a file with ``file-system__write`` and reports, or (on ``read``) reads the suite's
fixture ``seed.txt`` with ``file-system__read`` and quotes it. Each agent is told apart by its system
prompt (``You are NAME.``), as :class:`tests.support.model_server.ModelServer` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.model_server import call_reply, text_reply
from tests.support.wire_server import Reply, openai_stream

API_KEY = "sk-local-do-not-record"
"""The Models' key: it must never reach a cassette."""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: brain}}
spec:
  provider: openai
  model: gpt-local
  baseUrl: {url}
  apiKey: {{value: {key}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: lead}}
spec:
  modelConfig: {{modelRef: Model/brain}}
  prompt: {{system: "You are lead. You hand file work to helper."}}
  tools:
    - ref: {{kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: helper}}
spec:
  modelConfig: {{modelRef: Model/brain}}
  prompt: {{system: "You are helper. You write files."}}
  tools:
    - ref: {{kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/lead
  agents: [Agent/lead, Agent/helper]
"""

SUITE = """\
apiVersion: goondan.ai/v1
kind: TestSuite
metadata:
  name: basics
spec:
  fixtures:
    - path: seed.txt
      content: planted
  cases:
    - name: handoff
      input: "delegate: write the report"
      expect:
        answer: {contains: "lead done"}
        handoffs: [helper]
        tools:
          - name: agents__request
            args: {target: helper}
          - name: file-system__write
            args: {path: report.txt}
    - name: greeting
      input: hello
      expect:
        answer: {matches: "^hi from lead"}
        handoffs: []
    - name: helper-alone
      agent: helper
      input: write it
      expect:
        answer: {equals: "helper wrote report.txt"}
        tools: [{name: file-system__write, args: {content: "report body"}}]
    - name: two-turns
      input: [hello, "hello again"]
      expect:
        answer: {contains: "hi from lead (2)"}
        maxSteps: 2
    - name: reads-seed
      agent: helper
      input: read the seed
      expect:
        answer: {equals: "seed says: planted"}
"""


def write_bundle(directory: Path, url: str) -> Path:
    """goondan.yaml (the swarm pointed at ``url``) and testsuite.yaml (the TestSuite) in
    ``directory``: a bundle directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(SWARM.format(url=url, key=API_KEY))
    (directory / "testsuite.yaml").write_text(SUITE)
    return directory


def tool_output(message: dict[str, Any]) -> dict[str, Any]:
    """The output of the tool result ``message`` carries (``{status, output}`` as JSON)."""
    result = json.loads(message.get("content") or "{}")
    output = result.get("output", result)
    return output if isinstance(output, dict) else {}


def as_asked(reply: Reply, body: dict[str, Any]) -> Reply:
    """``reply`` (a whole Chat Completions answer) as an SSE stream when ``body`` asks for one."""
    if not body.get("stream"):
        return reply
    [choice] = reply.body["choices"]
    return Reply(
        events=openai_stream(choice["message"], choice["finish_reason"], usage=reply.body["usage"])
    )


def answer(agent: str, body: dict[str, Any]) -> Reply:
    """What the local server answers ``agent``, from the conversation in ``body`` (streamed
    when asked)."""
    return as_asked(whole_answer(agent, body), body)


def whole_answer(agent: str, body: dict[str, Any]) -> Reply:
    """What the local server answers ``agent``, as one response."""
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    users = [m for m in messages if m.get("role") == "user"]
    if agent == "lead":
        if last.get("role") == "tool":
            return text_reply(f"lead done: {tool_output(last).get('response', '?')}")
        if str(last.get("content", "")).startswith("delegate:"):
            return call_reply("agents__request", {"target": "helper", "input": "write it"})
        return text_reply(f"hi from lead ({len(users)})")
    asked = str(users[-1].get("content", "")) if users else ""
    if asked.startswith("read"):
        if last.get("role") == "tool":
            return text_reply(f"seed says: {tool_output(last).get('content', '?')}")
        return call_reply("file-system__read", {"path": "seed.txt"})
    if last.get("role") == "tool":
        return text_reply("helper wrote report.txt")
    return call_reply("file-system__write", {"path": "report.txt", "content": "report body"})
