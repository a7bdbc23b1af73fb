"""Reading YAML: documents, line maps, limits, and the issue format."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, ConfigIssue
from bundle.source import (
    MAX_DEPTH,
    MAX_DOCUMENTS,
    Document,
    format_path,
    parse_documents,
    read_file,
)

FILE = Path("goondan.yaml")

TEXT = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: bash
spec:
  entry: ./bash.py
  exports:
    - name: exec
      parameters:
        type: object
    - name: script
---

---
kind: Model
"""


def parse(text: str) -> tuple[list[Document], list[ConfigIssue]]:
    return parse_documents(text, FILE)


def test_documents_keep_their_start_line_and_skip_empty_ones() -> None:
    documents, issues = parse(TEXT)
    assert issues == []
    assert [(d.index, d.line) for d in documents] == [(0, 1), (1, 15)]
    assert documents[0].data["spec"]["exports"][1] == {"name": "script"}


@pytest.mark.parametrize(
    ("path", "line"),
    [
        (("kind",), 2),
        (("metadata", "name"), 4),
        (("spec",), 5),  # the key's line, not the line its block starts on
        (("spec", "exports", 0), 8),
        (("spec", "exports", 1, "name"), 11),
        (("spec", "exports", 0, "parameters", "type"), 10),
        (("spec", "exports", 0, "parameters", "nope", "deeper"), 9),  # nearest ancestor
        (("absent",), 1),  # nothing known: the document's own line
    ],
)
def test_every_field_path_maps_to_its_line(path: tuple[str | int, ...], line: int) -> None:
    documents, _ = parse(TEXT)
    assert documents[0].line_of(path) == line


def test_a_syntax_error_names_line_and_column() -> None:
    documents, [issue] = parse("kind: Tool\nmetadata:\n  name: [open\n")
    assert documents == []
    assert issue.code == "E_CONFIG_PARSE_ERROR"
    assert (issue.line, issue.column) == (4, 1)
    assert issue.format().startswith("goondan.yaml:4:1: invalid YAML")


def test_documents_before_a_syntax_error_are_kept() -> None:
    documents, [issue] = parse("kind: Model\n---\nkind: [\n")
    assert [d.data for d in documents] == [{"kind": "Model"}]
    assert issue.code == "E_CONFIG_PARSE_ERROR"


def test_duplicate_keys_are_reported_at_the_second_one() -> None:
    _, [issue] = parse("kind: Model\nspec:\n  model: a\n  model: b\n")
    assert (issue.code, issue.field, issue.line) == ("E_CONFIG_SCHEMA_INVALID", "spec.model", 4)


def test_an_alias_bomb_is_refused_without_expanding_it() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):  # 10**9 nodes if expanded
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    documents, [issue] = parse("\n".join(lines) + "\n")
    assert documents == []
    assert issue.code == "E_CONFIG_PARSE_ERROR"
    assert "expands to more than" in issue.message


def test_a_few_aliases_are_fine() -> None:
    documents, issues = parse("base: &b {type: string}\nprops: {a: *b, c: *b}\n")
    assert issues == []
    assert documents[0].data["props"]["c"] == {"type": "string"}


def test_nesting_deeper_than_the_limit_is_refused_with_its_line() -> None:
    ok = "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"
    assert parse(ok)[1] == []
    block = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + "  " * 70 + "v\n"
    _, [issue] = parse("top: 1\n" + block)
    assert issue.code == "E_CONFIG_PARSE_ERROR"
    assert issue.line == MAX_DEPTH + 2  # k{i} is on line i + 2; k64 is one level too deep


def test_nesting_deep_enough_to_exhaust_the_stack_is_an_issue_not_a_crash() -> None:
    documents, [issue] = parse("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert documents == []
    assert issue.code == "E_CONFIG_PARSE_ERROR"
    assert f"deeper than {MAX_DEPTH}" in issue.message
    assert issue.line == 1


def test_an_explicit_null_document_is_not_blank() -> None:
    documents, _ = parse("kind: Model\n--- ~\n")
    assert [d.data for d in documents] == [{"kind": "Model"}, None]


def test_documents_past_the_limit_are_refused() -> None:
    text = "\n---\n".join(f"n: {i}" for i in range(MAX_DOCUMENTS + 3))
    documents, [issue] = parse(text)
    assert len(documents) == MAX_DOCUMENTS
    assert issue.code == "E_CONFIG_TOO_MANY_DOCUMENTS"


def test_read_file_strips_a_bom_and_normalises_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_bytes(b"\xef\xbb\xbfkind: Model\r\nspec: {}\r\n")
    text, issues = read_file(path)
    assert (text, issues) == ("kind: Model\nspec: {}\n", [])


def test_read_file_reports_a_missing_file(tmp_path: Path) -> None:
    text, [issue] = read_file(tmp_path / "nope.yaml")
    assert text is None
    assert issue.code == "E_CONFIG_FILE_NOT_FOUND"
    assert str(tmp_path / "nope.yaml") in issue.message


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("spec", "exports", 1, "name"), "spec.exports[1].name"),
        (("spec", "tools", 0), "spec.tools[0]"),
        ((0,), "[0]"),
        ((), ""),
        (("apiVersion",), "apiVersion"),
    ],
)
def test_format_path(path: tuple[str | int, ...], text: str) -> None:
    assert format_path(path) == text


def test_config_issue_format_and_json() -> None:
    issue = ConfigIssue(
        code="E_CONFIG_SCHEMA_INVALID",
        message="export name 'say' is used twice",
        file=Path("/elsewhere/goondan.yaml"),
        line=42,
        resource="Tool/bash",
        field="spec.exports[1].name",
        suggestion="rename it",
    )
    assert issue.format() == (
        "/elsewhere/goondan.yaml:42: Tool/bash: spec.exports[1].name: export name 'say' is "
        "used twice (E_CONFIG_SCHEMA_INVALID)\n  hint: rename it"
    )
    assert issue.help_url == "https://docs.goondan.ai/errors/E_CONFIG_SCHEMA_INVALID"
    assert issue.to_json() == {
        "code": "E_CONFIG_SCHEMA_INVALID",
        "message": "export name 'say' is used twice",
        "file": "/elsewhere/goondan.yaml",
        "line": 42,
        "column": None,
        "resource": "Tool/bash",
        "field": "spec.exports[1].name",
        "suggestion": "rename it",
        "helpUrl": "https://docs.goondan.ai/errors/E_CONFIG_SCHEMA_INVALID",
    }
    with pytest.raises(AttributeError):
        issue.line = 1  # type: ignore[misc]


def test_config_issue_paths_are_shown_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    issue = ConfigIssue(code="E_X", message="m", file=tmp_path / "sub" / "goondan.yaml", line=3)
    assert issue.format() == "sub/goondan.yaml:3: m (E_X)"
    assert ConfigIssue(code="E_X", message="m").format() == "<bundle>: m (E_X)"


def test_bundle_error_lists_every_issue() -> None:
    issues = [ConfigIssue(code="E_X", message=f"problem {i}", file=FILE, line=i) for i in range(3)]
    error = BundleError(issues)
    assert error.errors == issues
    assert str(error).startswith("3 configuration errors:")
    assert all(f"problem {i}" in str(error) for i in range(3))
    many = BundleError([ConfigIssue(code="E_X", message="m")] * 25)
    assert str(many).endswith("... and 5 more")
