"""The resource models on their own: shapes, defaults, aliases and per-field rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bundle import BundleError, ObjectRef, ValueSource, load_bundle
from bundle.spec_agent import AgentSpec, ModelSpec, ToolSpec
from bundle.spec_base import Metadata
from bundle.spec_connector import ConnectionSpec, ConnectorSpec
from bundle.spec_kinds import SPEC_MODELS
from bundle.spec_package import PackageSpec
from bundle.spec_swarm import SwarmSpec


def errors(model: type[Any], data: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as raised:
        model.model_validate(data)
    return [(tuple(e["loc"]), e["msg"]) for e in raised.value.errors()]


TOOL = {"entry": "./t.py", "exports": [{"name": "say"}]}
AGENT = {"modelConfig": {"modelRef": "Model/m"}}
SWARM = {"entryAgent": "Agent/a", "agents": ["Agent/a"]}


# -- ObjectRef and RefItem ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kind", "name", "package"),
    [
        ("Tool/bash", "Tool", "bash", None),
        (" Tool / bash ", "Tool", "bash", None),
        ({"kind": "Tool", "name": "bash"}, "Tool", "bash", None),
        (
            {"kind": "Tool", "name": "bash", "package": "@goondan/base"},
            "Tool",
            "bash",
            "@goondan/base",
        ),
        ({"kind": "Tool", "name": "bash", "apiVersion": "goondan.ai/v1"}, "Tool", "bash", None),
    ],
)
def test_object_refs_parse_from_strings_and_objects(
    raw: Any, kind: str, name: str, package: str | None
) -> None:
    ref = ObjectRef.model_validate(raw)
    assert (ref.kind, ref.name, ref.package) == (kind, name, package)
    assert str(ref) == f"{kind}/{name}"


@pytest.mark.parametrize("raw", ["bash", "Tool/", "/bash", "Tool/a/b", "Model//m", "", "/"])
def test_malformed_ref_strings_are_invalid_ref_errors(raw: str) -> None:
    with pytest.raises(ValidationError) as raised:
        ObjectRef.model_validate(raw)
    [error] = raised.value.errors()
    assert error["type"] == "invalid_ref"
    assert repr(raw) in error["msg"]


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "Tool"},
        {"kind": "", "name": "x"},
        {"kind": "Tool", "name": "  "},
        {"kind": "Tool", "name": "a/b"},
        {"kind": "Tool", "name": "x", "apiVersion": "goondan.ai/v2"},
        {"kind": "Tool", "name": "x", "namespace": "y"},
        42,
    ],
)
def test_malformed_ref_objects_are_rejected(raw: Any) -> None:
    with pytest.raises(ValidationError):
        ObjectRef.model_validate(raw)


def test_ref_items_accept_a_bare_ref_or_a_ref_with_config() -> None:
    spec = AgentSpec.model_validate(
        {
            **AGENT,
            "tools": [
                "Tool/a",
                {"kind": "Tool", "name": "b", "package": "@goondan/base"},
                {"ref": "Tool/c", "config": {"x": 1}},
                {"ref": {"kind": "Tool", "name": "d"}},
            ],
        }
    )
    assert [(t.ref.name, t.ref.package, t.config) for t in spec.tools] == [
        ("a", None, None),
        ("b", "@goondan/base", None),
        ("c", None, {"x": 1}),
        ("d", None, None),
    ]


def test_a_ref_item_config_must_be_a_mapping() -> None:
    [(loc, _)] = errors(AgentSpec, {**AGENT, "tools": [{"ref": "Tool/a", "config": [1]}]})
    assert loc == ("tools", 0, "config")


# -- ValueSource -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        {"value": "literal"},
        {"valueFrom": {"env": "OPENAI_API_KEY"}},
        {"valueFrom": {"secretRef": {"ref": "Secret/openai", "key": "api-key"}}},
        {"valueFrom": {"secretRef": {"ref": "Secret/openai"}}},
    ],
)
def test_value_sources_of_each_shape(raw: dict[str, Any]) -> None:
    assert ValueSource.model_validate(raw).model_dump(by_alias=True, exclude_none=True) == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "exactly one of `value` or `valueFrom`"),
        ({"value": "a", "valueFrom": {"env": "B"}}, "exactly one of `value` or `valueFrom`"),
        ({"valueFrom": {}}, "exactly one of `env` or `secretRef`"),
        (
            {"valueFrom": {"env": "A", "secretRef": {"ref": "Secret/x"}}},
            "exactly one of `env` or `secretRef`",
        ),
        ({"valueFrom": {"env": ""}}, "at least 1 character"),
        ({"valueFrom": {"secretRef": {"ref": "openai"}}}, "must look like 'Secret/<name>'"),
        ({"valueFrom": {"secretRef": {"ref": "Config/openai"}}}, "must look like"),
        ({"valueFrom": {"secretRef": {"ref": "Secret/"}}}, "must look like"),
        ({"value": 3}, "valid string"),
    ],
)
def test_value_sources_are_exclusive_and_well_formed(raw: dict[str, Any], message: str) -> None:
    [(_, msg)] = errors(ValueSource, raw)
    assert message in msg


# -- per kind ----------------------------------------------------------------------------------


def test_tool_defaults() -> None:
    spec = ToolSpec.model_validate(TOOL)
    assert spec.error_message_limit == 1000
    assert spec.timeout_seconds is None
    assert spec.config == {}
    assert spec.exports[0].parameters == {"type": "object", "properties": {}}
    assert spec.exports[0].description is None


def test_fields_are_camel_case_in_yaml_and_snake_case_in_python() -> None:
    spec = ToolSpec.model_validate({**TOOL, "errorMessageLimit": 10, "timeoutSeconds": 2.5})
    assert (spec.error_message_limit, spec.timeout_seconds) == (10, 2.5)
    assert ToolSpec.model_validate({**TOOL, "error_message_limit": 10}).error_message_limit == 10
    assert "errorMessageLimit" in spec.model_dump(by_alias=True)


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"errorMessageLimit": 0}, ("errorMessageLimit",)),
        ({"errorMessageLimit": "lots"}, ("errorMessageLimit",)),
        ({"timeoutSeconds": 0}, ("timeoutSeconds",)),
        ({"timeoutSeconds": -1}, ("timeoutSeconds",)),
        ({"config": []}, ("config",)),
        ({"exports": []}, ("exports",)),
        ({"exports": [{"name": "Say"}]}, ("exports", 0, "name")),
        ({"exports": [{"name": "s__ay"}]}, ("exports", 0, "name")),
        ({"exports": [{"name": "say it"}]}, ("exports", 0, "name")),
        ({"exports": [{"name": ""}]}, ("exports", 0, "name")),
        ({"exports": [{"name": "say", "parameters": []}]}, ("exports", 0, "parameters")),
        ({"exports": [{"name": "say", "descripton": "typo"}]}, ("exports", 0, "descripton")),
        ({"entry": None}, ("entry",)),
        ({"runtime": "bun"}, ("runtime",)),
    ],
)
def test_tool_field_rules(patch: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert loc in [found for found, _ in errors(ToolSpec, {**TOOL, **patch})]


@pytest.mark.parametrize("name", ["exec", "list-channels", "post_message", "a", "v2"])
def test_good_export_names(name: str) -> None:
    ToolSpec.model_validate({**TOOL, "exports": [{"name": name}]})


def test_a_tool_without_exports_is_called_a_legacy_shape() -> None:
    [(loc, message)] = errors(
        ToolSpec, {"entry": "./t.py", "description": "old", "parameters": {"type": "object"}}
    )
    assert loc == ()
    assert "legacy tool shapes" in message
    assert "exports" in message


def test_model_spec() -> None:
    spec = ModelSpec.model_validate(
        {
            "provider": "openai",
            "model": "gpt-4o",
            "apiKey": {"valueFrom": {"env": "OPENAI_API_KEY"}},
            "baseUrl": "http://localhost:11434/v1",
            "temperature": 0.2,
            "maxTokens": 500,
            "timeoutSeconds": 30,
            "maxRetries": 2,
            "options": {"seed": 1},
            "capabilities": {"toolCalling": True},
        }
    )
    assert spec.api_key is not None
    assert spec.api_key.value_from is not None
    assert spec.api_key.value_from.env == "OPENAI_API_KEY"
    assert (spec.base_url, spec.max_tokens, spec.max_retries) == (
        "http://localhost:11434/v1",
        500,
        2,
    )
    # providers stay open-ended: later versions add more
    assert ModelSpec.model_validate({"provider": "ollama", "model": "x"}).provider == "ollama"


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"provider": ""}, ("provider",)),
        ({"model": ""}, ("model",)),
        ({"temperature": -0.1}, ("temperature",)),
        ({"maxTokens": 0}, ("maxTokens",)),
        ({"maxRetries": -1}, ("maxRetries",)),
        ({"capabilities": {"streaming": "yes please"}}, ("capabilities", "streaming")),
        ({"provider": "scripted"}, ()),
    ],
)
def test_model_field_rules(patch: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    data = {"provider": "openai", "model": "gpt-4o", **patch}
    assert loc in [found for found, _ in errors(ModelSpec, data)]


def test_agent_defaults_and_params() -> None:
    spec = AgentSpec.model_validate(
        {**AGENT, "modelConfig": {"modelRef": "Model/m", "params": {"maxTokens": 9, "topP": 0.5}}}
    )
    params = spec.model_config_.params
    assert (params.temperature, params.max_tokens) == (None, 9)
    assert params.model_extra == {"topP": 0.5}  # other provider params are kept
    assert spec.tool_policy.allow_registry_calls is False
    assert spec.tool_policy.handler_timeout_seconds is None
    assert (spec.tools, spec.extensions, spec.required_tools, spec.prompt) == ([], [], [], None)


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"modelConfig": {}}, ("modelConfig", "modelRef")),
        ({"modelConfig": {"modelRef": "m"}}, ("modelConfig", "modelRef")),
        (
            {"modelConfig": {"modelRef": "Model/m", "params": {"temperature": "warm"}}},
            ("modelConfig", "params", "temperature"),
        ),
        (
            {"modelConfig": {"modelRef": "Model/m", "params": {"maxTokens": 0}}},
            ("modelConfig", "params", "maxTokens"),
        ),
        ({"prompt": {"system": "a", "systemRef": "./p.md"}}, ("prompt",)),
        ({"prompt": "just text"}, ("prompt",)),
        ({"requiredTools": [""]}, ("requiredTools", 0)),
        ({"toolPolicy": {"handlerTimeoutSeconds": 0}}, ("toolPolicy", "handlerTimeoutSeconds")),
        ({"toolPolicy": {"allowRegistryCalls": "maybe"}}, ("toolPolicy", "allowRegistryCalls")),
        ({"hooks": []}, ("hooks",)),
    ],
)
def test_agent_field_rules(patch: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert loc in [found for found, _ in errors(AgentSpec, {**AGENT, **patch})]


def test_swarm_defaults() -> None:
    policy = SwarmSpec.model_validate(SWARM).policy
    assert policy.max_steps_per_turn == 32
    assert policy.on_max_steps == "answer"  # upstream's: the last text is the answer
    assert policy.request_timeout_seconds == 60
    assert policy.shutdown.grace_period_seconds == 300  # upstream's documented figure
    assert (policy.lifecycle.ttl_seconds, policy.lifecycle.gc_grace_seconds) == (None, None)


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"agents": []}, ("agents",)),
        ({"entryAgent": "a"}, ("entryAgent",)),
        ({"instanceKey": ""}, ("instanceKey",)),
        ({"policy": {"maxStepsPerTurn": 0}}, ("policy", "maxStepsPerTurn")),
        ({"policy": {"onMaxSteps": "fail"}}, ("policy", "onMaxSteps")),
        ({"policy": {"requestTimeoutSeconds": 0}}, ("policy", "requestTimeoutSeconds")),
        (
            {"policy": {"shutdown": {"gracePeriodSeconds": -1}}},
            ("policy", "shutdown", "gracePeriodSeconds"),
        ),
        ({"policy": {"lifecycle": {"ttlSeconds": 0}}}, ("policy", "lifecycle", "ttlSeconds")),
    ],
)
def test_swarm_field_rules(patch: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    assert loc in [found for found, _ in errors(SwarmSpec, {**SWARM, **patch})]


def test_connector_events() -> None:
    spec = ConnectorSpec.model_validate(
        {
            "entry": "./c.py",
            "events": [
                {"name": "message", "properties": {"user": {"type": "string"}}},
                {"name": "ping", "properties": {"n": {"type": "number", "optional": True}}},
            ],
        }
    )
    assert spec.events[1].properties["n"].optional is True
    assert spec.events[0].properties["user"].optional is False
    bad_events: list[tuple[list[Any], tuple[str | int, ...]]] = [
        ([], ("events",)),
        ([{"name": " "}], ("events", 0, "name")),
        (
            [{"name": "x", "properties": {"a": {"type": "date"}}}],
            ("events", 0, "properties", "a", "type"),
        ),
        (
            [{"name": "x", "properties": {"a": {"type": "string", "required": True}}}],
            ("events", 0, "properties", "a", "required"),
        ),
    ]
    for events, loc in bad_events:
        found = [f for f, _ in errors(ConnectorSpec, {"entry": "./c.py", "events": events})]
        assert loc in found


def test_connection_shape_and_instance_key_rule() -> None:
    spec = ConnectionSpec.model_validate(
        {
            "connectorRef": "Connector/slack",
            "swarmRef": "Swarm/default",
            "config": {"channel": {"value": "general"}},
            "secrets": {"token": {"valueFrom": {"env": "SLACK_TOKEN"}}},
            "ingress": {
                "rules": [
                    {
                        "match": {"event": "message", "properties": {"dm": True}},
                        "route": {"agentRef": "Agent/a", "instanceKeyProperty": "user"},
                    },
                    {"route": {"instanceKey": "shared", "instanceKeyPrefix": "slack-"}},
                ]
            },
        }
    )
    assert spec.ingress.rules[0].route.instance_key_property == "user"
    assert spec.secrets["token"].value_from is not None
    [(loc, message)] = errors(
        ConnectionSpec,
        {
            "connectorRef": "Connector/c",
            "ingress": {"rules": [{"route": {"instanceKey": "a", "instanceKeyProperty": "b"}}]},
        },
    )
    assert loc == ("ingress", "rules", 0, "route")
    assert "not both" in message
    assert errors(ConnectionSpec, {})[0][0] == ("connectorRef",)


def test_package_spec() -> None:
    spec = PackageSpec.model_validate(
        {"version": "1.0.0", "dependencies": [{"name": "@goondan/base", "version": "^1"}]}
    )
    assert spec.access == "public"
    assert spec.dependencies[0].name == "@goondan/base"
    assert errors(PackageSpec, {"access": "secret"})[0][0] == ("access",)
    assert errors(PackageSpec, {"dependencies": [{"name": "x"}]})[0][0] == (
        "dependencies",
        0,
        "version",
    )


@pytest.mark.parametrize("model", [Metadata, *SPEC_MODELS.values()], ids=lambda m: m.__name__)
def test_every_field_of_every_kind_is_described(model: type[Any]) -> None:
    pending: list[type[Any]] = [model]
    seen: set[type[Any]] = set()
    while pending:
        model = pending.pop()
        if model in seen or not hasattr(model, "model_fields"):
            continue
        seen.add(model)
        assert model.__doc__, model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            annotation = field.annotation
            for arg in [annotation, *getattr(annotation, "__args__", ())]:
                for inner in [arg, *getattr(arg, "__args__", ())]:
                    if isinstance(inner, type) and hasattr(inner, "model_fields"):
                        pending.append(inner)


def test_a_tool_with_only_an_entry_is_pointed_at_tool_schema(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: greet}\n"
        "spec: {entry: ./greet.py}\n"
    )
    with pytest.raises(BundleError) as caught:
        load_bundle(tmp_path / "goondan.yaml", check_handlers=False)
    [issue] = [e for e in caught.value.errors if e.field == "spec"]
    assert issue.suggestion is not None
    assert issue.suggestion.startswith("run `goondan tool schema ./greet.py`")
