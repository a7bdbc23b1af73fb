"""A swarm whose tools have countable effects and kill their own agent process on purpose:
``front`` (which may ask ``back``) and ``back``, both with the ``ledger`` tool of
``tests/fixtures/bundles/ledger_tool.py``. Each call appends ``EXPORT KEY`` to the effects
file; the ``*_die`` exports SIGKILL their agent right after the effect the first time for a
key, ``poison`` every time. ``note_die`` and ``poison`` are declared idempotent (so a resumed
Turn runs them again: ``poison`` kills its agent on every attempt), the others are not.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from orchestrator.daemon import Orchestrator
from tests.support.model_server import call_reply, text_reply
from tests.support.swarm import FIXTURES, started
from tests.support.wire_server import Reply

KEY = {"type": "object", "properties": {"key": {"type": "string"}}}

SWARM = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: ledger}
spec:
  entry: ./ledger_tool.py
  config: {effects: "EFFECTS"}
  exports:
    - {name: append, parameters: KEY}
    - {name: append_die, parameters: KEY}
    - {name: note_die, idempotent: true, parameters: KEY}
    - {name: poison, idempotent: true, parameters: KEY}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^append (?P<k>\\\\S+)$"}
        call: {tool: ledger__append_die, args: {key: "{k}"}}
      - when: {input: "^note (?P<k>\\\\S+)$"}
        call: {tool: ledger__note_die, args: {key: "{k}"}}
      - when: {input: "^poison (?P<k>\\\\S+)$"}
        call: {tool: ledger__poison, args: {key: "{k}"}}
      - when: {input: "^work (?P<k>\\\\S+)$"}
        call: {tool: ledger__append, args: {key: "{k}"}}
      - when: {input: "^ask (?P<k>\\\\S+)$"}
        call: {tool: agents__request, args: {target: back, input: "append {k}"}}
      - when: {input: "^relay (?P<k>\\\\S+)$"}
        call: {tool: agents__request, args: {target: back, input: "work {k}"}}
      - when: {toolResult: agents__request, status: ok}
        reply: "front<{result.response}>"
      - when: {toolResult: agents__request}
        reply: "front-error {errorCode}"
      - when: {status: ok}
        reply: "done {result.count}"
      - when: {status: error}
        reply: "unsure {errorCode}"
      - reply: "echo {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: front}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - Tool/ledger
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: back}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [Tool/ledger]
  policy: {crash: {maxTurnAttempts: BACK_ATTEMPTS}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/front
  agents: [Agent/front, Agent/back]
  policy:
    requestTimeoutSeconds: 60
    shutdown: {gracePeriodSeconds: 5}
    crash: {maxTurnAttempts: ATTEMPTS}
"""


def write_ledger_swarm(directory: Path, attempts: int = 2, back_attempts: int = 3) -> Path:
    """goondan.yaml of the ledger swarm in ``directory``; effects go to ``effects.txt``
    beside it. ``attempts``: the Swarm's ``maxTurnAttempts``; ``back_attempts``: back's."""
    path = directory / "goondan.yaml"
    text = SWARM.replace("EFFECTS", str(directory / "effects.txt"))
    text = text.replace("KEY", json.dumps(KEY)).replace("BACK_ATTEMPTS", str(back_attempts))
    path.write_text(text.replace("ATTEMPTS", str(attempts)))
    shutil.copy(FIXTURES / "ledger_tool.py", directory / "ledger_tool.py")
    return path


def effects(directory: Path) -> list[str]:
    """The effects the ledger's calls had, in order."""
    path = directory / "effects.txt"
    return path.read_text().splitlines() if path.exists() else []


def runtime_events(orchestrator: Orchestrator, kind: str) -> list[dict[str, Any]]:
    """The runtime events of type ``kind`` in the daemon's event log."""
    path = orchestrator.state_dir / "runtime-events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("type") == kind]


@asynccontextmanager
async def ledger_swarm(directory: Path, **options: int) -> AsyncIterator[Orchestrator]:
    """The ledger swarm running in this event loop (state under ``directory/state``)."""
    path = write_ledger_swarm(directory, **options)
    async with started(
        Orchestrator.from_bundle(path, state_dir=directory / "state")
    ) as orchestrator:
        yield orchestrator


MODEL_SWARM = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: ledger}
spec:
  entry: ./ledger_tool.py
  config: {effects: "EFFECTS"}
  exports:
    - {name: append, parameters: KEY}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: gpt}
spec:
  provider: openai
  model: gpt-test
  baseUrl: URL
  apiKey: {value: sk-local}
  maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: front}
spec:
  modelConfig: {modelRef: Model/gpt}
  prompt: {system: You are front.}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - Tool/ledger
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: back}
spec:
  modelConfig: {modelRef: Model/gpt}
  prompt: {system: You are back.}
  tools: [Tool/ledger]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/front
  agents: [Agent/front, Agent/back]
  policy:
    requestTimeoutSeconds: 120
    shutdown: {gracePeriodSeconds: 5}
"""
"""The ledger swarm on a local OpenAI-compatible model server (``URL``): a test counts every
model call, and ``front``'s and ``back``'s Turns go through the non-idempotent ``append``."""


def write_model_ledger_swarm(directory: Path, url: str) -> Path:
    """goondan.yaml of :data:`MODEL_SWARM` on the model server at ``url``, in ``directory``;
    effects go to ``effects.txt`` beside it."""
    path = directory / "goondan.yaml"
    text = MODEL_SWARM.replace("EFFECTS", str(directory / "effects.txt")).replace("URL", url)
    path.write_text(text.replace("KEY", json.dumps(KEY)))
    shutil.copy(FIXTURES / "ledger_tool.py", directory / "ledger_tool.py")
    return path


def ledger_model(agent: str, body: dict[str, Any]) -> Reply:
    """The model of :data:`MODEL_SWARM`: ``work KEY`` calls the ledger, ``relay KEY`` asks back to; a tool result
    is answered in text."""
    if "messages" not in body:
        return text_reply("")
    last = body["messages"][-1]
    if last["role"] == "tool":
        interrupted = "E_TOOL_INTERRUPTED" in str(last.get("content"))
        return text_reply(f"{agent}: {'unsure' if interrupted else 'done'}")
    verb, _, key = str(last.get("content", "")).partition(" ")
    if verb == "relay":
        arguments = {"target": "back", "input": f"work {key}"}
        return call_reply("agents__request", arguments, call_id=f"call_relay_{key}")
    return call_reply("ledger__append", {"key": key}, call_id=f"call_work_{key}")
