"""Programs a tool starts get only fds 0-2: they cannot reach the agent's IPC pipe or the fork
server's and resource tracker's pipes, so writing to any descriptor harms nobody."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from tests.support.tool_context import MARK, kill_if_alive, processes_marked, read_fifo

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
    orchestrator = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            listed = await orchestrator.request("run ls /proc/self/fd")
            # 3 is the directory ls itself opened to list them
            assert listed.output.split() == ["0", "1", "2", "3"], listed
            shell_pid = orchestrator.supervisor.handle("shell").pid
            # The attack that used to kill the fork server: write to every other descriptor.
            attack = "for fd in $(seq 3 64); do (printf x >&$fd) 2>/dev/null; done; echo done"
            assert (await orchestrator.request(f"run {attack}")).output.strip() == "done"
            # The fork server still starts agents, and no agent was seen to exit.
            assert (await orchestrator.request("hi", agent="other")).output == "other here"
            assert orchestrator.supervisor.handle("shell").pid == shell_pid
            assert orchestrator.supervisor.handle("shell").last_exit is None
        finally:
            await orchestrator.shutdown()


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int) -> None:
    """Return once ``pid`` has exited (a SIGKILL is delivered asynchronously); a pidfd becomes
    readable at the exit, so nothing polls. Bounded by the caller's timeout."""
    import os

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    exited = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, exited.set)
    try:
        await exited.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


DETACH = (
    "setsid sh -c 'echo $$ > {name}.tmp && mv {name}.tmp {name}.pid; exec sleep 300' "
    ">/dev/null 2>&1 < /dev/null & while [ ! -s {name}.pid ]; do :; done; echo started"
)


async def test_a_detached_program_ends_with_its_sandboxed_call(tmp_path: Path) -> None:
    """In the sandbox a program that leaves the call's process group (``setsid``) is still in
    the call's PID namespace, which ends with the call."""
    import os
    import secrets

    fifos = tmp_path / "fifos"
    fifos.mkdir()
    os.mkfifo(fifos / "ready")
    os.mkfifo(fifos / "go")
    tool = '{ref: {kind: Tool, name: bash, package: "@goondan/base"}}'
    visible = f'{{{tool[1:-1]}, config: {{sandbox: {{readWritePaths: ["{fifos}"]}}}}}}'
    (tmp_path / "goondan.yaml").write_text(SWARM.replace(f"tools: [{tool}]", f"tools: [{visible}]"))
    orchestrator = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    token = secrets.token_hex(8)
    # The detached program says it runs itself: only once it has been exec'd with the exported
    # marker does its environment (what the test finds it by) hold it.
    command = (
        f"export {MARK}={token}; "
        f"setsid sh -c 'echo go > {fifos}/ready; exec sleep 300' >/dev/null 2>&1 </dev/null & "
        f"read line < {fifos}/go; echo started"
    )
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            request = asyncio.create_task(orchestrator.request(f"run {command}"))
            await read_fifo(fifos / "ready")
            detached = processes_marked(token)
            go = os.open(fifos / "go", os.O_RDWR)
            try:
                os.write(go, b"go\n")
                assert detached
                assert (await request).output.strip() == "started"
                for pid in detached:
                    await gone(pid)
            finally:
                os.close(go)
                for pid in detached:
                    kill_if_alive(pid)
        finally:
            await orchestrator.shutdown()


UNSANDBOXED = SWARM.replace(
    "  agents: [Agent/shell, Agent/other]\n",
    '  agents: [Agent/shell, Agent/other]\n  policy: {sandbox: "off"}\n',
)


async def test_no_program_a_tool_started_outlives_its_agent(tmp_path: Path) -> None:
    """With the sandbox off, the agent's scope token finds what left the group."""
    import os
    import signal

    (tmp_path / "goondan.yaml").write_text(UNSANDBOXED)
    orchestrator = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    workspace = tmp_path / "state" / "agents" / "shell" / "instances" / "default" / "workspace"
    shell = orchestrator.supervisor.handle("shell")
    async with asyncio.timeout(60):
        await orchestrator.start()
        try:
            # a job left in the call's group ends with the call
            background = await orchestrator.request("run sleep 300 & echo $!")
            assert not alive(int(background.output.strip()))
            # one that left the group (setsid) ends with its agent, even a SIGKILLed one
            assert (
                await orchestrator.request(f"run {DETACH.format(name='a')}")
            ).output.strip() == "started"
            detached = int((workspace / "a.pid").read_text())
            assert alive(detached)  # it survived the end of its call
            assert shell.pid is not None
            os.kill(shell.pid, signal.SIGKILL)
            await orchestrator.supervisor.wait_until(lambda: shell.last_exit is not None)
            await gone(detached)
            # and with a graceful stop of the swarm
            assert (
                await orchestrator.request(f"run {DETACH.format(name='b')}")
            ).output.strip() == "started"
            second = int((workspace / "b.pid").read_text())
            assert alive(second)
        finally:
            await orchestrator.shutdown()
        await gone(second)
