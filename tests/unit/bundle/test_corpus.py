"""Broken goondan.yaml files, each paired with exactly the issues it must produce.

Each ``corpus/*.yaml`` starts with one ``# expect: CODE FIELD LINE`` line per issue (``-``
when the issue has no field). The issues found must be exactly those: a missing one, an extra
one, a wrong field or a wrong line fails. Two cases are generated rather than committed: a
file over 1 MiB and a file with too many documents.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, ConfigIssue, load_bundle
from bundle.source import MAX_DOCUMENTS

CORPUS = sorted((Path(__file__).parent / "corpus").glob("*.yaml"))
Expected = tuple[str, str | None, int | None]


@functools.cache
def expectations(path: Path) -> tuple[Expected, ...]:
    """The ``# expect:`` header of a corpus file (each file is read once per session)."""
    out: list[Expected] = []
    for line in path.read_text().splitlines():
        if not line.startswith("# expect: "):
            break
        code, field, number = line.removeprefix("# expect: ").split()
        out.append((code, None if field == "-" else field, int(number)))
    assert out, f"{path.name} has no `# expect:` header"
    return tuple(out)


def issues_of(path: Path) -> list[ConfigIssue]:
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    return raised.value.errors


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_broken_file_yields_exactly_its_issues(path: Path) -> None:
    issues = issues_of(path)
    found = sorted(((i.code, i.field, i.line) for i in issues), key=str)
    assert found == sorted(expectations(path), key=str), "\n".join(i.format() for i in issues)
    for issue in issues:
        assert issue.file is not None
        assert issue.file.name == path.name
        assert issue.message.strip()
        text = issue.format()
        assert f"{path.name}:{issue.line}" in text
        assert text.splitlines()[0].endswith(f"({issue.code})")
        assert issue.help_url.endswith(f"/errors/{issue.code}")


def test_a_file_over_one_mebibyte_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    # valid YAML would take seconds to parse; the size check must come first
    path.write_text("a: [" + "1, " * (1024 * 1024 // 3) + "1]\n")
    [issue] = issues_of(path)
    assert (issue.code, issue.file) == ("E_CONFIG_FILE_TOO_LARGE", path)
    assert str(1024 * 1024) in issue.message


def test_a_utf16_file_is_named_as_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text((CORPUS[0]).read_text(), encoding="utf-16")
    [issue] = issues_of(path)
    assert (issue.code, issue.line) == ("E_CONFIG_PARSE_ERROR", 1)
    assert "not UTF-8 (it looks like UTF-16)" in issue.message


def test_an_invalid_byte_is_found_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_bytes(b"apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: \xff}\n")
    [issue] = issues_of(path)
    assert (issue.code, issue.line) == ("E_CONFIG_PARSE_ERROR", 3)


def test_an_integer_of_thousands_of_digits_is_an_error_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: s}\nspec:\n"
        "  entryAgent: Agent/a\n  agents: [Agent/a]\n  policy:\n"
        f"    maxStepsPerTurn: {'9' * 5000}\n"
    )
    [issue] = issues_of(path)
    assert (issue.code, issue.line) == ("E_CONFIG_PARSE_ERROR", 8)
    assert "4300 digits" in issue.message


def test_a_name_of_900000_characters_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(
        f"apiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {{name: {'a' * 900_000}}}\nspec: {{}}\n"
    )
    issues = issues_of(path)
    assert any(
        i.code == "E_CONFIG_INVALID_NAME" and "900000 characters" in i.message for i in issues
    )


def test_a_file_of_exactly_one_mebibyte_is_read(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_bytes(b"#" * (1024 * 1024 - 1) + b"\n")
    assert "E_CONFIG_FILE_TOO_LARGE" not in {i.code for i in issues_of(path)}


def test_too_many_documents_are_refused_at_the_first_one_over(tmp_path: Path) -> None:
    model = "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {{name: m{i}}}\nspec: {{provider: openai, model: x}}\n"
    path = tmp_path / "goondan.yaml"
    path.write_text("---\n".join(model.format(i=i) for i in range(MAX_DOCUMENTS + 1)))
    [issue] = issues_of(path)
    assert issue.code == "E_CONFIG_TOO_MANY_DOCUMENTS"
    assert issue.line == MAX_DOCUMENTS * 5 + 1  # 4 lines and a separator per document


def test_exactly_the_document_limit_is_accepted(tmp_path: Path) -> None:
    model = "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {{name: m{i}}}\nspec: {{provider: openai, model: x}}\n"
    path = tmp_path / "goondan.yaml"
    path.write_text("---\n".join(model.format(i=i) for i in range(MAX_DOCUMENTS)))
    assert load_bundle(path).summary() == f"{MAX_DOCUMENTS} Models"


CLI_CASES = [
    "syntax_error",
    "alias_bomb",
    "deep_nesting",
    "module_raises_on_import",
    "module_exits_on_import",
    "configure_raises",
    "three_mistakes",
    "unknown_kind",
]


def expected_exit(path: Path) -> int:
    """3 when the file cannot be read at all, 4 when it was read and is invalid."""
    unreadable = {"E_CONFIG_FILE_NOT_FOUND", "E_CONFIG_FILE_TOO_LARGE", "E_CONFIG_PARSE_ERROR"}
    return 3 if {code for code, _, _ in expectations(path)} <= unreadable else 4


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_cli_exits_3_or_4_and_prints_each_issue_without_a_traceback(name: str) -> None:
    path = Path(__file__).parent / "corpus" / f"{name}.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = expectations(path)
    assert done.returncode == expected_exit(path)
    assert "Traceback" not in done.stderr + done.stdout
    for code, _, line in expected:
        assert f"{path.name}:{line}" in done.stderr
        assert f"({code})" in done.stderr
    count = len(expected)
    assert done.stderr.rstrip().endswith(f"{count} error{'s' if count != 1 else ''} in {path}")


def test_the_cli_json_lists_every_error() -> None:
    path = Path(__file__).parent / "corpus" / "three_mistakes.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 4
    report = json.loads(done.stdout)
    assert report["valid"] is False
    assert report["exitCode"] == 4
    found = sorted((e["code"], e["field"], e["line"]) for e in report["errors"])
    assert found == sorted(expectations(path))
    [kind] = [e for e in report["errors"] if e["code"] == "E_CONFIG_UNKNOWN_KIND"]
    assert kind["resource"] == "Gadget/g"
    assert kind["helpUrl"] == "https://docs.goondan.ai/errors/E_CONFIG_UNKNOWN_KIND"
    assert kind["file"] == str(path)
    assert set(kind) == {
        "code",
        "message",
        "file",
        "line",
        "column",
        "resource",
        "field",
        "suggestion",
        "helpUrl",
    }


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_validate_reports_every_corpus_file_cleanly(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI path for all of them (in-process; a few run as real processes above)."""
    from orchestrator.cli import main

    assert main(["validate", str(path)]) == expected_exit(path)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "internal error" not in err
    for code, field, line in expectations(path):
        assert f"{path.name}:{line}" in err
        assert f"({code})" in err
        if field is not None:
            assert field in err
