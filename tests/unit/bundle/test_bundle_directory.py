"""A bundle directory: goondan.yaml, models.yaml, tools.yaml, agents.yaml, ... read as one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from tests.support.daemon import run_cli

PACKAGE = (
    "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: split}\nspec: {version: '1.0.0'}\n"
)
SWARM = """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/writer, agents: [Agent/writer, Agent/helper]}
"""
MODELS = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: { input: "^echo (?P<text>.+)$" }
        call: { tool: echo__say, args: { text: "{text}" } }
      - when: { toolResult: echo__say }
        reply: "echoed {result}"
      - reply: "hi"
"""
TOOLS = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: echo}
spec:
  entry: ./echo.py
  exports:
    - name: say
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
"""
AGENTS = """\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: writer}
spec: {modelConfig: {modelRef: Model/brain}, tools: [Tool/echo]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec: {modelConfig: {modelRef: Model/brain}}
"""


def write(directory: Path, **files: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "echo.py").write_text("handlers = {'say': lambda ctx, args: args['text']}\n")
    for name, text in files.items():
        (directory / name.replace("_", ".")).write_text(text)
    return directory


def split(directory: Path, **extra: str) -> Path:
    files = {
        "goondan_yaml": PACKAGE + SWARM,
        "models_yaml": MODELS,
        "tools_yml": TOOLS,
        "agents_yaml": AGENTS,
    }
    return write(directory, **{**files, **extra})


def test_the_files_of_a_directory_are_one_bundle(tmp_path: Path) -> None:
    directory = split(tmp_path)
    bundle = load_bundle(directory, check_handlers=False)
    assert [f.name for f in bundle.files] == [
        "goondan.yaml",
        "models.yaml",
        "tools.yml",
        "agents.yaml",
    ]
    assert bundle.directory == directory
    assert bundle.path == directory / "goondan.yaml"
    assert bundle.agent("writer").file == directory / "agents.yaml"
    assert bundle.get("Model", "brain").file == directory / "models.yaml"
    plan = bundle.agent_plan("writer", tmp_path / "state")
    assert plan.model.name == "brain"
    assert [tool.name for tool in plan.tools] == ["echo"]


def test_an_error_names_its_own_file_and_line(tmp_path: Path) -> None:
    broken = MODELS.replace("model: rules", "model: rules\n  temperature: -1")
    with pytest.raises(BundleError) as caught:
        load_bundle(split(tmp_path, models_yaml=broken), check_handlers=False)
    files = {issue.file for issue in caught.value.errors}
    assert tmp_path / "models.yaml" in files
    issue = next(i for i in caught.value.errors if i.file == tmp_path / "models.yaml")
    assert issue.line == 7  # the inserted temperature line
    assert issue.field == "spec.temperature"
    assert issue.resource == "Model/brain"


def test_a_resource_declared_in_two_files_names_both(tmp_path: Path) -> None:
    again = "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: brain}\nspec: {provider: scripted, model: rules, script: {rules: [{reply: x}]}}\n"
    with pytest.raises(BundleError) as caught:
        load_bundle(split(tmp_path, resources_yml=again), check_handlers=False)
    [issue] = [i for i in caught.value.errors if i.code == "E_CONFIG_DUPLICATE_NAME"]
    assert issue.file == tmp_path / "resources.yml"
    assert "models.yaml:1" in issue.message


def test_the_package_document_belongs_in_goondan_yaml(tmp_path: Path) -> None:
    stray = PACKAGE.replace("name: split", "name: stray")
    with pytest.raises(BundleError) as caught:
        load_bundle(split(tmp_path, agents_yaml=stray + "---\n" + AGENTS), check_handlers=False)
    [issue] = caught.value.errors
    assert issue.code == "E_CONFIG_PACKAGE_DOC_POSITION"
    assert issue.file == tmp_path / "agents.yaml"


def test_a_directory_without_bundle_files_is_named(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as caught:
        load_bundle(tmp_path, check_handlers=False)
    [issue] = caught.value.errors
    assert issue.code == "E_CONFIG_FILE_NOT_FOUND"
    assert issue.file == tmp_path / "goondan.yaml"


def test_validate_and_run_take_a_directory(tmp_path: Path) -> None:
    directory = split(tmp_path / "swarm")
    validated = run_cli("validate", str(directory), cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert "valid" in validated.stdout
    answered = run_cli("run", str(directory), "--input", "echo hello", cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "echoed hello"
    assert (directory / ".goondan" / "agents" / "writer").is_dir()


def test_a_watched_directory_watches_the_files_it_may_grow(tmp_path: Path) -> None:
    from orchestrator.watch import watched_files

    directory = split(tmp_path)
    watched = watched_files(load_bundle(directory, check_handlers=False))
    assert directory / "connections.yaml" in watched  # absent now: creating it is an edit
    assert directory / "tools.yml" in watched
    assert (directory / "echo.py").resolve() in watched
    one_file = write(
        tmp_path / "one",
        goondan_yaml=PACKAGE + SWARM + "---\n" + MODELS + "---\n" + TOOLS + "---\n" + AGENTS,
    )
    single = watched_files(load_bundle(one_file / "goondan.yaml", check_handlers=False))
    assert one_file / "models.yaml" not in single
