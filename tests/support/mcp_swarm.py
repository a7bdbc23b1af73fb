"""A swarm for the MCP front door: agents with descriptions, one that keeps notes in its
instance's workdir, one whose writes need an operator's approval, one hidden from MCP."""

from __future__ import annotations

from pathlib import Path

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^note (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: note.txt, content: "{text}"}}
      - when: {input: "^recall$"}
        call: {tool: file-system__read, args: {path: note.txt}}
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {toolResult: file-system__write, status: ok}
        reply: "wrote {result.size} bytes to {result.path}"
      - when: {toolResult: file-system__read, status: ok}
        reply: "read: {result.content}"
      - when: {toolResult: file-system__read, status: error}
        call: {tool: file-system__read, args: {path: note.txt}}
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
      - reply: "{agent} got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: scribe}
spec:
  description: Keeps one note per conversation and reads it back.
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: clerk}
spec:
  description: Writes files, once an operator approves each write.
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
  toolPolicy:
    approval:
      tools: [file-system__write]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: backroom}
spec:
  expose: [openai]
  modelConfig: {modelRef: Model/brain}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: notes}
spec:
  entryAgent: Agent/scribe
  agents: [Agent/scribe, Agent/clerk, Agent/backroom]
  policy:
    requestTimeoutSeconds: 600
    maxStepsPerTurn: 3
    onMaxSteps: error
    shutdown: {gracePeriodSeconds: 5}
"""
"""``recall`` in a conversation with no note reads a missing file until the Turn runs out
of Steps: a failed Turn (``E_MAX_STEPS``)."""


def write_mcp_swarm(directory: Path) -> Path:
    """goondan.yaml of the MCP swarm in ``directory``."""
    path = directory / "goondan.yaml"
    path.write_text(SWARM)
    return path
