"""Tests share helpers through ``tests.support`` only: no test module or conftest file imports
from another test module or from a conftest (pytest imports those itself; a test module
imported by another runs its module-level code twice and can register its tests twice)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = "tests.support"
# "package.module:function" strings name an entry point that a child process imports
ENTRY = re.compile(r"^(tests(?:\.\w+)+):\w+$")


def imported(path: Path, source: str) -> list[tuple[int, str]]:
    """Every module ``source`` (the text of ``path``) imports, relative imports resolved."""
    parts = list(path.relative_to(TESTS.parent).with_suffix("").parts)
    package = parts[:-1]  # the same for a module and for a package's __init__
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            # `from tests import support` names the module tests.support
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = ENTRY.match(node.value)
            if match:
                found.append((node.lineno, match.group(1)))
    return found


def is_allowed(name: str) -> bool:
    if name != "tests" and not name.startswith("tests."):
        return True  # not a module of the test tree
    return name == SUPPORT or name.startswith(SUPPORT + ".")


def test_tests_import_helpers_only_from_tests_support() -> None:
    files = [p for p in sorted(TESTS.rglob("*.py")) if p.relative_to(TESTS).parts[0] != "fixtures"]
    assert len(files) > 50  # the walk really sees the tree
    offending = [
        f"{path.relative_to(TESTS.parent)}:{line}: {name}"
        for path in files
        for line, name in imported(path, path.read_text())
        if not is_allowed(name)
    ]
    assert not offending, "import helpers from tests.support instead:\n" + "\n".join(offending)


def test_the_check_sees_each_form_of_import() -> None:
    here = TESTS / "unit" / "tools_base" / "test_probe.py"
    source = (
        "from .conftest import acall\n"
        "from ..ipc import echo_child\n"
        "from tests.integration import swarm\n"
        "import tests.integration.test_cli\n"
        "from tests.support.swarm import write_swarm\n"
        "ENTRY = 'tests.integration.agent_entries:start'\n"
    )
    names = [name for _, name in imported(here, source)]
    assert names == [
        "tests.unit.tools_base.conftest.acall",
        "tests.unit.ipc.echo_child",
        "tests.integration.swarm",
        "tests.integration.test_cli",
        "tests.support.swarm.write_swarm",
        "tests.integration.agent_entries",
    ]
    assert [is_allowed(name) for name in names] == [False] * 4 + [True, False]
