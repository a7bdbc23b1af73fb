"""The Bundle API and the rules that span resources, on small bundles written per test."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, ConfigIssue, ResolvedTool, load_bundle
from bundle.bundle import Bundle
from bundle.packages import BUILTIN_PACKAGES, builtin_package_manifests
from bundle.spec_base import ObjectRef

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "bundles"
ECHO = FIXTURES / "echo_tool.py"
CONFIGURABLE = FIXTURES / "configurable.py"

HEAD = "apiVersion: goondan.ai/v1\n"
MODEL = HEAD + "kind: Model\nmetadata: {name: m}\nspec: {provider: openai, model: gpt-4o}\n"


def tool(name: str, entry: Path = ECHO, extra: str = "", exports: str = "[{name: say}]") -> str:
    return (
        HEAD + f"kind: Tool\nmetadata: {{name: {name}}}\n"
        f"spec:\n  entry: {entry}\n{extra}  exports: {exports}\n"
    )


def agent(name: str, body: str = "") -> str:
    return (
        HEAD + f"kind: Agent\nmetadata: {{name: {name}}}\n"
        f"spec:\n  modelConfig: {{modelRef: Model/m}}\n{body}"
    )


def swarm(name: str, agents: str = "[Agent/a]", entry: str = "Agent/a") -> str:
    return (
        HEAD + f"kind: Swarm\nmetadata: {{name: {name}}}\n"
        f"spec:\n  entryAgent: {entry}\n  agents: {agents}\n"
    )


def write(directory: Path, *documents: str, name: str = "goondan.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n".join(documents))
    return path


def load(directory: Path, *documents: str, **options: object) -> Bundle:
    return load_bundle(write(directory, *documents), **options)  # type: ignore[arg-type]


def issues(directory: Path, *documents: str, **options: object) -> list[ConfigIssue]:
    with pytest.raises(BundleError) as raised:
        load(directory, *documents, **options)
    return raised.value.errors


def codes(found: list[ConfigIssue]) -> list[tuple[str, str | None]]:
    return sorted((i.code, i.field) for i in found)


# -- lookups ------------------------------------------------------------------------------------


def test_resources_know_where_they_come_from(tmp_path: Path) -> None:
    bundle = load(tmp_path, MODEL, agent("a"), swarm("s"))
    assert bundle.path == tmp_path / "goondan.yaml"
    assert bundle.root == tmp_path
    a = bundle.agent("a")
    assert (a.kind, a.name, a.package, a.ref_string) == ("Agent", "a", None, "Agent/a")
    assert (a.file, a.line) == (tmp_path / "goondan.yaml", 6)
    assert a.line_of("spec", "modelConfig") == 10
    assert bundle.get("Model", "m").spec.model == "gpt-4o"
    assert [r.name for r in bundle.of_kind("Agent")] == ["a"]
    # the built-in package is loaded too, under its own name
    assert bundle.get("Tool", "bash", "@goondan/base").package == "@goondan/base"
    with pytest.raises(KeyError, match="Tool/bash"):
        bundle.get("Tool", "bash")


def test_a_directory_loads_its_goondan_yaml(tmp_path: Path) -> None:
    write(tmp_path, MODEL)
    assert load_bundle(tmp_path).summary() == "1 Model"


def test_resolve_ref_uses_the_referrers_package_unless_the_ref_names_one(tmp_path: Path) -> None:
    bundle = load(tmp_path, MODEL, agent("a"))
    a = bundle.agent("a")
    assert bundle.resolve_ref(ObjectRef.model_validate("Model/m"), a).name == "m"
    bash = ObjectRef(kind="Tool", name="bash", package="@goondan/base")
    assert bundle.resolve_ref(bash, a).package == "@goondan/base"
    with pytest.raises(KeyError):
        bundle.resolve_ref(ObjectRef.model_validate("Tool/bash"), a)


# -- swarm selection ---------------------------------------------------------------------------


def test_swarm_selection_by_name_default_or_single(tmp_path: Path) -> None:
    one = load(tmp_path / "one", MODEL, agent("a"), swarm("only"))
    assert one.swarm().name == "only"
    assert one.swarm("only").name == "only"
    two = load(tmp_path / "two", MODEL, agent("a"), swarm("x"), swarm("default"))
    assert two.swarm().name == "default"
    assert two.swarm("x").name == "x"


@pytest.mark.parametrize(
    ("names", "wanted", "words"),
    [
        (["x", "y"], None, "cannot choose a Swarm; swarms in goondan.yaml: x, y"),
        (["x"], "z", "Swarm 'z' not found; swarms in goondan.yaml: x"),
        ([], None, "(none)"),
    ],
)
def test_swarm_selection_errors_list_the_candidates(
    tmp_path: Path, names: list[str], wanted: str | None, words: str
) -> None:
    bundle = load(tmp_path, MODEL, agent("a"), *(swarm(n) for n in names))
    with pytest.raises(BundleError) as raised:
        bundle.swarm(wanted)
    [issue] = raised.value.errors
    assert issue.code == "E_CONFIG_SWARM_NOT_FOUND"
    assert words in issue.message


# -- agent tools, extensions, prompts ------------------------------------------------------------


def test_agent_tools_in_order_with_config_merged_under_the_agent(tmp_path: Path) -> None:
    bundle = load(
        tmp_path,
        MODEL,
        tool("greet", CONFIGURABLE, "  config: {greeting: hello, unused: 1}\n"),
        tool("echo"),
        agent(
            "a",
            "  tools:\n"
            "    - ref: Tool/echo\n"
            "    - ref: Tool/greet\n"
            "      config: {greeting: hey}\n"
            '    - {kind: Tool, name: wait, package: "@goondan/base"}\n',
        ),
        check_handlers=False,
    )
    echo, greet, wait = bundle.agent_tools(bundle.agent("a"))
    assert (echo.name, echo.package, echo.config) == ("echo", None, {})
    assert greet.config == {"greeting": "hey", "unused": 1}
    assert greet.spec.exports[0].name == "say"
    assert greet.entry_path == CONFIGURABLE
    assert greet.declared_in == tmp_path / "goondan.yaml"
    assert (wait.package, wait.entry_path.name) == ("@goondan/base", "wait.py")
    assert wait.declared_in == ROOT / "tools_base" / "goondan.yaml"
    assert wait.entry_path.is_absolute()
    with pytest.raises(dataclasses.FrozenInstanceError):
        echo.name = "other"  # type: ignore[misc]
    assert isinstance(echo, ResolvedTool)


def test_entry_and_system_ref_are_relative_to_the_declaring_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "echo.py").write_text(ECHO.read_text())
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "a.md").write_text("Be brief.\n")
    monkeypatch.chdir(ROOT)  # not the bundle's directory
    bundle = load(
        tmp_path,
        MODEL,
        tool("echo", Path("./tools/echo.py")),
        agent("a", "  prompt: {systemRef: ./prompts/a.md}\n  tools: [Tool/echo]\n"),
    )
    a = bundle.agent("a")
    assert bundle.agent_tools(a)[0].entry_path == tmp_path / "tools" / "echo.py"
    assert bundle.agent_system_prompt(a) == "Be brief.\n"


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("", None),
        ("  prompt: {system: You help.}\n", "You help."),
        ("  prompt: {system: '   '}\n", None),
        ("  prompt: {}\n", None),
    ],
)
def test_inline_system_prompts(tmp_path: Path, prompt: str, expected: str | None) -> None:
    bundle = load(tmp_path, MODEL, agent("a", prompt))
    assert bundle.agent_system_prompt(bundle.agent("a")) == expected


def test_agent_extensions_with_config_merged(tmp_path: Path) -> None:
    extension = (
        HEAD + "kind: Extension\nmetadata: {name: ctx}\n"
        f"spec:\n  entry: {FIXTURES / 'extension.py'}\n  config: {{a: 1, b: 2}}\n"
    )
    bundle = load(
        tmp_path,
        MODEL,
        extension,
        agent("a", "  extensions:\n    - ref: Extension/ctx\n      config: {b: 3}\n"),
    )
    [ext] = bundle.agent_extensions(bundle.agent("a"))
    assert (ext.name, ext.package, ext.config) == ("ctx", None, {"a": 1, "b": 3})
    assert ext.entry_path == FIXTURES / "extension.py"


def test_summary_counts_only_the_bundles_own_resources(tmp_path: Path) -> None:
    bundle = load(tmp_path, MODEL, tool("echo"), tool("echo2"), agent("a"), agent("b"), swarm("s"))
    assert bundle.summary() == "1 Swarm, 2 Agents, 2 Tools, 1 Model"


# -- cross-resource rules ------------------------------------------------------------------------


def test_a_ref_to_a_builtin_without_its_package_suggests_the_object_form(tmp_path: Path) -> None:
    [issue] = issues(tmp_path, MODEL, agent("a", "  tools: [Tool/bash]\n"))
    assert (issue.code, issue.field) == ("E_CONFIG_REF_NOT_FOUND", "spec.tools[0]")
    assert "not found in this bundle" in issue.message
    assert issue.suggestion is not None
    assert 'package: "@goondan/base"' in issue.suggestion


def test_a_ref_to_a_missing_resource_suggests_declaring_it(tmp_path: Path) -> None:
    [issue] = issues(tmp_path, MODEL, agent("a", "  tools:\n    - ref: Tool/nothing\n"))
    assert (issue.field, issue.line) == ("spec.tools[0].ref", 12)
    assert issue.suggestion == "declare the Tool 'nothing', or fix the reference"


def test_the_same_name_is_fine_across_kinds_and_packages(tmp_path: Path) -> None:
    bash_model = MODEL.replace("name: m}", "name: bash}")
    bundle = load(tmp_path, MODEL, bash_model, tool("bash"), agent("bash"))
    assert {r.kind for r in bundle.resources if r.name == "bash" and r.package is None} == {
        "Model",
        "Tool",
        "Agent",
    }


def test_a_duplicate_is_reported_once_at_the_second_declaration(tmp_path: Path) -> None:
    [issue] = issues(tmp_path, MODEL, tool("echo"), tool("echo"))
    assert (issue.code, issue.resource, issue.line) == ("E_CONFIG_DUPLICATE_NAME", "Tool/echo", 15)
    assert "first at line 6" in issue.message


def test_required_tools_must_be_among_the_agents_tools(tmp_path: Path) -> None:
    good = agent("a", "  tools: [Tool/echo]\n  requiredTools: [echo__say]\n")
    assert load(tmp_path / "good", MODEL, tool("echo"), good).agent("a")
    bad = agent("a", "  tools: [Tool/echo]\n  requiredTools: [echo__say, echo__shout]\n")
    [issue] = issues(tmp_path / "bad", MODEL, tool("echo"), bad)
    assert (issue.field, issue.suggestion) == ("spec.requiredTools[1]", "use one of: echo__say")


def test_required_tools_are_not_checked_while_a_tool_is_unresolved(tmp_path: Path) -> None:
    body = "  tools: [Tool/ghost]\n  requiredTools: [ghost__x]\n"
    assert codes(issues(tmp_path, MODEL, agent("a", body))) == [
        ("E_CONFIG_REF_NOT_FOUND", "spec.tools[0]")
    ]


def test_per_agent_tool_config_is_checked_by_configure(tmp_path: Path) -> None:
    greet = tool("greet", CONFIGURABLE)
    ok = agent("a", "  tools:\n    - ref: Tool/greet\n      config: {greeting: hey}\n")
    assert load(tmp_path / "ok", MODEL, greet, ok)
    bad = agent("a", "  tools:\n    - ref: Tool/greet\n      config: {volume: 11}\n")
    [issue] = issues(tmp_path / "bad", MODEL, greet, bad)
    assert (issue.code, issue.resource, issue.field) == (
        "E_CONFIG_SCHEMA_INVALID",
        "Agent/a",
        "spec.tools[0].config",
    )
    assert load(tmp_path / "bad", MODEL, greet, bad, check_handlers=False)


def test_handler_checks_can_be_turned_off(tmp_path: Path) -> None:
    broken = tool("broken", FIXTURES / "raises_on_import.py")
    assert codes(issues(tmp_path, broken)) == [("E_CONFIG_ENTRY_LOAD_FAILED", "spec.entry")]
    assert load(tmp_path, broken, check_handlers=False).summary() == "1 Tool"
    missing = tool("gone", FIXTURES / "absent.py")
    # a missing file is a missing file, handler checks or not
    assert codes(issues(tmp_path / "m", missing, check_handlers=False)) == [
        ("E_CONFIG_ENTRY_NOT_FOUND", "spec.entry")
    ]


def test_the_handler_check_names_each_missing_export(tmp_path: Path) -> None:
    found = issues(tmp_path, tool("echo", exports="[{name: say}, {name: shout}, {name: yell}]"))
    assert codes(found) == [
        ("E_CONFIG_HANDLER_MISSING", "spec.exports[1].name"),
        ("E_CONFIG_HANDLER_MISSING", "spec.exports[2].name"),
    ]
    assert "echo_tool.py has no handler for export 'shout'" in found[0].message


def test_entry_not_found_shows_the_resolved_absolute_path(tmp_path: Path) -> None:
    [issue] = issues(tmp_path, tool("echo", Path("./tools/../nowhere.py")))
    assert issue.code == "E_CONFIG_ENTRY_NOT_FOUND"
    assert f"looked at {tmp_path / 'nowhere.py'}" in issue.message


def test_entry_agent_and_agents(tmp_path: Path) -> None:
    listed = '[{kind: Agent, name: a, package: "@x/y"}]'
    assert codes(issues(tmp_path / "1", MODEL, agent("a"), swarm("s", entry="Agent/b"))) == [
        ("E_CONFIG_SCHEMA_INVALID", "spec.entryAgent")
    ]
    # packages are compared only when both sides name one
    found = issues(tmp_path / "2", MODEL, agent("a"), swarm("s", agents=listed))
    assert codes(found) == [("E_CONFIG_REF_NOT_FOUND", "spec.agents[0]")]
    mismatch = swarm("s", agents=listed, entry='{kind: Agent, name: a, package: "@z/w"}')
    assert ("E_CONFIG_SCHEMA_INVALID", "spec.entryAgent") in codes(
        issues(tmp_path / "3", MODEL, agent("a"), mismatch)
    )


CONNECTOR = (
    HEAD + "kind: Connector\nmetadata: {name: cli}\n"
    f"spec:\n  entry: {FIXTURES / 'connector.py'}\n  events: [{{name: msg}}]\n"
)


def connection(body: str) -> str:
    return (
        HEAD
        + f"kind: Connection\nmetadata: {{name: c}}\nspec:\n  connectorRef: Connector/cli\n{body}"
    )


def test_connection_routes_must_target_an_agent_of_a_swarm(tmp_path: Path) -> None:
    base = (MODEL, agent("a"), agent("b"), swarm("s"), CONNECTOR)
    to_a = "  ingress: {rules: [{route: {agentRef: Agent/a}}]}\n"
    to_b = "  ingress: {rules: [{route: {agentRef: Agent/b}}]}\n"
    assert load(tmp_path / "1", *base, connection(to_a))
    assert load(tmp_path / "2", *base, connection("  swarmRef: Swarm/s\n" + to_a))
    found = issues(tmp_path / "3", *base, connection(to_b))
    assert codes(found) == [("E_CONFIG_SCHEMA_INVALID", "spec.ingress.rules[0].route.agentRef")]
    assert "Agent/b is not an agent of any Swarm" in found[0].message
    found = issues(tmp_path / "4", *base, connection("  swarmRef: Swarm/s\n" + to_b))
    assert "Agent/b is not an agent of Swarm/s" in found[0].message
    assert codes(issues(tmp_path / "5", *base, connection("  swarmRef: Swarm/t\n"))) == [
        ("E_CONFIG_REF_NOT_FOUND", "spec.swarmRef")
    ]


def test_three_independent_mistakes_are_three_issues(tmp_path: Path) -> None:
    found = issues(
        tmp_path,
        MODEL,
        tool("echo", exports="[{name: say}, {name: say}]"),
        agent("a", "  tools: [Tool/echo, Extension/x]\n"),
        swarm("s", entry="Agent/zed"),
    )
    assert codes(found) == [
        ("E_CONFIG_SCHEMA_INVALID", "spec.entryAgent"),
        ("E_CONFIG_SCHEMA_INVALID", "spec.exports[1].name"),
        ("E_CONFIG_SCHEMA_INVALID", "spec.tools[1]"),
    ]


# -- packages ----------------------------------------------------------------------------------


def test_the_builtin_package_is_found_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    assert builtin_package_manifests() == {"@goondan/base": ROOT / "tools_base" / "goondan.yaml"}
    assert BUILTIN_PACKAGES == {"@goondan/base": "tools_base"}


def test_the_fallback_table_works_without_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert builtin_package_manifests() == {"@goondan/base": ROOT / "tools_base" / "goondan.yaml"}


def test_finding_packages_does_not_import_them() -> None:
    code = (
        "import sys; from bundle.packages import builtin_package_manifests as f; "
        "assert f(); assert 'tools_base' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_injected_packages_are_scoped_and_relative_to_their_manifest(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "tools" / "echo.py").write_text(ECHO.read_text())
    manifest = write(pkg, tool("echo", Path("./tools/echo.py")), tool("other"))
    ref = '{kind: Tool, name: echo, package: "@test/pkg"}'
    bundle = load(
        tmp_path / "app",
        MODEL,
        agent("a", f"  tools: [{ref}]\n"),
        packages={"@test/pkg": manifest},
    )
    [echo] = bundle.agent_tools(bundle.agent("a"))
    assert (echo.package, echo.entry_path) == ("@test/pkg", pkg / "tools" / "echo.py")
    assert bundle.get("Tool", "echo", "@test/pkg").file == manifest


def test_a_broken_package_reports_its_own_file(tmp_path: Path) -> None:
    manifest = write(tmp_path / "pkg", tool("Bad"))
    found = issues(tmp_path / "app", MODEL, packages={"@test/pkg": manifest})
    assert [(i.code, i.file) for i in found] == [("E_CONFIG_INVALID_NAME", manifest)]


def test_refs_inside_a_package_resolve_within_that_package(tmp_path: Path) -> None:
    manifest = write(tmp_path / "pkg", MODEL, agent("helper"))
    bundle = load(tmp_path / "app", MODEL, packages={"@test/pkg": manifest})
    helper = bundle.get("Agent", "helper", "@test/pkg")
    model = bundle.resolve_ref(helper.spec.model_config_.model_ref, helper)
    assert (model.package, model.file) == ("@test/pkg", manifest)


def test_package_document_rules(tmp_path: Path) -> None:
    package = HEAD + "kind: Package\nmetadata: {name: demo}\nspec: {version: 1.0.0}\n"
    assert load(tmp_path / "1", package, MODEL).summary() == "1 Model"
    assert codes(issues(tmp_path / "2", MODEL, package)) == [
        ("E_CONFIG_PACKAGE_DOC_POSITION", "kind")
    ]
    assert codes(issues(tmp_path / "3", package, package.replace("demo", "again"))) == [
        ("E_CONFIG_PACKAGE_DOC_DUPLICATED", "kind")
    ]
    scoped = package.replace("demo", '"@acme/demo"')
    assert load(tmp_path / "4", scoped, MODEL)
