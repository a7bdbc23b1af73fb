"""A swarm for the AG-UI front door, served on loopback TCP with a token, and a reader of its
event streams decoded with the official ``ag-ui-protocol`` types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event, RunAgentInput
from pydantic import TypeAdapter

from orchestrator.daemon import Orchestrator
from tests.support.listening import serving, tcp_url

TOKEN = "agui-test-token"
"""The daemon's API token (every TCP request carries it)."""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: desk-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {input: "^read (?P<file>\\\\S+)$"}
        call: {tool: file-system__read, args: {path: "{file}"}}
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^break$"}
        fail: "the model is down"
      - when: {toolResult: file-system__write, status: ok}
        reply: "wrote {result.size} bytes to {result.path}"
      - when: {toolResult: file-system__read, status: ok}
        reply: "read: {result.content}"
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}"
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
      - reply: "heard: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: scribe}
spec:
  description: Writes and reads notes in its thread's folder.
  modelConfig: {modelRef: Model/desk-brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: guarded}
spec:
  modelConfig: {modelRef: Model/desk-brain}
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
  modelConfig: {modelRef: Model/desk-brain}
  expose: []
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: desk}
spec:
  entryAgent: Agent/scribe
  agents: [Agent/scribe, Agent/guarded, Agent/backroom]
  policy:
    requestTimeoutSeconds: 120
    shutdown: {gracePeriodSeconds: 5}
"""

EVENT = TypeAdapter(Event)
"""Any AG-UI event, as the package's pydantic models read it."""


@asynccontextmanager
async def agui_swarm(directory: Path) -> AsyncIterator[Orchestrator]:
    """The swarm running in this event loop, its API on loopback TCP with :data:`TOKEN`."""
    path = directory / "goondan.yaml"
    path.write_text(SWARM)
    async with serving(path, TOKEN) as orchestrator:
        yield orchestrator


base_url = tcp_url
"""The daemon's TCP address."""


async def run_events(
    http: httpx.AsyncClient,
    agent: str,
    run_input: RunAgentInput,
    headers: dict[str, str] | None = None,
) -> tuple[httpx.Response, list[BaseEvent]]:
    """One AG-UI run: the response, and every event of its stream, decoded."""
    body: dict[str, Any] = run_input.model_dump(mode="json", by_alias=True)
    sent = {"Accept": "text/event-stream", **(headers or {})}
    events: list[BaseEvent] = []
    async with http.stream("POST", f"/ag-ui/{agent}", json=body, headers=sent) as response:
        if response.status_code != 200:
            await response.aread()
            return response, events
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(EVENT.validate_json(line.removeprefix("data: ")))
    return response, events
