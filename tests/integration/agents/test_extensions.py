"""Extensions declared in goondan.yaml, in real agent processes."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import sys
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import FIXTURES, write_swarm
from tests.support.tool_context import MARK, processes_marked

pytestmark = pytest.mark.timeout(120)

EXTENSIONS = """
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: counter}
spec:
  entry: ./counting_extension.py
  config: {refuse: [fault__crash]}
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: broken}
spec:
  entry: ./failing_extension.py
"""


def swarm_with(tmp_path: Path, beta_extensions: str) -> Path:
    path = write_swarm(tmp_path)
    beta_tools_end = (
        '    - {ref: {kind: Tool, name: pending, package: "@goondan/base"}}\n    - Tool/fault\n'
    )
    assert beta_tools_end in path.read_text()
    text = path.read_text().replace(
        beta_tools_end, f"{beta_tools_end}  extensions: {beta_extensions}\n"
    )
    text = text.replace(
        '      - when: {input: "^crash$"}',
        '      - when: {input: "^count$"}\n        call: {tool: counter__read}\n'
        '      - when: {toolResult: counter__read}\n        reply: "turns={result}"\n'
        '      - when: {input: "^crash$"}',
    ).replace(
        "      - when: {toolResult: fault__garbage}",
        '      - when: {toolResult: fault__crash}\n        reply: "ERROR {errorCode}"\n'
        "      - when: {toolResult: fault__garbage}",
    )
    path.write_text(text + EXTENSIONS)
    for module in ("counting_extension.py", "failing_extension.py"):
        shutil.copy(FIXTURES / module, tmp_path / module)
    return path


async def test_extension_middleware_tools_and_state_survive_a_kill(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        swarm_with(tmp_path, "[Extension/counter]"), state_dir=tmp_path / "s"
    )
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            assert (await orchestrator.request("count", agent="beta")).output == "turns=1"
            # the toolCall layer refuses the crash tool before it runs: beta stays up
            pid = orchestrator.supervisor.handle("beta").pid
            refused = await orchestrator.request("crash", agent="beta")
            assert refused.output == "ERROR E_REFUSED"
            assert orchestrator.supervisor.handle("beta").pid == pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            handle = orchestrator.supervisor.handle("beta")
            await orchestrator.supervisor.wait_until(
                lambda: handle.pid not in (None, pid) and handle.status is ProcessStatus.IDLE
            )
            answer = await orchestrator.request("count", agent="beta")
            assert answer.output == "turns=3"  # two Turns before the kill, on disk
            assert orchestrator.supervisor.handle("beta").pid != pid
        finally:
            await orchestrator.shutdown()
    state = tmp_path / "s" / "agents" / "beta" / "instances" / "default" / "extensions"
    assert (state / "counter.json").read_text().replace(" ", "").replace("\n", "") == '{"turns":3}'


async def test_a_failing_register_is_a_boot_failure_naming_the_extension(tmp_path: Path) -> None:
    path = swarm_with(tmp_path, "[Extension/counter, Extension/broken]")
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "s")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            answer = await orchestrator.request("count", agent="beta")
            assert answer.status == "error"
            handle = orchestrator.supervisor.handle("beta")
            assert handle.boot_error is not None
            assert "Extension/broken" in handle.boot_error
            assert "E_EXT_INIT" in handle.boot_error
            assert "cannot reach the license server" in handle.boot_error
            # the other agent is unaffected
            assert (await orchestrator.request("hi")).output == "alpha got: hi"
        finally:
            await orchestrator.shutdown()


MCP_SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"
MCP_SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: brain}}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {{input: "^add$"}}
        call: {{tool: mcp__add, args: {{a: 20, b: 22}}}}
      - when: {{input: "^pid$"}}
        call: {{tool: mcp__pid}}
      - when: {{status: ok}}
        reply: "{{result.result}}"
      - reply: "ERROR {{errorCode}}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: bridge}}
spec:
  modelConfig: {{modelRef: Model/brain}}
  extensions:
    - ref: {{kind: Extension, name: mcp, package: "@goondan/base"}}
      config:
        servers:
          - {{name: local, command: {python}, args: [{server}], env: {{{mark}: {token}}}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/bridge
  agents: [Agent/bridge]
"""


async def test_mcp_tools_in_an_agent_process_and_no_server_outlives_a_killed_agent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "goondan.yaml"
    token = secrets.token_hex(8)
    path.write_text(
        MCP_SWARM.format(python=sys.executable, server=MCP_SERVER, mark=MARK, token=token)
    )
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "s")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            assert (await orchestrator.request("add")).output == "42"
            # The server runs in the sandbox: its pid there means nothing here, its mark does.
            server_pids = processes_marked(token)
            assert server_pids
            handle = orchestrator.supervisor.handle("bridge")
            agent_pid = handle.pid
            assert agent_pid is not None
            os.kill(agent_pid, signal.SIGKILL)
            await orchestrator.supervisor.wait_until(
                lambda: handle.pid not in (None, agent_pid) and handle.status is ProcessStatus.IDLE
            )
            # the server saw its stdin close and ended with the agent
            for _ in range(400):
                if not set(processes_marked(token)) & set(server_pids):
                    break
                await asyncio.sleep(0.025)
            else:
                raise AssertionError(f"MCP server {server_pids} outlived its agent")
            assert (await orchestrator.request("add")).output == "42"  # a new server
        finally:
            await orchestrator.shutdown()
