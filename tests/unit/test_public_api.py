"""The SDK surface tool authors import is exactly what ``__all__`` says."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module_name", ["tools_base", "agent_process.tools"])
def test_all_lists_exactly_the_public_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", module_name) != "__future__"
        and not isinstance(value, type(importlib))
    }
    assert set(module.__all__) == public


def test_sdk_exports_the_documented_core() -> None:
    import tools_base

    for name in ("ToolContext", "ToolHandler", "ToolResult", "ToolError", "AgentToolRuntime"):
        assert name in tools_base.__all__
