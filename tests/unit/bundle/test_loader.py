"""Loading a whole valid bundle, the agent plan built from it, and late secret resolution."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import structlog

from bundle import (
    BundleError,
    Secret,
    SecretUnavailable,
    ValueSource,
    load_bundle,
    resolve_value,
)

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
    assert plan.model.script is not None
    assert plan.model.script.model_dump(by_alias=True, exclude_none=True) == {
        "rules": [{"reply": "hi"}]
    }
    assert plan.required_tools == ["greet__say"]
    # the plan crosses a process boundary as JSON
    assert type(plan).model_validate_json(plan.model_dump_json()) == plan


def test_required_tools_wire_the_base_guard_with_their_names(good: Path, tmp_path: Path) -> None:
    plan = load_bundle(good).agent_plan("helper", tmp_path / "state")
    [guard] = [x for x in plan.extensions if x.name == "required-tools-guard"]
    assert guard.config["requiredTools"] == ["greet__say"]
    assert guard.entry_path.endswith("required_tools_guard.py")
    assert plan.extensions[-1] == guard  # after the agent's own extensions


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


def test_a_plan_falls_back_to_the_models_parameters(good: Path, tmp_path: Path) -> None:
    good.write_text(good.read_text().replace("params: {maxTokens: 77}", "params: {topP: 0.1}"))
    plan = load_bundle(good).agent_plan("helper", tmp_path / "state")
    assert (plan.temperature, plan.max_tokens) == (0.5, None)


def test_secrets_resolve_late_and_never_print() -> None:
    source = ValueSource.model_validate({"valueFrom": {"env": "MY_KEY"}})
    secret = resolve_value(source, {"MY_KEY": "sk-123"})
    assert isinstance(secret, Secret)
    assert secret.reveal() == "sk-123"
    assert secret.source == "env:MY_KEY"
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret])):
        assert "sk-123" not in shown
    assert resolve_value(ValueSource(value="lit")).reveal() == "lit"


@pytest.mark.parametrize("environ", [{}, {"MY_KEY": ""}])
def test_an_unset_or_empty_variable_names_the_variable_not_a_value(
    environ: dict[str, str],
) -> None:
    source = ValueSource.model_validate({"valueFrom": {"env": "MY_KEY"}})
    with pytest.raises(SecretUnavailable, match="environment variable MY_KEY is not set"):
        resolve_value(source, environ)


def test_resolution_reads_the_process_environment_at_call_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = ValueSource.model_validate({"valueFrom": {"env": "GOONDAN_TEST_LATE_KEY"}})
    monkeypatch.delenv("GOONDAN_TEST_LATE_KEY", raising=False)
    with pytest.raises(SecretUnavailable):
        resolve_value(source)
    monkeypatch.setenv("GOONDAN_TEST_LATE_KEY", "set-later")
    assert resolve_value(source).reveal() == "set-later"


@pytest.mark.parametrize(
    ("key", "field", "variable"),
    [
        ("bot-token", "value", "GOONDAN_SECRET_SLACK_BOT_TOKEN"),
        (None, "signingSecret", "GOONDAN_SECRET_SLACK_SIGNINGSECRET"),
        ("bot-token", "value", "GOONDAN_SECRET_SLACK"),
        ("bot-token", "value", "SECRET_SLACK_BOT_TOKEN"),
        ("bot-token", "value", "SECRET_SLACK"),
    ],
)
def test_secret_refs_read_the_documented_variables(
    key: str | None, field: str, variable: str
) -> None:
    ref = {"ref": "Secret/slack", **({"key": key} if key else {})}
    source = ValueSource.model_validate({"valueFrom": {"secretRef": ref}})
    secret = resolve_value(source, {variable: "x"}, field=field)
    assert (secret.reveal(), secret.source) == ("x", f"env:{variable}")


def test_a_missing_secret_lists_where_it_was_looked_for() -> None:
    source = ValueSource.model_validate(
        {"valueFrom": {"secretRef": {"ref": "Secret/slack", "key": "bot-token"}}}
    )
    with pytest.raises(SecretUnavailable) as raised:
        resolve_value(source, {"UNRELATED": "x"})
    assert "GOONDAN_SECRET_SLACK_BOT_TOKEN" in str(raised.value)
    assert raised.value.code == "E_CONFIG_SECRET_UNAVAILABLE"


def test_a_logged_secret_stays_masked() -> None:
    secret = resolve_value(ValueSource(value="sk-live-999"))
    with structlog.testing.capture_logs() as logs:
        structlog.get_logger().info("model ready", api_key=secret)
    assert logs[0]["api_key"] is secret
    rendered = structlog.processors.KeyValueRenderer()(None, "info", dict(logs[0]))
    assert "sk-live-999" not in rendered
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key %s", (secret,), None)
    assert "sk-live-999" not in record.getMessage()


def test_value_sources_in_a_bundle_stay_unresolved(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: m}\nspec:\n"
        "  provider: openai\n  model: gpt-4o\n  apiKey: {valueFrom: {env: GOONDAN_UNSET_KEY}}\n"
    )
    # loading never needs the variable: it is read at first use
    model = load_bundle(path).get("Model", "m")
    assert model.spec.api_key.value_from.env == "GOONDAN_UNSET_KEY"
