"""A swarm whose agents need an operator's approval for some tools, and helpers to drive it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from orchestrator.daemon import Orchestrator
from tests.support.swarm import FIXTURES, started

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: clerk-brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^write (?P<file>\\\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{file}", content: "{text}"}}
      - when: {input: "^run (?P<cmd>.+)$"}
        call: {tool: bash__exec, args: {command: "{cmd}"}}
      - when: {input: "^read (?P<file>\\\\S+)$"}
        call: {tool: file-system__read, args: {path: "{file}"}}
ROGUE_RULES      - when: {toolResult: file-system__write, status: ok}
        reply: "wrote {result.size} bytes to {result.path}"
      - when: {toolResult: bash__exec, status: ok}
        reply: "ran: {result.stdout}"
      - when: {toolResult: file-system__read, status: ok}
        reply: "read: {result.content}"
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
      - reply: "clerk got: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: clerk}
spec:
  modelConfig: {modelRef: Model/clerk-brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
  toolPolicy:
    approval:
      tools: [bash__exec, file-system__write]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: hasty}
spec:
  modelConfig: {modelRef: Model/clerk-brain}
  tools:
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
  toolPolicy:
    approval:
      tools: [file-system__write]
      timeoutSeconds: HASTY_TIMEOUT
ROGUE---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/clerk
  agents: [Agent/clerk, Agent/hastyROGUE_REF]
  policy:
    requestTimeoutSeconds: 600
    shutdown: {gracePeriodSeconds: 5}
"""


ROGUE = """\
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: shell}
spec:
  entry: ./shell_tool.py
  exports:
    - name: run
      parameters: {type: object, properties: {command: {type: string}}, required: [command]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: rogue}
spec:
  modelConfig: {modelRef: Model/clerk-brain}
  tools:
    - {ref: {kind: Tool, name: shell}}
"""
"""An agent whose shell needs nobody's approval (``shell CMD`` runs CMD as a child of the
agent and answers ``ran: <its output>``)."""
ROGUE_RULES = """\
      - when: {input: "^shell (?P<cmd>.+)$"}
        call: {tool: shell__run, args: {command: "{cmd}"}}
      - when: {toolResult: shell__run}
        reply: "ran: {result.stdout}"
"""
"""The clerk-brain rules of the rogue agent's shell."""


def write_approval_swarm(directory: Path, hasty_timeout: float = 1, rogue: bool = False) -> Path:
    """goondan.yaml of the approval swarm in ``directory`` (with ``rogue``: and the agent
    :data:`ROGUE`)."""
    path = directory / "goondan.yaml"
    text = SWARM.replace("HASTY_TIMEOUT", str(hasty_timeout))
    text = text.replace("ROGUE_REF", ", Agent/rogue" if rogue else "")
    # Only the rogue agent has the shell tool: without it, rules naming it would not validate.
    text = text.replace("ROGUE_RULES", ROGUE_RULES if rogue else "")
    path.write_text(text.replace("ROGUE---", ROGUE + "---" if rogue else "---"))
    if rogue:  # entry modules live beside the bundle
        shutil.copy(FIXTURES / "shell_tool.py", directory / "shell_tool.py")
    return path


@asynccontextmanager
async def approval_swarm(
    directory: Path, hasty_timeout: float = 1, rogue: bool = False, **options: Any
) -> AsyncIterator[Orchestrator]:
    """The approval swarm running in this event loop (state under ``directory/state``);
    ``options`` go to the :class:`Orchestrator` (``api_listen``, ``api_token``)."""
    path = write_approval_swarm(directory, hasty_timeout, rogue)
    async with started(
        Orchestrator.from_bundle(path, state_dir=directory / "state", **options)
    ) as orchestrator:
        yield orchestrator


class EventWaiter:
    """Runtime events of a running daemon as they happen (its live hub), awaited by type."""

    def __init__(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self.queue = queue
        self.seen: list[dict[str, Any]] = []

    async def next(self, event_type: str, deadline: float = 30, **fields: Any) -> dict[str, Any]:
        """The next event of ``event_type`` whose fields include ``fields``."""
        async with asyncio.timeout(deadline):
            while True:
                event = await self.queue.get()
                self.seen.append(event)
                if event.get("type") == event_type and all(
                    event.get(k) == v for k, v in fields.items()
                ):
                    return event


@asynccontextmanager
async def watching(orchestrator: Orchestrator) -> AsyncIterator[EventWaiter]:
    """Subscribe to ``orchestrator``'s runtime events for the block."""
    async with orchestrator.live.subscribe() as subscription:
        yield EventWaiter(subscription.queue)


def runtime_events(state_dir: Path) -> list[dict[str, Any]]:
    """Every line of the daemon's runtime event log."""
    path = state_dir / "runtime-events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_daemon(directory: Path) -> subprocess.Popen[bytes]:
    """``python -m orchestrator run goondan.yaml`` in its own session, JSON logs on stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def kill_daemon(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the daemon's whole session (its agents too) and reap it."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    if process.stderr is not None:
        process.stderr.close()
