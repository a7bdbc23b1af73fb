"""The tools a ``scripted`` Model's rules name must be tools its agents can call.

A rule that calls ``file-system__wirte`` would load, run, and have every call refused at run
time while the Turn answers with the fallback text; a rule whose ``when.toolResult`` is
misspelled never matches. Both are configuration errors, reported against the rule's field
(file, line, resource) with the nearest real name as a suggestion.

A call's ``args`` must fit the export it calls: every required parameter given, and no
argument the export's ``parameters`` do not name (the nearest one is suggested), else each
call would fail ``E_TOOL_INVALID_ARGS`` at run time. Values are templates, so their types are
not checked here.

A name counts as callable by an agent when it is an export of one of the agent's tools, when
one of the agent's extensions may register it (``{extension}__{tool}``), or, when the agent
has extensions or ``allowRegistryCalls``, when it is an export of any Tool of the bundle
(an extension may offer any of those to a Step).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from bundle import errors as E
from bundle.errors import ConfigIssue
from bundle.loader import Resource, _Index
from bundle.spec_agent import AgentSpec, ModelSpec, ToolSpec
from bundle.spelling import nearest

FieldPath = tuple[str | int, ...]


def check_script_tools(resources: list[Resource], index: _Index) -> list[ConfigIssue]:
    """An issue for every tool name in a scripted Model's rules that none of the agents using
    that Model can call."""
    tools = [r for r in resources if r.kind == "Tool"]
    every_tool = _exports(tools)
    schemas = _parameters(tools)
    users: dict[tuple[str | None, str], list[Resource]] = {}
    for agent in resources:
        if agent.kind != "Agent":
            continue
        ref = agent.spec.model_config_.model_ref
        package = ref.package if ref.package is not None else agent.package
        users.setdefault((package, ref.name), []).append(agent)
    issues: list[ConfigIssue] = []
    for model in resources:
        if model.kind != "Model" or model.package is not None:
            continue  # a package's Models are its author's to check
        spec: ModelSpec = model.spec
        agents = users.get((None, model.name), [])
        if spec.script is None or not agents:
            continue
        callable_by = {agent.name: _callable(agent, index, every_tool) for agent in agents}
        for path, name in _named_tools(spec):
            issues.extend(_check_name(model, path, name, callable_by))
        for path, name, args in _calls(spec):
            parameters = schemas.get(name)
            if parameters is not None:
                issues.extend(_check_args(model, path, name, args, parameters))
    return issues


def _calls(spec: ModelSpec) -> Iterable[tuple[FieldPath, str, dict[str, Any]]]:
    """``(field path of its args, tool name, args)`` of every call the script makes."""
    assert spec.script is not None
    for i, rule in enumerate(spec.script.rules):
        rule_path: FieldPath = ("spec", "script", "rules", i)
        if rule.call is not None:
            yield (*rule_path, "call", "args"), rule.call.tool, rule.call.args
        for j, call in enumerate(rule.calls or []):
            yield (*rule_path, "calls", j, "args"), call.tool, call.args


def _parameters(tools: Iterable[Resource]) -> dict[str, dict[str, Any]]:
    """Each export's full name → its ``parameters`` schema."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools:
        tool_spec: ToolSpec = tool.spec
        for export in tool_spec.exports:
            found[f"{tool.name}__{export.name}"] = export.parameters
    return found


def _check_args(
    model: Resource,
    path: FieldPath,
    name: str,
    args: dict[str, Any],
    parameters: dict[str, Any],
) -> list[ConfigIssue]:
    properties = parameters.get("properties")
    if not isinstance(properties, dict):
        return []
    issues = []
    for given in args:
        if given in properties:
            continue
        near = nearest(given, properties)
        hint = f"did you mean `{near}`?" if near else "its parameters: " + ", ".join(properties)
        issues.append(
            model.issue(
                E.E_SCHEMA_INVALID,
                f"{name} takes no argument {given!r}",
                (*path, given),
                suggestion=hint,
            )
        )
    required = parameters.get("required")
    for wanted in required if isinstance(required, list) else ():
        # A required name the export does not describe is the export's own error (`tool
        # schema --check` names it), not the script's.
        if wanted not in args and wanted in properties:
            issues.append(
                model.issue(
                    E.E_SCHEMA_INVALID,
                    f"{name} needs the argument {wanted!r}",
                    path,
                    suggestion=f"add `{wanted}` to args",
                )
            )
    return issues


def _named_tools(spec: ModelSpec) -> Iterable[tuple[FieldPath, str]]:
    """``(field path, tool name)`` of every tool the script's rules name."""
    assert spec.script is not None
    for i, rule in enumerate(spec.script.rules):
        rule_path: FieldPath = ("spec", "script", "rules", i)
        if rule.when is not None and rule.when.tool_result is not None:
            yield (*rule_path, "when", "toolResult"), rule.when.tool_result
        if rule.call is not None:
            yield (*rule_path, "call", "tool"), rule.call.tool
        for j, call in enumerate(rule.calls or []):
            yield (*rule_path, "calls", j, "tool"), call.tool


class _Callable:
    """What one agent can call: exact names, and the prefixes its extensions register under."""

    def __init__(self, own: set[str], names: set[str], prefixes: set[str]) -> None:
        self.own = own
        """Exports of the agent's own tools: the ones worth listing in a suggestion."""
        self.names = names
        self.prefixes = prefixes

    def __contains__(self, name: str) -> bool:
        return name in self.names or name.split("__", 1)[0] in self.prefixes


def _callable(agent: Resource, index: _Index, every_tool: set[str]) -> _Callable | None:
    """The tools ``agent`` can call, or ``None`` when one of its tools does not resolve (that
    is reported already, and its exports are unknown)."""
    spec: AgentSpec = agent.spec
    own: set[str] = set()
    for item in spec.tools:
        package = item.ref.package if item.ref.package is not None else agent.package
        tool = index.get(package, "Tool", item.ref.name)
        if tool is None or item.ref.kind != "Tool":
            return None
        own |= _exports([tool])
    names = set(own)
    if spec.extensions or spec.tool_policy.allow_registry_calls:
        names |= every_tool
    return _Callable(own, names, {item.ref.name for item in spec.extensions})


def _exports(tools: Iterable[Resource]) -> set[str]:
    names: set[str] = set()
    for tool in tools:
        tool_spec: ToolSpec = tool.spec
        names.update(f"{tool.name}__{export.name}" for export in tool_spec.exports)
    return names


def _check_name(
    model: Resource, path: FieldPath, name: str, callable_by: dict[str, _Callable | None]
) -> list[ConfigIssue]:
    known = [tools for tools in callable_by.values() if tools is not None]
    if len(known) < len(callable_by) or any(name in tools for tools in known):
        # One agent's tools are unknown (its own error says why), or some agent can call it:
        # a Model shared by agents with different tools has rules for each of them.
        return []
    close = difflib.get_close_matches(name, sorted(set().union(*(t.names for t in known))), 1)
    own = sorted(set().union(*(t.own for t in known)))
    if close:
        suggestion = f"did you mean {close[0]!r}?"
    else:
        suggestion = "use one of: " + (", ".join(own) or "(its agents have no tools)")
    who = ", ".join(f"Agent/{agent}" for agent in callable_by)
    return [
        model.issue(
            E.E_SCHEMA_INVALID,
            f"the script names tool {name!r}, which no agent using this Model can call ({who})",
            path,
            suggestion=suggestion,
        )
    ]
