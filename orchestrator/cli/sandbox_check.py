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


def probe(mode: str) -> dict[str, Any]:
    """``python -m tools_base.sandbox probe --mode MODE --json`` in a child process."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools_base.sandbox", "probe", "--mode", mode, "--json"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
        found: dict[str, Any] = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {
            "backend": None,
            "reason": f"the sandbox probe failed: {exc}",
            "processes": "none",
            "fix": PROBE_FAILED_FIX,
        }
    return found


def examine(bundle: Any, swarm_name: str | None) -> SandboxFinding:
    """The sandbox this swarm gets here (probed only when an agent needs one)."""
    mode = str(bundle.swarm(swarm_name).spec.policy.sandbox)
    agents = tuple(sandboxed_agents(bundle, swarm_name))
    if mode == "off":
        return SandboxFinding(mode, "off", "turned off by the Swarm's policy.sandbox", "", agents)
    found = probe(mode)
    return SandboxFinding(
        mode,
        found.get("backend"),
        str(found.get("reason", "")),
        str(found.get("processes", "none")),
        agents,
        str(found.get("fix") or PROBE_FAILED_FIX),
        str(found.get("disk", "")),
    )
