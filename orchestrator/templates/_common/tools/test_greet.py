"""Tests of the swarm's tool: run them with `python -m pytest tools`."""

import pytest

from tools.greet import hello
from tools_base import ToolError


def test_hello_greets_by_name() -> None:
    assert hello(None, {"name": "Ada"}) == {"greeting": "Hello, Ada!"}  # type: ignore[arg-type]


def test_an_empty_name_is_a_structured_error() -> None:
    with pytest.raises(ToolError) as refused:
        hello(None, {"name": "  "})  # type: ignore[arg-type]
    assert refused.value.code == "E_GREET_NAME"
