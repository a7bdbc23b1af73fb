"""The @goondan/base manifest: shape, schemas, and agreement with the handler modules."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

import tools_base
from tools_base import ToolConfigError

MANIFEST = Path(tools_base.__file__).parent / "goondan.yaml"
DOCUMENTS: list[dict[str, Any]] = list(yaml.safe_load_all(MANIFEST.read_text()))
TOOLS = {doc["metadata"]["name"]: doc for doc in DOCUMENTS if doc["kind"] == "Tool"}

EXPECTED_EXPORTS = {
    "bash": ["exec", "script"],
    "file-system": ["read", "write", "list", "mkdir", "delete", "stat"],
    "http-fetch": ["get", "post"],
    "json-query": ["query", "pick", "count", "flatten"],
    "text-transform": ["replace", "slice", "split", "join", "trim", "case", "transform"],
    "wait": ["wait"],
    "pending": ["status"],
    "agents": ["request", "send", "spawn", "list", "catalog"],
    "self-restart": ["request"],
    "telegram": ["send", "edit", "delete", "react", "set_chat_action", "download_file"],
    "slack": ["send", "read", "edit", "delete", "react", "download_file"],
    "discord": ["edit_original", "followup", "send"],
    "github": ["comment", "update_comment", "add_labels"],
}
EXPECTED_EXTENSIONS = [
    "logging",
    "message-window",
    "message-compaction",
    "tool-search",
    "required-tools-guard",
    "inter-agent-response-format",
    "context-message",
    "mcp",
]
ERROR_MESSAGE_LIMITS = {"bash": 1200, "wait": 600, "file-system": 2000, "agents": 1500}
CONFIGURABLE = {"bash", "file-system", "http-fetch", "telegram", "slack", "discord", "github"}
NAME = re.compile(r"^[a-z0-9_-]+$")


def load_entry(tool: dict[str, Any]) -> ModuleType:
    """Import the entry module by path, as a loader that knows nothing else would.

    The module is registered in ``sys.modules`` before it runs (the importlib recipe):
    dataclasses defined in it look their module up there.
    """
    path = (MANIFEST.parent / tool["spec"]["entry"]).resolve()
    name = f"manifest_entry_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def exports_of(name: str) -> list[dict[str, Any]]:
    exports: list[dict[str, Any]] = TOOLS[name]["spec"]["exports"]
    return exports


def test_package_document() -> None:
    package = DOCUMENTS[0]
    assert package["apiVersion"] == "goondan.ai/v1"
    assert package["kind"] == "Package"
    assert package["metadata"]["name"] == "@goondan/base" == tools_base.PACKAGE_NAME
    assert package["spec"]["version"] == "0.1.0"
    kinds = [doc["kind"] for doc in DOCUMENTS[1:]]
    order = ["Tool", "Extension", "Connector"]  # grouped, in this order
    assert kinds == sorted(kinds, key=order.index)
    assert kinds.count("Tool") == len(EXPECTED_EXPORTS)
    assert kinds.count("Extension") == len(EXPECTED_EXTENSIONS)


HTTP_CONNECTOR_EVENTS = {
    "webhook": ["webhook_message"],
    "slack": ["app_mention", "message_im"],
    "github": ["github_push", "github_pull_request", "github_issue", "github_issue_comment"],
    "discord": ["slash_command", "component_interaction"],
}


@pytest.mark.parametrize("name", sorted(HTTP_CONNECTOR_EVENTS))
def test_http_connectors_are_declared_with_their_events_and_a_run(name: str) -> None:
    connectors = {d["metadata"]["name"]: d for d in DOCUMENTS if d["kind"] == "Connector"}
    doc = connectors[name]
    assert [event["name"] for event in doc["spec"]["events"]] == HTTP_CONNECTOR_EVENTS[name]
    module = load_entry(doc)
    assert inspect.iscoroutinefunction(module.run), name
    assert (module.__doc__ or "").strip(), f"{name} has no docstring"


def test_every_base_extension_is_declared_with_a_register_function() -> None:
    extensions = {d["metadata"]["name"]: d for d in DOCUMENTS if d["kind"] == "Extension"}
    assert sorted(extensions) == sorted(EXPECTED_EXTENSIONS)
    for name, doc in extensions.items():
        module = load_entry(doc)
        assert callable(getattr(module, "register", None)), name
        assert (module.__doc__ or "").strip(), f"{name} has no docstring"


def test_every_tool_and_export_is_declared() -> None:
    assert {name: [e["name"] for e in exports_of(name)] for name in TOOLS} == EXPECTED_EXPORTS


@pytest.mark.parametrize("name", sorted(EXPECTED_EXPORTS))
def test_tool_resource_shape(name: str) -> None:
    tool = TOOLS[name]
    assert tool["apiVersion"] == "goondan.ai/v1"
    assert "__" not in name
    spec = tool["spec"]
    assert spec["entry"].startswith("./tools/")
    assert spec["entry"].endswith(".py")
    assert (MANIFEST.parent / spec["entry"]).is_file()
    assert spec.get("errorMessageLimit", 1000) == ERROR_MESSAGE_LIMITS.get(name, 1000)
    assert spec.get("timeoutSeconds") == (310 if name == "wait" else None)
    names = [export["name"] for export in spec["exports"]]
    assert len(names) == len(set(names))
    for export in spec["exports"]:
        assert NAME.match(export["name"])
        assert "__" not in export["name"]
        assert len(export["description"]) >= 20


@pytest.mark.parametrize(
    ("name", "export"),
    [(name, export) for name, exports in EXPECTED_EXPORTS.items() for export in exports],
)
def test_parameters_are_strict_valid_json_schemas(name: str, export: str) -> None:
    (declared,) = [e for e in exports_of(name) if e["name"] == export]
    schema = declared["parameters"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    for required in schema.get("required", []):
        assert required in properties
        prop = properties[required]
        if prop.get("type") == "string":  # required strings are non-empty
            assert prop.get("minLength") == 1 or "" not in prop.get("enum", [""]), required
    for prop in properties.values():
        assert prop.get("description"), prop


@pytest.mark.parametrize("name", sorted(EXPECTED_EXPORTS))
def test_handlers_match_the_exports_exactly(name: str) -> None:
    module = load_entry(TOOLS[name])
    assert module.__doc__
    assert all(e in module.__doc__ for e in EXPECTED_EXPORTS[name])
    assert list(module.handlers) == EXPECTED_EXPORTS[name]
    for handler in module.handlers.values():
        assert callable(handler)
        assert len(inspect.signature(handler).parameters) == 2
    if name in CONFIGURABLE:
        assert list(module.configure({})) == EXPECTED_EXPORTS[name]
        with pytest.raises(ToolConfigError):
            module.configure({"noSuchKey": True})
    else:
        assert not hasattr(module, "configure")


@pytest.mark.parametrize("name", sorted(EXPECTED_EXPORTS))
def test_schemas_reject_unknown_and_missing_arguments(name: str) -> None:
    for export in exports_of(name):
        validator = jsonschema.Draft202012Validator(export["parameters"])
        assert not validator.is_valid({"unexpected": 1})
        if export["parameters"].get("required"):
            assert not validator.is_valid({})
