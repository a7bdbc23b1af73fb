"""Every error code the runtime uses is a name of a catalogue's enum, and the documentation's
error-code reference shows the catalogues."""

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
DOC_CODE = re.compile(
    r"^(E_[A-Z0-9_]+|AGENT_[A-Z_]+|IPC_[A-Z_]+|CIRCULAR_CALL_DETECTED|SHUTTING_DOWN"
    r"|TOO_MANY_PENDING_REQUESTS|EMPTY_INPUT|CANCELLED|LEADER_LOST)$"
)
"""What a code looks like in the documentation's prose (the one place codes are text, not
names)."""
REFERENCE_SECTION = re.compile(
    r"<!-- error-codes:start -->\n(.*)<!-- error-codes:end -->", flags=re.DOTALL
)
REFERENCE = ROOT / "docs" / "reference" / "error-codes.md"
"""The documentation's error-code reference, generated from the catalogues."""
ENUMS = {"ConfigCode", "ToolCode", "DeliveryCode", "HttpCode"}
"""The names sites spell codes with: a misspelled member fails mypy."""
HOMES = {ROOT / "goondan" / "error_codes.py", ROOT / "goondan" / "http_codes.py"}
"""Where the codes are defined (and so spelled)."""


def modules() -> list[tuple[Path, ast.Module]]:
    """Every module of the packages but what ``init`` writes (the user's own tools and their
    codes), parsed."""
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "templates" not in path.relative_to(ROOT).parts
    ]


def codes_named() -> dict[str, list[str]]:
    """Every ``ToolCode.NAME`` (and the other enums') of the packages, with where."""
    found: dict[str, list[str]] = {}
    for path, tree in modules():
        relative = path.relative_to(ROOT)  # once a file: it is slow per node on Python 3.12
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ENUMS
            ):
                found.setdefault(node.attr, []).append(f"{relative}:{node.lineno}")
    return found


def test_every_catalogued_code_is_used() -> None:
    used = set(codes_named())
    unused = [code for catalogue in errors.CATALOGUES for code in catalogue if code not in used]
    assert unused == []


def test_codes_are_named_not_spelled() -> None:
    # a site that spells "E_TOOL_TIMEOUT" instead of naming ToolCode.E_TOOL_TIMEOUT escapes
    # the type checker, which is what keeps codes in the catalogue (a misspelled member is a
    # mypy error, a member without its meaning an import error)
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for path, tree in modules()
        if path not in HOMES
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and errors.known(node.value)
    ]
    assert spelled == []


def test_the_catalogues_are_their_enums() -> None:
    # built from their enums, so a member without its meaning fails the import
    for catalogue, names in (
        (errors.CONFIG, errors.ConfigCode),
        (errors.TOOL, errors.ToolCode),
        (errors.DELIVERY, errors.DeliveryCode),
        (errors.HTTP, errors.HttpCode),
    ):
        assert list(catalogue) == list(names)
        assert all(member.name == member.value for member in names if names is not errors.HttpCode)


def test_the_http_catalogue_is_its_enum() -> None:
    # built from HttpCode, so a member without its meaning fails the import
    assert list(errors.HTTP) == list(errors.HttpCode)
    assert errors.HTTP.audience is errors.Audience.HTTP


def test_a_code_belongs_to_one_audience_and_has_a_help_url() -> None:
    seen: set[str] = set()
    for catalogue in errors.CATALOGUES:
        assert seen.isdisjoint(catalogue)
        seen |= set(catalogue)
        for entry in catalogue.values():
            assert entry.meaning
            assert entry.help_url.endswith(f"/{entry.code}")


def test_the_documented_reference_is_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    errors._main()
    generated = capsys.readouterr().out
    section = REFERENCE_SECTION.search(REFERENCE.read_text())
    assert section is not None, f"{REFERENCE} lacks the error-codes section"
    assert section.group(1).strip() == generated.strip(), (
        f"{REFERENCE}'s error codes differ from goondan/errors.py: "
        "regenerate them with python -m goondan.errors"
    )


def test_every_code_the_documentation_mentions_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    mentioned = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))
    codes = {m for m in mentioned if DOC_CODE.match(m)}
    examples = {"E_TEXT", "E_REFUSED"}  # the guides' own example tool and extension
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
