"""A test swarm with misbehaving tools, and helpers to run it for real."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from orchestrator.daemon import Orchestrator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"

SWARM = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: fault}
spec:
  entry: ./fault_tools.py
  exports:
    - name: crash
      parameters: {type: object, properties: {code: {type: integer}}}
    - name: pid
    - name: slow
      parameters: {type: object, properties: {seconds: {type: number}}}
    - name: hold
      idempotent: true  # waiting for a file again is safe: a resumed Turn waits again
      parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    - name: stubborn
      parameters: {type: object, properties: {seconds: {type: number}}}
    - name: block
      parameters: {type: object, properties: {seconds: {type: number}}}
    - name: garbage
    - name: close_pipe
    - name: big
    - name: workdir
    - name: close_fd
      parameters: {type: object, properties: {fd: {type: integer}}}
    - name: chatter
      parameters: {type: object, properties: {count: {type: integer}}}
    - name: odd_delegate
    - name: background
      parameters: {type: object, properties: {seconds: {type: number}}}
    - name: exit
      parameters: {type: object, properties: {code: {type: integer}, how: {type: string}}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: alpha-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^ask (?P<target>\\\\S+) timeout=(?P<ms>\\\\d+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}", timeoutMs: "{ms:int}"}}
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^pid$"}
        call: {tool: fault__pid}
      - when: {input: "^spawn (?P<target>\\\\S+) (?P<key>\\\\S+) cwd=(?P<cwd>\\\\S+)$"}
        call: {tool: agents__spawn, args: {target: "{target}", instanceKey: "{key}", cwd: "{cwd}"}}
      - when: {input: "^spawn (?P<target>\\\\S+) (?P<key>\\\\S+)$"}
        call: {tool: agents__spawn, args: {target: "{target}", instanceKey: "{key}"}}
      - when: {input: "^list$"}
        call: {tool: agents__list}
      - when: {input: "^catalog$"}
        call: {tool: agents__catalog}
      - when: {input: "^tell (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__send, args: {target: "{target}", input: "{text}"}}
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}"
      - when: {toolResult: agents__request}
        reply: "ERROR {errorCode}: {error}"
      - when: {toolResult: fault__pid}
        reply: "{result}"
      - when: {status: ok}
        reply: "{result}"
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
      - reply: "alpha got: {input}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: beta-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^crash$"}
        call: {tool: fault__crash, args: {code: 1}}
      - when: {input: "^bg (?P<s>\\\\S+)$"}
        call: {tool: fault__background, args: {seconds: "{s:number}"}}
      - when: {toolResult: fault__background}
        reply: "started {result}"
      - when: {input: "tool_completion.*output.: .(?P<out>[a-z ]+)"}
        reply: "noticed {out}"
      - when: {input: "^poll (?P<h>\\\\S+)$"}
        call: {tool: pending__status, args: {handle: "{h}"}}
      - when: {toolResult: pending__status}
        reply: "{result.status}"
      - when: {input: "^odd delegate$"}
        call: {tool: fault__odd_delegate}
      - when: {toolResult: fault__odd_delegate}
        reply: "{result.error.code}"
      - when: {input: "^slowask (?P<target>\\\\S+) (?P<text>.+)$"}
        calls:
          - {tool: fault__slow, args: {seconds: 2}}
          - {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {input: "^chatter (?P<n>\\\\d+)$"}
        call: {tool: fault__chatter, args: {count: "{n:int}"}}
      - when: {toolResult: fault__chatter}
        reply: "logged {result}"
      - when: {input: "^closefd (?P<fd>\\\\d)$"}
        call: {tool: fault__close_fd, args: {fd: "{fd:int}"}}
      - when: {toolResult: fault__close_fd}
        reply: "{result}"
      - when: {input: "^workdir$"}
        call: {tool: fault__workdir}
      - when: {toolResult: fault__workdir}
        reply: "{result}"
      - when: {input: "^quit$"}
        call: {tool: fault__crash, args: {code: 0}}
      - when: {input: "^pid$"}
        call: {tool: fault__pid}
      - when: {input: "^slow (?P<s>\\\\S+)$"}
        call: {tool: fault__slow, args: {seconds: "{s:number}"}}
      - when: {input: "^say (?P<text>.+) then crash$"}
        reply: "{text}"
        call: {tool: fault__crash, args: {code: 1}}
      - when: {input: "^say (?P<text>.+) then hold (?P<path>\\\\S+)$"}
        reply: "{text}"
        call: {tool: fault__hold, args: {path: "{path}"}}
      - when: {input: "^hold (?P<path>\\\\S+)$"}
        call: {tool: fault__hold, args: {path: "{path}"}}
      - when: {toolResult: fault__hold}
        reply: "{result}"
      - when: {input: "^stubborn (?P<s>\\\\S+)$"}
        call: {tool: fault__stubborn, args: {seconds: "{s:number}"}}
      - when: {input: "^block (?P<s>\\\\S+)$"}
        call: {tool: fault__block, args: {seconds: "{s:number}"}}
      - when: {input: "^exit (?P<how>\\\\S+)$"}
        call: {tool: fault__exit, args: {code: 3, how: "{how}"}}
      - when: {input: "^garbage$"}
        call: {tool: fault__garbage}
      - when: {input: "^closepipe$"}
        call: {tool: fault__close_pipe}
      - when: {input: "^big$"}
        call: {tool: fault__big}
      - when: {toolResult: fault__big}
        reply: "{result}"
      - when: {input: "^twostep$"}
        calls: [{tool: fault__pid}, {tool: fault__crash, args: {code: 1}}]
      - when: {input: "^restart yourself$"}
        call: {tool: self-restart__request, args: {reason: upgrade}}
      - when: {toolResult: self-restart__request, status: error}
        reply: "ERROR {errorCode}: {error}"
      - when: {toolResult: self-restart__request}
        reply: "restarting soon"
      - when: {input: "^ask (?P<target>\\\\S+) (?P<text>.+)$"}
        call: {tool: agents__request, args: {target: "{target}", input: "{text}"}}
      - when: {toolResult: agents__request, status: ok}
        reply: "{result.response}"
      - when: {toolResult: agents__request}
        reply: "ERROR {errorCode}: {error}"
      - when: {toolResult: fault__pid}
        reply: "{result}"
      - when: {toolResult: fault__slow}
        reply: "{result}"
      - when: {toolResult: fault__exit}
        reply: "ERROR {errorCode}: {error}"
      - when: {toolResult: fault__garbage}
        reply: "garbage written"
      - reply: "beta got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: alpha}
spec:
  modelConfig: {modelRef: Model/alpha-brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - Tool/fault
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: beta}
spec:
  modelConfig: {modelRef: Model/beta-brain}
  tools:
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: self-restart, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: pending, package: "@goondan/base"}}
    - Tool/fault
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha, Agent/beta]
  policy:
    shutdown: {gracePeriodSeconds: GRACE}
    crash: {maxTurnAttempts: ATTEMPTS}
"""


def write_swarm(directory: Path, grace: float = 5, extra: str = "", turn_attempts: int = 1) -> Path:
    """goondan.yaml of the test swarm in ``directory`` (``extra``: more YAML documents).

    ``turn_attempts`` is ``policy.crash.maxTurnAttempts``: 1 by default, so a Turn whose
    tool kills its agent is answered ``AGENT_CRASHED`` at once (most tests of this swarm are
    about the process); a Turn carried over its agent's restart needs more.
    """
    path = directory / "goondan.yaml"
    text = SWARM.replace("GRACE", str(grace)).replace("ATTEMPTS", str(turn_attempts))
    path.write_text(text + (f"---\n{extra}" if extra else ""))
    # Entry modules live beside the bundle (they must, unless the operator allows otherwise).
    shutil.copy(FIXTURES / "fault_tools.py", directory / "fault_tools.py")
    return path


@asynccontextmanager
async def started(orchestrator: Orchestrator) -> AsyncIterator[Orchestrator]:
    """``orchestrator`` started in this event loop for the block and shut down after it, each
    within a bound (a start 30 s, a shutdown 60 s), so no test waits on a stuck swarm forever."""
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        yield orchestrator
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()


@asynccontextmanager
async def running_swarm(
    directory: Path, grace: float = 5, extra: str = "", turn_attempts: int = 1
) -> AsyncIterator[Orchestrator]:
    """The test swarm running in this event loop (state under ``directory/state``)."""
    async with started(
        Orchestrator.from_bundle(
            write_swarm(directory, grace, extra, turn_attempts), state_dir=directory / "state"
        )
    ) as orchestrator:
        yield orchestrator
