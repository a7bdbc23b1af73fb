"""Every error code the runtime uses is in the catalogue, and the README shows the catalogue."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from goondan import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "goondan",
    "bundle",
    "ipc",
    "tools_base",
    "agent_process",
    "connector_process",
    "orchestrator",
]
CODE = re.compile(
    r"^(E_[A-Z0-9_]+|AGENT_[A-Z_]+|IPC_[A-Z_]+|CIRCULAR_CALL_DETECTED|SHUTTING_DOWN"
    r"|TOO_MANY_PENDING_REQUESTS|EMPTY_INPUT|CANCELLED|LEADER_LOST)$"
)
README_SECTION = re.compile(
    r"<!-- error-codes:start -->\n(.*)<!-- error-codes:end -->", flags=re.DOTALL
)


def codes_used() -> dict[str, list[str]]:
    """Every string constant of the packages that looks like an error code, with where."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "templates" in path.relative_to(ROOT).parts:
                continue  # what `init` writes: the user's own tools and their codes
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and CODE.match(node.value)
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.setdefault(node.value, []).append(where)
    return found


def test_every_code_in_use_is_in_the_catalogue() -> None:
    unknown = {code: where for code, where in codes_used().items() if not errors.known(code)}
    assert unknown == {}


def test_every_catalogued_code_is_used() -> None:
    used = set(codes_used()) | set(http_codes_named())
    unused = [code for catalogue in errors.CATALOGUES for code in catalogue if code not in used]
    assert unused == []


def http_codes_named() -> dict[str, list[str]]:
    """Every ``HttpCode.NAME`` of the packages, with where."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "HttpCode"
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.setdefault(node.attr, []).append(where)
    return found


def test_the_http_catalogue_is_its_enum() -> None:
    # built from HttpCode, so a member without its meaning fails the import
    assert list(errors.HTTP) == list(errors.HttpCode)
    assert errors.HTTP.audience is errors.Audience.HTTP


def test_http_codes_are_named_not_spelled() -> None:
    # a site that spells "ORIGIN_NOT_ALLOWED" instead of naming HttpCode.ORIGIN_NOT_ALLOWED
    # escapes the type checker, which is what keeps codes in the catalogue
    catalogue_module = ROOT / "goondan" / "http_codes.py"
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != catalogue_module and "templates" not in path.relative_to(ROOT).parts
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and node.value in set(errors.HttpCode)
    ]
    assert spelled == []


def test_a_code_belongs_to_one_audience_and_has_a_help_url() -> None:
    seen: set[str] = set()
    for catalogue in errors.CATALOGUES:
        assert seen.isdisjoint(catalogue)
        seen |= set(catalogue)
        for entry in catalogue.values():
            assert entry.meaning
            assert entry.help_url.endswith(f"/{entry.code}")


def test_the_readme_reference_is_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    errors._main()
    generated = capsys.readouterr().out
    section = README_SECTION.search((ROOT / "README.md").read_text())
    assert section is not None, "README.md lacks the error-codes section"
    assert section.group(1).strip() == generated.strip(), (
        "README.md's error codes differ from goondan/errors.py: "
        "regenerate them with python -m goondan.errors"
    )


def test_every_code_the_readme_mentions_exists() -> None:
    mentioned = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "README.md").read_text()))
    codes = {m for m in mentioned if CODE.match(m)}
    examples = {"E_TEXT", "E_REFUSED"}  # codes of the README's own example tool and extension
    assert {c for c in codes - examples if not errors.known(c)} == set()


def test_the_exception_tree_carries_catalogued_codes() -> None:
    from agent_process.conversation import ConversationStorageError
    from ipc import AgentCrashed, IpcError
    from tools_base import ToolError

    assert issubclass(IpcError, errors.DeliveryError)
    assert issubclass(ToolError, errors.ToolFailure)
    assert issubclass(ConversationStorageError, errors.StorageError)
    for cls in (errors.ConfigError, errors.ToolFailure, errors.DeliveryError, AgentCrashed):
        assert issubclass(cls, errors.GoondanError)
        assert errors.known(cls.code)
