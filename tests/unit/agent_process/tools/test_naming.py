"""Tool naming: ``{resource}__{export}``."""

from __future__ import annotations

import pytest

from agent_process.tools.naming import (
    ToolName,
    build_tool_name,
    is_valid_tool_name,
    parse_tool_name,
)


@pytest.mark.parametrize(
    ("full", "expected"),
    [
        ("bash__exec", ToolName("bash", "exec")),
        ("file-system__read", ToolName("file-system", "read")),
        ("http-fetch__post", ToolName("http-fetch", "post")),
        ("a__b__c", ToolName("a", "b__c")),  # split at the FIRST separator
        ("nosep", None),
        ("single_underscore", None),
    ],
)
def test_parse_splits_at_first_double_underscore(full: str, expected: ToolName | None) -> None:
    """ParseToolName splits at the first ``__``."""
    assert parse_tool_name(full) == expected


def test_build_joins_with_double_underscore() -> None:
    """``__`` is the separator, single-export tools too."""
    assert build_tool_name("wait", "wait") == "wait__wait"
    assert str(ToolName("bash", "exec")) == "bash__exec"


@pytest.mark.parametrize(
    ("resource", "export"), [("ba__sh", "exec"), ("bash", "ex__ec"), ("", "x"), ("x", "")]
)
def test_build_refuses_separator_inside_parts(resource: str, export: str) -> None:
    """Neither part may contain ``__``."""
    with pytest.raises(ValueError, match="must not"):
        build_tool_name(resource, export)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("bash__exec", True),
        ("a__b__c", False),
        ("__exec", False),
        ("bash__", False),
        ("bash", False),
    ],
)
def test_validity(name: str, valid: bool) -> None:
    """Names are used verbatim, so only well-formed ones are accepted."""
    assert is_valid_tool_name(name) is valid
