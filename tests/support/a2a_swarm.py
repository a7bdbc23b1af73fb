"""A swarm for the A2A front door: a scribe that keeps notes (no approval), a clerk whose
writes wait for an operator, an agent the door does not show; served on loopback TCP with a
token, and driven with the official ``a2a-sdk`` client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest

from orchestrator.daemon import Orchestrator
from tests.support.listening import serving, tcp_url

TOKEN = "sk-a2a-test"
"""The daemon's API token in these tests."""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scribe-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^note (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {input: "^read (?P<file>\\\\S+)$"}
        call: {tool: file-system__read, args: {path: "{file}"}}
      - when: {input: "^loop$"}
        call: {tool: file-system__list, args: {}}
      - when: {toolResult: file-system__list}
        call: {tool: file-system__list, args: {}}
      - when: {toolResult: file-system__write, status: ok}
        reply: "noted in {result.path}"
      - when: {toolResult: file-system__read, status: ok}
        reply: "read: {result.content}"
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
      - reply: "{agent} got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: scribe}
spec:
  description: Keeps notes in its workspace and reads them back.
  modelConfig: {modelRef: Model/scribe-brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: clerk}
spec:
  modelConfig: {modelRef: Model/scribe-brain}
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
  modelConfig: {modelRef: Model/scribe-brain}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: notes}
spec:
  entryAgent: Agent/scribe
  agents: [Agent/scribe, Agent/clerk, Agent/backroom]
  policy:
    maxStepsPerTurn: 3
    onMaxSteps: error
    requestTimeoutSeconds: 600
    shutdown: {gracePeriodSeconds: 5}
"""


def write_a2a_swarm(directory: Path) -> Path:
    """goondan.yaml of the A2A swarm in ``directory``."""
    path = directory / "goondan.yaml"
    path.write_text(SWARM)
    return path


@asynccontextmanager
async def a2a_swarm(directory: Path, token: str | None = TOKEN) -> AsyncIterator[Orchestrator]:
    """The swarm running in this event loop, listening on a loopback port (with ``token``)."""
    async with serving(write_a2a_swarm(directory), token) as orchestrator:
        yield orchestrator


base_url = tcp_url
"""``http://127.0.0.1:PORT`` of the swarm's TCP listener."""


def http_client(token: str | None = TOKEN) -> httpx.AsyncClient:
    """An HTTP client carrying the daemon's token (for the A2A SDK to use)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(headers=headers, timeout=60)


async def a2a_client(
    http: httpx.AsyncClient, url: str, *, streaming: bool = False
) -> tuple[Client, str]:
    """The SDK's client of the agent at ``url`` (its card resolved), and the card's
    JSON-RPC URL."""
    card = await A2ACardResolver(http, url).get_agent_card()
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return ClientFactory(config).create(card), card.supported_interfaces[0].url


def user_says(text: str, context_id: str = "") -> SendMessageRequest:
    """A user's text message (a fresh message id; in ``context_id`` when given)."""
    message = Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        context_id=context_id,
        parts=[Part(text=text)],
    )
    return SendMessageRequest(message=message)
