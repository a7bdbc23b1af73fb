"""A two-agent swarm (``lead`` asks ``helper``) on scripted models, for Turn outcomes and
answers between agents seen through real processes."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from orchestrator.daemon import Orchestrator
from tests.support.swarm import FIXTURES, started

PAIR = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: fault}
spec:
  entry: ./fault_tools.py
  exports:
    - name: slow
      parameters: {type: object, properties: {seconds: {type: number}}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: lead-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^later timeout=(?P<ms>\\\\d+) (?P<text>.+)$"}
        call:
          tool: agents__request
          args: {target: helper, input: "{text}", async: true, timeoutMs: "{ms:int}"}
      - when: {input: "^later (?P<text>.+)$"}
        call:
          tool: agents__request
          args: {target: helper, input: "{text}", async: true, metadata: {topic: papers}}
      - when: {input: "^ask (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: helper, input: "{text}"}}
      - when: {input: "inter_agent_response"}
        reply: "noted"
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}|{result.correlationId}|{result.eventId}"
      - when: {toolResult: agents__request}
        reply: "ERROR {errorCode}: {error}"
      - reply: "lead got: {input}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: helper-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^loop$"}
        reply: "still working"
        call: {tool: agents__catalog}
      - when: {input: "^silent loop$"}
        call: {tool: agents__catalog}
      - when: {toolResult: agents__catalog}
        call: {tool: agents__catalog}
      - when: {input: "^slow (?P<s>\\\\S+)$"}
        call: {tool: fault__slow, args: {seconds: "{s:number}"}}
      - when: {toolResult: fault__slow}
        reply: "slept"
      - reply: "helper got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: lead}
spec:
  modelConfig: {modelRef: Model/lead-brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/helper-brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - Tool/fault
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: pair}
spec:
  entryAgent: Agent/lead
  agents: [Agent/lead, Agent/helper]
  policy:
    maxStepsPerTurn: 3
    shutdown: {gracePeriodSeconds: 5}
"""


def write_pair(directory: Path, policy: str = "") -> Path:
    """goondan.yaml of the pair in ``directory``; ``policy``: more lines of its policy."""
    path = directory / "goondan.yaml"
    text = PAIR + "".join(f"    {line}\n" for line in policy.splitlines())
    path.write_text(text)
    shutil.copy(FIXTURES / "fault_tools.py", directory / "fault_tools.py")
    return path


@asynccontextmanager
async def running_pair(directory: Path, policy: str = "") -> AsyncIterator[Orchestrator]:
    """The pair running in this event loop (state under ``directory/state``)."""
    async with started(
        Orchestrator.from_bundle(write_pair(directory, policy), state_dir=directory / "state")
    ) as orchestrator:
        yield orchestrator
