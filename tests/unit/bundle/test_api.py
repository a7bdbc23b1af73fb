"""``bundle`` exports exactly what ``__all__`` says, and imports none of our other packages."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import bundle

PACKAGE = Path(bundle.__file__).parent


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(bundle).items()
        if not name.startswith("_")
        and not isinstance(value, type(importlib))
        and getattr(value, "__module__", "") != "__future__"
    }
    assert set(bundle.__all__) == public


def test_every_public_name_is_documented() -> None:
    for name in bundle.__all__:
        value = getattr(bundle, name)
        if callable(value):
            assert value.__doc__, name


def test_bundle_imports_none_of_our_other_packages() -> None:
    ours = {"tools_base", "agent_process", "ipc", "orchestrator"}
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {n.split(".")[0] for n in names} & ours, f"{path.name} imports {names}"
