"""Agent.spec.limits.memoryMiB: a runaway tool meets the limit, not the host's memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ExitInfo

pytestmark = pytest.mark.timeout(120)

HOG = """\
def hog(ctx, args):
    block = bytearray(int(args["mib"]) * 1024 * 1024)
    return len(block) // (1024 * 1024)


handlers = {"hog": hog}
"""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: mem}
spec:
  entry: ./hog.py
  exports:
    - name: hog
      parameters: {type: object, properties: {mib: {type: integer}}, required: [mib]}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^hog (?P<n>\\\\d+)$"}
        call: {tool: mem__hog, args: {mib: "{n:int}"}}
      - when: {status: ok}
        reply: "held {result} MiB"
      - when: {status: error}
        reply: "ERROR {errorCode} {error}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: hungry}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [Tool/mem]
  limits: {memoryMiB: 256}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/hungry, agents: [Agent/hungry]}
"""


async def test_a_runaway_allocation_fails_inside_the_limit_and_the_agent_stays(
    tmp_path: Path,
) -> None:
    (tmp_path / "hog.py").write_text(HOG)
    (tmp_path / "goondan.yaml").write_text(SWARM)
    orchestrator = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            assert (await orchestrator.request("hog 32")).output == "held 32 MiB"
            pid = orchestrator.supervisor.handle("hungry").pid
            refused = await orchestrator.request("hog 4096")  # 4 GiB: far past the limit
            assert refused.output.startswith("ERROR E_TOOL"), refused
            assert "MemoryError" in refused.output or "memory" in refused.output.lower()
            assert orchestrator.supervisor.handle("hungry").pid == pid
            assert (await orchestrator.request("hog 32")).output == "held 32 MiB"
        finally:
            await orchestrator.shutdown()


def test_the_reserved_exit_codes_read_as_their_reason() -> None:
    assert ExitInfo(72).describe() == "exit code 72 (memory limit reached)"
    assert ExitInfo(71).describe() == "exit code 71 (a tool broke stdin, stdout or stderr)"
    assert ExitInfo(1).describe() == "exit code 1"
