"""The rules of a ``TestSuite`` against the bundle around it: its Swarm exists, and the agents
and tools its cases name are the swarm's (with a did-you-mean when they are not)."""

from __future__ import annotations

from bundle import errors as E
from bundle.loader import Resource
from bundle.rule_base import FieldPath, RuleChecker
from bundle.spec_agent import AgentSpec, ToolSpec
from bundle.spec_swarm import SwarmSpec
from bundle.spec_testsuite import TestSuiteSpec, check_testsuite, did_you_mean


def suite_swarm(checker: RuleChecker, suite: Resource) -> Resource | None:
    """The Swarm ``suite`` runs: the one it names; else ``default``; else the only one."""
    spec: TestSuiteSpec = suite.spec
    swarms = [r for r in checker.resources if r.kind == "Swarm" and r.package is None]
    names = [s.name for s in swarms]
    if spec.swarm is not None:
        found = next((s for s in swarms if s.name == spec.swarm), None)
        if found is None:
            checker.report(
                suite,
                E.E_SWARM_NOT_FOUND,
                f"Swarm {spec.swarm!r} not found",
                ("spec", "swarm"),
                did_you_mean(spec.swarm, names),
            )
        return found
    if len(swarms) == 1:
        return swarms[0]
    found = next((s for s in swarms if s.name == "default"), None)
    if found is None and swarms:
        checker.report(
            suite,
            E.E_SWARM_NOT_FOUND,
            "cannot choose a Swarm: name one in `spec.swarm`",
            ("spec",),
            "use one of: " + ", ".join(sorted(names)),
        )
    return found


def _tool_names(checker: RuleChecker, agent: Resource) -> list[str]:
    spec: AgentSpec = agent.spec
    names: list[str] = []
    for item in spec.tools:
        package = item.ref.package if item.ref.package is not None else agent.package
        tool = checker.index.get(package, item.ref.kind, item.ref.name)
        if tool is not None and tool.kind == "Tool":
            tool_spec: ToolSpec = tool.spec
            names += [f"{tool.name}__{export.name}" for export in tool_spec.exports]
    return names


def check_suite(checker: RuleChecker, suite: Resource) -> None:
    """Report what ``suite`` names that its Swarm does not have."""
    swarm = suite_swarm(checker, suite)
    if swarm is None:
        return
    swarm_spec: SwarmSpec = swarm.spec
    agents: list[Resource] = []
    for item in swarm_spec.agents:
        package = item.ref.package if item.ref.package is not None else swarm.package
        found = checker.index.get(package, "Agent", item.ref.name)
        if found is not None:
            agents.append(found)
    if len(agents) != len(swarm_spec.agents):
        return  # the Swarm's own errors are reported; names checked against half a list mislead
    tools = sorted({name for agent in agents for name in _tool_names(checker, agent)})

    def report(message: str, path: FieldPath, suggestion: str | None) -> None:
        checker.report(suite, E.E_SCHEMA_INVALID, message, path, suggestion)

    check_testsuite(suite.spec, [a.name for a in agents], tools, report)
