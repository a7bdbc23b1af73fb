"""Broken goondan.yaml files: each yields its error code, field, file and line; never a traceback.

Each ``corpus/*.yaml`` starts with ``# expect: CODE [field.path]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle

CORPUS = sorted((Path(__file__).parent / "corpus").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, str | None]:
    header = path.read_text().splitlines()[0].removeprefix("# expect: ").split()
    return header[0], header[1] if len(header) > 1 else None


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_broken_file_reports_its_error(path: Path) -> None:
    code, field = expectation(path)
    with pytest.raises(BundleError) as raised:
        load_bundle(path)
    issues = raised.value.errors
    matching = [i for i in issues if i.code == code and (field is None or i.field == field)]
    assert matching, f"expected {code} at {field}; got {[i.format() for i in issues]}"
    for issue in matching:
        assert issue.file is not None
        assert issue.file.name in (path.name, "goondan.yaml")
        assert issue.line is not None or code in ("E_CONFIG_FILE_TOO_LARGE",)
        assert issue.message
        assert issue.format().startswith(f"{issue.location()}")


@pytest.mark.parametrize("path", CORPUS[:8], ids=[p.stem for p in CORPUS[:8]])
def test_the_cli_exits_1_without_a_traceback(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    code, _ = expectation(path)
    assert code in done.stderr
    assert f"{path.name}:" in done.stderr


def test_the_cli_json_lists_every_error() -> None:
    path = next(p for p in CORPUS if p.stem == "duplicate_export")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["valid"] is False
    [error] = [e for e in report["errors"] if e["field"] == "spec.exports[1].name"]
    assert error["code"] == "E_CONFIG_SCHEMA_INVALID"
    assert error["resource"] == "Tool/echo"
    assert error["helpUrl"] == "https://docs.goondan.ai/errors/E_CONFIG_SCHEMA_INVALID"
