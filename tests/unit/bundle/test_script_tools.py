"""A scripted Model's rules may name only tools an agent using that Model can call."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, ConfigIssue, load_bundle

BASE = '{kind: Tool, name: %s, package: "@goondan/base"}'


def swarm(rules: str, *agents: str) -> str:
    """A bundle whose Model ``m`` has ``rules`` (YAML flow list) and is used by ``agents``
    (each the flow mapping of an Agent's spec besides its modelConfig)."""
    docs = [
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: m}\n"
        f"spec: {{provider: scripted, model: rules, script: {{rules: {rules}}}}}\n"
    ]
    names = []
    for i, spec in enumerate(agents):
        names.append(f"Agent/a{i}")
        docs.append(
            f"apiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {{name: a{i}}}\n"
            f"spec: {{modelConfig: {{modelRef: Model/m}}, {spec}}}\n"
        )
    docs.append(
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: s}\n"
        f"spec: {{entryAgent: {names[0]}, agents: [{', '.join(names)}]}}\n"
    )
    return "---\n".join(docs)


def issues(tmp_path: Path, text: str) -> list[ConfigIssue]:
    path = tmp_path / "goondan.yaml"
    path.write_text(text)
    try:
        load_bundle(path)
    except BundleError as exc:
        return exc.errors
    return []


def test_a_misspelled_call_is_named_with_the_nearest_tool(tmp_path: Path) -> None:
    text = swarm(
        "[{call: {tool: file-system__wirte, args: {path: x}}}]",
        f"tools: [{BASE % 'file-system'}]",
    )
    [issue] = issues(tmp_path, text)
    assert (issue.resource, issue.field) == ("Model/m", "spec.script.rules[0].call.tool")
    assert issue.file == tmp_path / "goondan.yaml"
    assert issue.line == 4
    assert "'file-system__wirte'" in issue.message
    assert "Agent/a0" in issue.message
    assert issue.suggestion == "did you mean 'file-system__write'?"


def test_a_name_far_from_any_tool_lists_the_agents_tools(tmp_path: Path) -> None:
    text = swarm("[{calls: [{tool: zzz__qqq}]}]", f"tools: [{BASE % 'wait'}]")
    [issue] = issues(tmp_path, text)
    assert issue.field == "spec.script.rules[0].calls[0].tool"
    assert issue.suggestion == "use one of: wait__wait"


def test_a_model_shared_by_agents_with_different_tools_is_valid(tmp_path: Path) -> None:
    text = swarm(
        "[{when: {input: a}, call: {tool: bash__exec, args: {command: ls}}},"
        " {when: {toolResult: wait__wait},"
        " reply: done}, {reply: nothing}]",
        f"tools: [{BASE % 'bash'}]",
        f"tools: [{BASE % 'wait'}]",
    )
    assert issues(tmp_path, text) == []


@pytest.mark.parametrize(
    ("tool", "spec"),
    [
        # an extension registers its tools under its own name
        ("mcp__add", 'extensions: [{kind: Extension, name: mcp, package: "@goondan/base"}]'),
        # an agent with extensions may be offered any Tool of the bundle by them
        ("wait__wait", 'extensions: [{kind: Extension, name: logging, package: "@goondan/base"}]'),
        ("wait__wait", "toolPolicy: {allowRegistryCalls: true}"),
    ],
)
def test_tools_an_agent_gets_at_run_time_are_callable(tmp_path: Path, tool: str, spec: str) -> None:
    args = "{seconds: 1}" if tool == "wait__wait" else "{}"
    assert issues(tmp_path, swarm(f"[{{call: {{tool: {tool}, args: {args}}}}}]", spec)) == []


def test_a_calls_arguments_must_fit_the_export(tmp_path: Path) -> None:
    text = swarm(
        "[{call: {tool: file-system__write, args: {pth: x, content: y}}}]",
        f"tools: [{BASE % 'file-system'}]",
    )
    found = {(issue.field, issue.suggestion) for issue in issues(tmp_path, text)}
    assert found == {
        ("spec.script.rules[0].call.args.pth", "did you mean `path`?"),
        ("spec.script.rules[0].call.args", "add `path` to args"),
    }


def test_arguments_that_fit_are_valid(tmp_path: Path) -> None:
    text = swarm(
        "[{calls: [{tool: file-system__write, args: {path: '{x}', content: y}}]}]",
        f"tools: [{BASE % 'file-system'}]",
    )
    assert issues(tmp_path, text) == []
