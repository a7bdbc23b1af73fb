"""The environment variables each agent's and connection's plan names (bundle.environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.environment import BASE_ENVIRONMENT, config_names, matches, select

ROOT = Path(__file__).resolve().parents[3]
ECHO = ROOT / "tests" / "fixtures" / "bundles" / "echo_tool.py"
EXTENSION = ROOT / "tests" / "fixtures" / "bundles" / "extension.py"
CONNECTOR = ROOT / "tests" / "fixtures" / "bundles" / "connector.py"
HEAD = "apiVersion: goondan.ai/v1\n"
BASE = '{kind: Tool, name: NAME, package: "@goondan/base"}'


def model(name: str, spec: str) -> str:
    return HEAD + f"kind: Model\nmetadata: {{name: {name}}}\nspec: {spec}\n"


def agent(name: str, model_name: str, body: str = "") -> str:
    return (
        HEAD + f"kind: Agent\nmetadata: {{name: {name}}}\n"
        f"spec:\n  modelConfig: {{modelRef: Model/{model_name}}}\n{body}"
    )


SWARM = (
    HEAD
    + "kind: Swarm\nmetadata: {name: s}\nspec: {entryAgent: Agent/a, agents: [Agent/a, Agent/b]}\n"
)
B_MODEL = model("mb", "{provider: openai, model: x, apiKey: {valueFrom: {env: B_KEY}}}")
B_AGENT = agent("b", "mb")


def environment(tmp_path: Path, *documents: str, name: str = "a") -> list[str]:
    path = tmp_path / "goondan.yaml"
    path.write_text("---\n".join([*documents, B_MODEL, B_AGENT, SWARM]))
    return load_bundle(path).agent_plan(name, tmp_path).environment


def test_a_models_key_variable_and_not_another_agents(tmp_path: Path) -> None:
    own = model("ma", "{provider: anthropic, model: x, apiKey: {valueFrom: {env: A_KEY}}}")
    assert environment(tmp_path, own, agent("a", "ma")) == ["ANTHROPIC_BASE_URL", "A_KEY"]
    assert environment(tmp_path, own, agent("a", "ma"), name="b") == [
        "B_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
    ]


def test_a_model_without_key_reads_its_providers_variable(tmp_path: Path) -> None:
    plain = model("ma", "{provider: openai, model: x}")
    assert environment(tmp_path, plain, agent("a", "ma")) == [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
    ]
    # its own baseUrl wins over the SDK's variable, which it then does not need
    local = model("ma", "{provider: openai, model: x, baseUrl: 'http://127.0.0.1:11434/v1'}")
    assert "OPENAI_BASE_URL" not in environment(tmp_path, local, agent("a", "ma"))
    literal = model("ma", "{provider: anthropic, model: x, apiKey: {value: sk-inline}}")
    assert environment(tmp_path, literal, agent("a", "ma")) == ["ANTHROPIC_BASE_URL"]


def test_a_secret_ref_gives_every_candidate_it_is_read_from(tmp_path: Path) -> None:
    ref = model(
        "ma",
        "{provider: scripted, model: x, script: {rules: [{reply: hi}]},"
        " apiKey: {valueFrom: {secretRef: {ref: Secret/llm-prod, key: token}}}}",
    )
    assert environment(tmp_path, ref, agent("a", "ma")) == [
        "GOONDAN_SECRET_LLM_PROD",
        "GOONDAN_SECRET_LLM_PROD_APIKEY",
        "GOONDAN_SECRET_LLM_PROD_TOKEN",
        "SECRET_LLM_PROD",
        "SECRET_LLM_PROD_APIKEY",
        "SECRET_LLM_PROD_TOKEN",
    ]


SCRIPTED = model("ma", "{provider: scripted, model: x, script: {rules: [{reply: hi}]}}")


def test_built_in_chat_tools_get_their_token_variables_or_their_configured_one(
    tmp_path: Path,
) -> None:
    telegram = "  tools: [" + BASE.replace("NAME", "telegram") + "]\n"
    assert environment(tmp_path, SCRIPTED, agent("a", "ma", telegram)) == [
        "BOT_TOKEN",
        "BRAIN_TELEGRAM_BOT_TOKEN",
        "TELEGRAM_ALLOWED_HOSTS",  # what it shares with the telegram connector
        "TELEGRAM_ALLOW_PLAIN_HTTP",
        "TELEGRAM_API_BASE_URL",
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_TOKEN",
    ]
    configured = (
        "  tools:\n    - ref: " + BASE.replace("NAME", "slack") + "\n"
        "      config: {token: {valueFrom: {secretRef: {ref: Secret/bot}}}}\n"
    )
    names = environment(tmp_path, SCRIPTED, agent("a", "ma", configured))
    assert "SLACK_BOT_TOKEN" in names  # what the tool falls back on without config
    assert {"GOONDAN_SECRET_BOT_TOKEN", "SECRET_BOT"} <= set(names)  # read as the `token` field


def test_bash_pass_env_names_and_prefixes(tmp_path: Path) -> None:
    bash = (
        "  tools:\n    - ref: " + BASE.replace("NAME", "bash") + "\n"
        "      config: {passEnv: [DEPLOY_TARGET, AWS_*, '*', 'not a name']}\n"
    )
    # a bare `*` would hand the agent the daemon's whole environment: it is no name
    assert environment(tmp_path, SCRIPTED, agent("a", "ma", bash)) == ["AWS_*", "DEPLOY_TARGET"]


def test_spec_env_of_tools_extensions_and_the_agent(tmp_path: Path) -> None:
    tool = (
        HEAD + f"kind: Tool\nmetadata: {{name: t}}\nspec:\n  entry: {ECHO}\n"
        "  env: [TOOL_VAR]\n  exports: [{name: say}]\n"
    )
    extension = (
        HEAD + f"kind: Extension\nmetadata: {{name: x}}\nspec:\n  entry: {EXTENSION}\n"
        "  env: [EXT_*]\n  config: {nested: [{password: {valueFrom: {env: EXT_PASSWORD}}}]}\n"
    )
    body = "  tools: [Tool/t]\n  extensions: [Extension/x]\n  env: [OWN_VAR, OWN_PREFIX_*]\n"
    names = environment(tmp_path, SCRIPTED, tool, extension, agent("a", "ma", body))
    assert names == ["EXT_*", "EXT_PASSWORD", "OWN_PREFIX_*", "OWN_VAR", "TOOL_VAR"]


def test_registry_tools_count_only_when_the_agent_may_call_them(tmp_path: Path) -> None:
    tool = (
        HEAD + f"kind: Tool\nmetadata: {{name: t}}\nspec:\n  entry: {ECHO}\n"
        "  env: [TOOL_VAR]\n  exports: [{name: say}]\n"
    )
    assert environment(tmp_path, SCRIPTED, tool, agent("a", "ma")) == []
    policy = "  toolPolicy: {allowRegistryCalls: true}\n"
    names = environment(tmp_path, SCRIPTED, tool, agent("a", "ma", policy))
    assert {"TOOL_VAR", "TELEGRAM_BOT_TOKEN", "SLACK_BOT_TOKEN"} <= set(names)


def test_base_variables_are_not_repeated_in_a_plan(tmp_path: Path) -> None:
    body = "  env: [PATH, HOME, ONLY_MINE]\n"
    assert environment(tmp_path, SCRIPTED, agent("a", "ma", body)) == ["ONLY_MINE"]


@pytest.mark.parametrize("entry", ["'*'", "'1ABC'", "'A-B'", "'A*B'", "''"])
def test_spec_env_refuses_what_is_no_name_or_prefix(tmp_path: Path, entry: str) -> None:
    with pytest.raises(BundleError) as raised:
        environment(tmp_path, SCRIPTED, agent("a", "ma", f"  env: [{entry}]\n"))
    [issue] = raised.value.errors
    assert issue.field is not None
    assert "env" in issue.field
    assert "environment variable name" in issue.message


def test_a_connections_values_and_its_connectors_declared_names(tmp_path: Path) -> None:
    connector = (
        HEAD + f"kind: Connector\nmetadata: {{name: c}}\nspec:\n  entry: {CONNECTOR}\n"
        "  env: [C_PORT]\n  events: [{name: e}]\n"
    )
    connection = (
        HEAD + "kind: Connection\nmetadata: {name: conn}\nspec:\n  connectorRef: Connector/c\n"
        "  config: {HOST: {value: 127.0.0.1}, MODE: {valueFrom: {env: C_MODE}}}\n"
        "  secrets: {signingSecret: {valueFrom: {secretRef: {ref: Secret/hook}}}}\n"
    )
    path = tmp_path / "goondan.yaml"
    path.write_text(
        "---\n".join([SCRIPTED, agent("a", "ma"), connector, connection, B_MODEL, B_AGENT, SWARM])
    )
    [plan] = load_bundle(path).connection_plans(tmp_path)
    assert plan.environment == [
        "C_MODE",
        "C_PORT",
        "GOONDAN_SECRET_HOOK",
        "GOONDAN_SECRET_HOOK_SIGNINGSECRET",
        "SECRET_HOOK",
        "SECRET_HOOK_SIGNINGSECRET",
    ]


def test_config_names_ignore_shapes_that_are_no_value_source() -> None:
    config = {
        "token": {"valueFrom": {"env": "REAL"}},
        "other": {"valueFrom": "not an object"},
        "both": {"valueFrom": {"env": "X"}, "value": "y"},
        "passEnv": "NOT_A_LIST",
    }
    assert config_names(config) == ["REAL"]


def test_select_takes_exact_names_and_prefixes_only() -> None:
    environ = {"AWS_KEY": "1", "AWSX": "2", "PATH": "/bin", "PATHX": "3", "LC_ALL": "C"}
    assert select(environ, ["AWS_*", "PATH"]) == {"AWS_KEY": "1", "PATH": "/bin"}
    assert matches("LC_ALL", BASE_ENVIRONMENT)


@pytest.mark.parametrize(
    "name",
    [
        "GOONDAN_API_TOKEN",
        "GOONDAN_SECRET_BOT_TOKEN",
        "GOONDAN_NATS_PASSWORD",
        "GOONDAN_CLUSTER_KEY",
        "GOONDAN_AGENT_SCOPE",
        "NOTIFY_SOCKET",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
    ],
)
def test_the_base_environment_holds_no_secret_or_daemon_variable(name: str) -> None:
    assert not matches(name, BASE_ENVIRONMENT)
