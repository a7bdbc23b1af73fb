"""Loading valid bundles: refs, packages, plans, limits, collected errors, schema, secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from bundle import (
    BundleError,
    Secret,
    SecretUnavailable,
    ValueSource,
    json_schema,
    load_bundle,
    resolve_value,
)
from bundle.source import MAX_DOCUMENTS

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "bundles"

GOOD = f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: demo}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: brain}}
spec:
  provider: scripted
  model: rules
  temperature: 0.5
  script: {{rules: [{{reply: hi}}]}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: greet}}
spec:
  entry: {FIXTURES}/configurable.py
  errorMessageLimit: 300
  exports:
    - name: say
      description: Greets.
      parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: helper}}
spec:
  modelConfig: {{modelRef: Model/brain, params: {{maxTokens: 77}}}}
  prompt: {{systemRef: {FIXTURES}/prompt.md}}
  tools:
    - ref: Tool/greet
      config: {{greeting: hey}}
    - ref: {{kind: Tool, name: bash, package: "@goondan/base"}}
  requiredTools: [greet__say]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/helper
  agents: [Agent/helper]
  policy: {{maxStepsPerTurn: 9}}
"""


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "goondan.yaml"
    path.write_text(GOOD)
    return path


def test_a_good_bundle_loads_with_builtin_tools(good: Path) -> None:
    bundle = load_bundle(good)
    assert bundle.summary() == "1 Swarm, 1 Agent, 1 Tool, 1 Model"
    agent = bundle.agent("helper")
    tools = bundle.agent_tools(agent)
    assert [(t.name, t.package) for t in tools] == [("greet", None), ("bash", "@goondan/base")]
    assert tools[0].config == {"greeting": "hey"}
    assert tools[1].entry_path.name == "bash.py"


def test_the_agent_plan_holds_everything_the_process_needs(good: Path, tmp_path: Path) -> None:
    plan = load_bundle(good).agent_plan("helper", tmp_path / "state")
    assert plan.system_prompt == "You are a careful assistant.\n"
    assert plan.catalog_tools[:1] == ["greet__say"]
    assert "bash__exec" in plan.catalog_tools
    assert (plan.max_steps_per_turn, plan.temperature, plan.max_tokens) == (9, 0.5, 77)
    assert plan.tools[0].error_message_limit == 300
    assert plan.model.spec["script"] == {"rules": [{"reply": "hi"}]}
    assert plan.required_tools == ["greet__say"]
    # the plan crosses a process boundary as JSON
    assert type(plan).model_validate_json(plan.model_dump_json()) == plan


def test_the_example_swarm_is_valid() -> None:
    bundle = load_bundle(ROOT / "goondan.yaml.example")
    assert {a.name for a in bundle.swarm_agents(bundle.swarm())} == {"coordinator", "worker"}


def test_errors_are_collected_not_first_only(tmp_path: Path) -> None:
    broken = GOOD.replace("name: brain}", "name: Brain}").replace(
        "[Agent/helper]", "[Agent/nobody]"
    )
    broken = broken.replace("errorMessageLimit: 300", "errorMessageLimit: -1")
    path = tmp_path / "goondan.yaml"
    path.write_text(broken)
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    found = sorted((issue.code, issue.field) for issue in raised.value.errors)
    assert found == [
        ("E_CONFIG_INVALID_NAME", "metadata.name"),
        ("E_CONFIG_REF_NOT_FOUND", "spec.agents[0]"),
        ("E_CONFIG_REF_NOT_FOUND", "spec.modelConfig.modelRef"),
        ("E_CONFIG_SCHEMA_INVALID", "spec.entryAgent"),
        ("E_CONFIG_SCHEMA_INVALID", "spec.errorMessageLimit"),
    ]


def test_a_ref_to_an_invalid_resource_is_not_reported_twice(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(GOOD.replace("model: rules", "model: rules\n  bogus: 1"))
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    assert [i.field for i in raised.value.errors] == ["spec.bogus"]


def test_a_file_over_one_mebibyte_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text("# " + "x" * (1024 * 1024) + "\n")
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    assert raised.value.errors[0].code == "E_CONFIG_FILE_TOO_LARGE"


def test_too_many_documents_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text("\n---\n".join(f"a: {i}" for i in range(MAX_DOCUMENTS + 1)))
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    assert "E_CONFIG_TOO_MANY_DOCUMENTS" in {i.code for i in raised.value.errors}


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as raised:
        load_bundle(tmp_path / "absent.yaml")
    assert [i.code for i in raised.value.errors] == ["E_CONFIG_FILE_NOT_FOUND"]


def test_handler_checks_can_be_skipped(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(
        GOOD.replace("configurable.py", "raises_on_import.py").replace(
            "      config: {greeting: hey}\n", ""
        )
    )
    with pytest.raises(BundleError):
        load_bundle(path)
    assert load_bundle(path, check_handlers=False).summary()


def test_swarm_selection(good: Path) -> None:
    bundle = load_bundle(good)
    assert bundle.swarm().name == "default"
    with pytest.raises(BundleError) as raised:
        bundle.swarm("other")
    assert "default" in raised.value.errors[0].message


def test_extra_packages_can_be_injected(tmp_path: Path) -> None:
    manifest = tmp_path / "pkg" / "goondan.yaml"
    manifest.parent.mkdir()
    manifest.write_text(
        f"apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {{name: echo}}\nspec:\n"
        f"  entry: {FIXTURES}/echo_tool.py\n  exports: [{{name: say}}]\n"
    )
    path = tmp_path / "goondan.yaml"
    path.write_text(
        GOOD.replace(
            "- ref: Tool/greet\n      config: {greeting: hey}",
            '- ref: {kind: Tool, name: echo, package: "@test/pkg"}',
        ).replace("requiredTools: [greet__say]", "requiredTools: [echo__say]")
    )
    bundle = load_bundle(path, packages={"@test/pkg": manifest})
    assert bundle.agent_tools(bundle.agent("helper"))[0].package == "@test/pkg"


def test_schema_accepts_good_documents_and_rejects_bad_ones(good: Path) -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for document in yaml.safe_load_all(good.read_text()):
        assert list(validator.iter_errors(document)) == []
    bad = {
        "apiVersion": "goondan.ai/v1",
        "kind": "Tool",
        "metadata": {"name": "x"},
        "spec": {"entry": 1, "exports": []},
    }
    assert list(validator.iter_errors(bad))


def test_schema_cli_prints_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "schema"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout)["title"] == "goondan.yaml resource"


def test_validate_cli_summary_for_a_valid_file(good: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.strip().endswith("valid (1 Swarm, 1 Agent, 1 Tool, 1 Model)")


def test_secrets_resolve_late_and_never_print() -> None:
    source = ValueSource.model_validate({"valueFrom": {"env": "MY_KEY"}})
    secret = resolve_value(source, {"MY_KEY": "sk-123"})
    assert isinstance(secret, Secret)
    assert secret.reveal() == "sk-123"
    assert "sk-123" not in repr(secret)
    assert "sk-123" not in str(secret)
    with pytest.raises(SecretUnavailable, match="MY_KEY"):
        resolve_value(source, {})
    by_ref = ValueSource.model_validate(
        {"valueFrom": {"secretRef": {"ref": "Secret/slack", "key": "bot-token"}}}
    )
    assert resolve_value(by_ref, {"GOONDAN_SECRET_SLACK_BOT_TOKEN": "x"}).reveal() == "x"


def test_value_and_value_from_are_exclusive() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ValueSource.model_validate({"value": "a", "valueFrom": {"env": "B"}})
