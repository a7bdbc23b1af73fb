"""Programs a tool starts get only fds 0-2: they cannot reach the agent's IPC pipe or the fork
server's and resource tracker's pipes, so writing to any descriptor harms nobody."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator

pytestmark = pytest.mark.timeout(120)

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^run (?P<command>.+)$"}
        call: {tool: bash__exec, args: {command: "{command}"}}
      - when: {toolResult: bash__exec}
        reply: "{result.stdout}"
      - reply: "other here"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: shell}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [{ref: {kind: Tool, name: bash, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: other}
spec:
  modelConfig: {modelRef: Model/brain}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/shell
  agents: [Agent/shell, Agent/other]
"""


async def test_tool_programs_see_only_the_standard_descriptors(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(SWARM)
    orchestrator = Orchestrator(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            listed = await orchestrator.request("run ls /proc/self/fd")
            # 3 is the directory ls itself opened to list them
            assert listed["output"].split() == ["0", "1", "2", "3"], listed
            shell_pid = orchestrator.supervisor.handles["shell"].pid
            # The attack that used to kill the fork server: write to every other descriptor.
            attack = "for fd in $(seq 3 64); do (printf x >&$fd) 2>/dev/null; done; echo done"
            assert (await orchestrator.request(f"run {attack}"))["output"].strip() == "done"
            # The fork server still starts agents, and no agent was seen to exit.
            assert (await orchestrator.request("hi", agent="other"))["output"] == "other here"
            assert orchestrator.supervisor.handles["shell"].pid == shell_pid
            assert orchestrator.supervisor.handles["shell"].last_exit is None
        finally:
            await orchestrator.shutdown()
