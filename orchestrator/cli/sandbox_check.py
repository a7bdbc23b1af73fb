"""Can this swarm's tool programs run here? The sandbox its Swarm asks for, as found by a child
process running the agents' own code (``python -m tools_base.sandbox probe``): the Orchestrator
does not import ``tools_base`` (DESIGN.md arrows), and the answer is the one an agent will get.

``run`` refuses to start a swarm whose agents hold a sandboxed Tool (``bash``) where no sandbox
can be made, unless ``Swarm.spec.policy.sandbox`` is ``off``; ``doctor`` reports which sandbox
is in use and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import msgspec

PROBE_TIMEOUT_SECONDS = 60.0
PROBE_FAILED_FIX = "run `python -m tools_base.sandbox probe` to see why it fails"
"""The fix when the probe itself could not answer (its own answer names the real one)."""


@dataclass(frozen=True, slots=True)
class SandboxFinding:
    """The sandbox of a swarm's tool programs on this machine."""

    mode: str
    """``Swarm.spec.policy.sandbox``."""
    backend: str | None
    """``bwrap``, ``namespaces`` or ``off``; ``None`` when none can be made."""
    reason: str
    processes: str
    """How the per-call process limit holds: ``cgroup``, ``rlimit`` or ``none``."""
    agents: tuple[str, ...]
    """The agents whose Tools start programs in it."""
    fix: str = ""
    """What an operator can do where none can be made (the sandbox's own words)."""
    disk: str = ""
    """How a workspace's disk quota (``diskMiB``) is enforced here."""

    @property
    def refused(self) -> bool:
        """Whether ``run`` must refuse: an agent needs the sandbox and none can be made."""
        return bool(self.agents) and self.backend is None

    def refusal(self) -> str:
        """The error ``run`` prints."""
        return (
            f"no sandbox for tool programs can be made here, and agent(s) "
            f"{', '.join(self.agents)} run them (Tools with sandboxed: true, such as bash): "
            f"{self.reason}"
        )


def sandboxed_agents(bundle: Any, swarm_name: str | None) -> list[str]:
    """Agents of the swarm that hold a Tool whose handlers start programs in the sandbox."""
    swarm = bundle.swarm(swarm_name)
    needing = []
    for agent in bundle.swarm_agents(swarm):
        tools = list(bundle.agent_tools(agent))
        if agent.spec.tool_policy.allow_registry_calls:
            tools += bundle.registry_tools(agent)
        if any(tool.spec.sandboxed for tool in tools):
            needing.append(agent.name)
    return sorted(needing)


class ProbeAnswer(msgspec.Struct):
    """What ``python -m tools_base.sandbox probe --json`` prints (``Sandbox.to_json`` and the
    disk quota's enforcement), as this side reads it."""

    backend: str | None = None
    """``bwrap`` or ``namespaces``; ``None`` when none can be made."""
    reason: object = ""
    """Why this backend (or why none)."""
    processes: object = "none"
    """How the per-call process limit holds."""
    fix: object = None
    """What an operator can do where none can be made."""
    disk: object = ""
    """How a workspace's disk quota is enforced here."""


def probe(mode: str) -> ProbeAnswer:
    """``python -m tools_base.sandbox probe --mode MODE --json`` in a child process."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools_base.sandbox", "probe", "--mode", mode, "--json"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
        # json's own message for output that is not JSON, as the failure always said
        return msgspec.convert(json.loads(done.stdout), ProbeAnswer)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return ProbeAnswer(reason=f"the sandbox probe failed: {exc}", fix=PROBE_FAILED_FIX)


def examine(bundle: Any, swarm_name: str | None) -> SandboxFinding:
    """The sandbox this swarm gets here (probed only when an agent needs one)."""
    mode = str(bundle.swarm(swarm_name).spec.policy.sandbox)
    agents = tuple(sandboxed_agents(bundle, swarm_name))
    if mode == "off":
        return SandboxFinding(mode, "off", "turned off by the Swarm's policy.sandbox", "", agents)
    found = probe(mode)
    return SandboxFinding(
        mode,
        found.backend,
        str(found.reason),
        str(found.processes),
        agents,
        str(found.fix or PROBE_FAILED_FIX),
        str(found.disk),
    )
