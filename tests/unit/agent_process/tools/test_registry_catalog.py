"""Registry vs Catalog."""

from __future__ import annotations

import dataclasses

import pytest

from agent_process.tools.catalog import ToolCatalogItem, ToolSource, build_catalog, catalog_names
from agent_process.tools.registry import ToolRegistrationError, ToolRegistry
from tests.support.tool_harness import item
from tools_base import JsonObject, ToolContext


def noop(ctx: ToolContext, args: JsonObject) -> None:
    return None


def test_duplicate_name_is_an_error() -> None:
    """Issue: a duplicate name is an error; entries are never replaced."""
    registry = ToolRegistry()
    first = registry.register(item("echo__say"), noop)
    with pytest.raises(ToolRegistrationError, match="already registered"):
        registry.register(item("echo__say"), noop)
    assert registry.get("echo__say") is first


@pytest.mark.parametrize("name", ["echo", "echo__", "__say", "a__b__c"])
def test_invalid_names_are_refused(name: str) -> None:
    """Names must be ``resource__export``."""
    with pytest.raises(ToolRegistrationError, match="invalid tool name"):
        ToolRegistry().register(item(name), noop)


def test_entries_are_immutable() -> None:
    """Registry entries cannot be changed once registered."""
    entry = ToolRegistry().register(item("echo__say"), noop)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.handler = noop  # type: ignore[misc]


def test_non_callable_handler_is_refused() -> None:
    with pytest.raises(ToolRegistrationError, match="not callable"):
        ToolRegistry().register(item("echo__say"), "nope")  # type: ignore[arg-type]


def test_catalog_starts_from_agent_tools_then_dynamic_tools() -> None:
    """Config tools in spec order, then registered tools."""
    registry = ToolRegistry()
    registry.register(item("b__two"), noop)
    registry.register(item("a__one"), noop)
    registry.register(item("other__hidden"), noop)  # in the registry, not in Agent.spec.tools
    registry.register(item("weather__get", source="extension"), noop)
    catalog = build_catalog(registry, ["a__one", "b__two"])
    assert [i.name for i in catalog] == ["a__one", "b__two", "weather__get"]
    assert catalog[2].source == ToolSource(type="extension", name="weather")


def test_catalog_is_rebuilt_fresh_each_step() -> None:
    """A middleware edit of one Step's catalog does not leak into the next."""
    registry = ToolRegistry()
    registry.register(item("a__one"), noop)
    first = build_catalog(registry, ["a__one"])
    first.clear()
    assert [i.name for i in build_catalog(registry, ["a__one"])] == ["a__one"]


def test_dynamic_tool_appears_in_the_next_catalog() -> None:
    """A tool registered mid-Turn is in the next Step's catalog."""
    registry = ToolRegistry()
    registry.register(item("a__one"), noop)
    before = catalog_names(build_catalog(registry, ["a__one"]))
    registry.register(item("dyn__tool", source="extension"), noop)
    after = catalog_names(build_catalog(registry, ["a__one"]))
    assert "dyn__tool" not in before
    assert "dyn__tool" in after


def test_catalog_item_wire_form() -> None:
    """Name, description, parameters, source {type, name, mcp?}."""
    from agent_process.tools.catalog import McpSource

    mcp_item = ToolCatalogItem(
        name="github__create_issue",
        description="Create an issue",
        parameters={"type": "object"},
        source=ToolSource(
            type="mcp", name="mcp-github", mcp=McpSource(extension_name="mcp-github")
        ),
    )
    assert mcp_item.to_json() == {
        "name": "github__create_issue",
        "description": "Create an issue",
        "parameters": {"type": "object"},
        "source": {"type": "mcp", "name": "mcp-github", "mcp": {"extensionName": "mcp-github"}},
    }


def test_a_loaded_tool_is_checked_at_once_and_built_on_its_first_get(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent's own tools: refused at boot like any registration, compiled when first used."""
    import agent_process.tools.registry as registry_module

    compiled: list[str] = []
    compile_validator = registry_module.compile_args_validator

    def counting(parameters: JsonObject | None) -> object:
        compiled.append("x")
        return compile_validator(parameters)

    monkeypatch.setattr(registry_module, "compile_args_validator", counting)
    registry = ToolRegistry()
    registry.register(item("a__first"), noop)
    registry.register_loaded(item("a__second"), noop)
    registry.register_loaded(item("a__third"), noop)
    assert compiled == ["x"]  # only the eagerly registered one
    with pytest.raises(ToolRegistrationError, match="already registered"):
        registry.register_loaded(item("a__second"), noop)
    with pytest.raises(ToolRegistrationError, match="already registered"):
        registry.register(item("a__third"), noop)
    with pytest.raises(ToolRegistrationError, match="not callable"):
        registry.register_loaded(item("a__fourth"), "not a handler")  # type: ignore[arg-type]
    assert registry.names() == ["a__first", "a__second", "a__third"]
    assert [i.name for i in registry.items()] == ["a__first", "a__second", "a__third"]
    assert "a__third" in registry
    assert registry.item("a__third") is not None
    third = registry.get("a__third")
    assert third is not None
    assert third.handler is noop
    assert registry.get("a__third") is third
    assert len(compiled) == 2
    assert registry.names() == ["a__first", "a__second", "a__third"]  # order unchanged
    assert [t.name for t in registry] == ["a__first", "a__second", "a__third"]
    assert len(compiled) == 3
