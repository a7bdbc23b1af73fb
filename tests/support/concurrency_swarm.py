"""A swarm of three agents alike but for ``policy.concurrency``: ``queuer`` (the Swarm's
default, ``enqueue``), ``rejecter`` (``reject``) and ``interrupter`` (``interrupt``).

Each answers ``hold PATH`` by calling ``fault__hold`` (which runs until PATH exists) and then
``held: <result>``; ``... slow`` by calling ``fault__slow`` (20 ms) and then, like anything
else, ``got: <the newest user message>``; ``ask AGENT TEXT`` by a request to that agent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.swarm import FIXTURES

MODES = {"queuer": "enqueue", "rejecter": "reject", "interrupter": "interrupt"}

HEAD = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: fault}
spec:
  entry: ./fault_tools.py
  exports:
    - name: hold
      parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    - name: slow
      parameters: {type: object, properties: {seconds: {type: number}}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^hold (?P<path>\\\\S+)$"}
        call: {tool: fault__hold, args: {path: "{path}"}}
      - when: {toolResult: fault__hold}
        reply: "held: {result}"
      - when: {input: " slow$"}
        call: {tool: fault__slow, args: {seconds: 0.02}}
      - when: {toolResult: fault__slow}
        reply: "got: {input}"
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}"
      - when: {toolResult: agents__request}
        reply: "ERROR {errorCode}"
      - reply: "got: {input}"
"""

AGENT = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/brain}}
  tools:
    - {{ref: {{kind: Tool, name: agents, package: "@goondan/base"}}}}
    - Tool/fault
{policy}"""

SWARM = """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: modes}}
spec:
  entryAgent: Agent/queuer
  agents: [{agents}]
  policy:
    shutdown: {{gracePeriodSeconds: 5}}
{extra}"""


def write_concurrency_swarm(directory: Path, swarm_policy: str = "") -> Path:
    """goondan.yaml of the swarm in ``directory``; ``swarm_policy`` (lines such as
    ``concurrency: reject``) is added to the Swarm's policy, whose concurrency ``queuer``
    follows."""
    documents = [HEAD]
    for name, mode in MODES.items():
        own = "" if name == "queuer" else f"  policy: {{concurrency: {mode}}}\n"
        documents.append(AGENT.format(name=name, policy=own))
    agents = ", ".join(f"Agent/{name}" for name in MODES)
    extra = "".join(f"    {line}\n" for line in swarm_policy.splitlines())
    documents.append(SWARM.format(agents=agents, extra=extra))
    path = directory / "goondan.yaml"
    path.write_text("".join(documents))
    shutil.copy(FIXTURES / "fault_tools.py", directory / "fault_tools.py")
    return path
