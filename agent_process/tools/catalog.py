"""Tool Catalog: what the model sees in one Step.

The Registry holds every tool the process can run; the Catalog is a fresh, mutable list built
at the start of every Step from ``Agent.spec.tools`` plus the tools extensions registered so
far. Step middleware may edit it; the final list is the allowlist the executor enforces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tools_base import JsonObject

ToolSourceType = Literal["config", "extension", "mcp"]


@dataclass(frozen=True, kw_only=True, slots=True)
class McpSource:
    """Where an MCP-bridged tool comes from."""

    extension_name: str
    server_name: str | None = None

    def to_json(self) -> JsonObject:
        """The wire form, camelCase keys."""
        out: JsonObject = {"extensionName": self.extension_name}
        if self.server_name is not None:
            out["serverName"] = self.server_name
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSource:
    """Origin of a catalog item."""

    type: ToolSourceType
    """``config`` for Tool resources, ``extension`` for ``api.tools.register``, ``mcp`` for MCP."""
    name: str
    """The Tool resource name, or the registering extension's name."""
    mcp: McpSource | None = None

    def to_json(self) -> JsonObject:
        """The wire form."""
        out: JsonObject = {"type": self.type, "name": self.name}
        if self.mcp is not None:
            out["mcp"] = self.mcp.to_json()
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCatalogItem:
    """One tool as the model sees it."""

    name: str
    """Full name, ``{resource}__{export}``; sent to the provider unchanged."""
    description: str | None = None
    parameters: JsonObject = field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments (an object schema)."""
    source: ToolSource | None = None

    def to_json(self) -> JsonObject:
        """The wire form: ``{name, description?, parameters, source?}``."""
        out: JsonObject = {"name": self.name, "parameters": self.parameters}
        if self.description is not None:
            out["description"] = self.description
        if self.source is not None:
            out["source"] = self.source.to_json()
        return out


class CatalogEntry(Protocol):
    """A registry entry as the catalog reads it: its item."""

    @property
    def item(self) -> ToolCatalogItem:
        """What the model sees of the tool."""


class CatalogSource(Protocol):
    """What the catalog reads of the tool registry (the registry imports the catalog's types,
    so the catalog names the registry by this shape, not by its class)."""

    def get(self, name: str) -> CatalogEntry | None:
        """The entry registered under ``name``, or ``None``."""

    def dynamic_tools(self) -> Iterable[CatalogEntry]:
        """Entries registered by extensions and MCP bridges, in order."""


def build_catalog(
    registry: CatalogSource, config_tool_names: Sequence[str]
) -> list[ToolCatalogItem]:
    """A new Step's catalog: the agent's configured tools, then every dynamic tool.

    Configured names come first, in ``Agent.spec.tools`` order; tools registered by extensions
    or MCP bridges follow in registration order. A name appears once (config wins). A
    configured name the registry does not hold is skipped: the config plane reports it at load
    time, and the executor would refuse it anyway.
    """
    catalog: list[ToolCatalogItem] = []
    seen: set[str] = set()
    for name in config_tool_names:
        tool = registry.get(name)
        if tool is not None and name not in seen:
            seen.add(name)
            catalog.append(tool.item)
    for tool in registry.dynamic_tools():
        if tool.item.name not in seen:
            seen.add(tool.item.name)
            catalog.append(tool.item)
    return catalog


def catalog_names(catalog: Iterable[ToolCatalogItem]) -> frozenset[str]:
    """The allowlist the executor enforces for one Step."""
    return frozenset(item.name for item in catalog)
