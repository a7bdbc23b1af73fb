"""``python -m orchestrator validate`` and ``schema``, run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import bundle
import orchestrator.cli
from orchestrator.__main__ import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "goondan.yaml.example"
BUILTIN = ROOT / "tools_base" / "goondan.yaml"
RAISES = ROOT / "tests" / "unit" / "bundle" / "corpus" / "module_raises_on_import.yaml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_valid_file_prints_one_summary_line_and_exits_0() -> None:
    done = cli("validate", str(EXAMPLE))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{EXAMPLE}: valid (1 Swarm, 2 Agents, 2 Models)\n"


def test_json_output_for_a_valid_file() -> None:
    done = cli("validate", "--json", str(EXAMPLE))
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert (report["valid"], report["errors"]) == (True, [])


def test_a_missing_file_is_one_error_and_exit_3(tmp_path: Path) -> None:
    missing = tmp_path / "goondan.yaml"
    done = cli("validate", str(missing))
    assert done.returncode == 3  # the configuration cannot be read
    assert "E_CONFIG_FILE_NOT_FOUND" in done.stderr
    assert done.stderr.rstrip().endswith(f"1 error in {missing}")
    assert "Traceback" not in done.stderr


def test_no_handlers_skips_importing_tool_modules() -> None:
    assert cli("validate", str(RAISES)).returncode == 4  # read, and invalid
    done = cli("validate", "--no-handlers", str(RAISES))
    assert done.returncode == 0, done.stderr
    assert "valid (1 Tool)" in done.stdout


def test_bad_usage_is_an_argparse_error() -> None:
    done = cli("validate", "--no-such-option")
    assert done.returncode == 2
    assert "usage:" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_internal_error_is_one_line_unless_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(bundle, "load_bundle", explode)
    # in this process: the side of validate that a child runs
    assert main(["validate", str(EXAMPLE), "--verdict-from-child"]) == 1
    err = capsys.readouterr().err
    assert err == "internal error: RuntimeError: a bug of ours (rerun with --debug)\n"
    assert main(["--debug", "validate", str(EXAMPLE), "--verdict-from-child"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.endswith("internal error: RuntimeError: a bug of ours (rerun with --debug)\n")


def test_main_is_the_console_script_entry_point() -> None:
    assert main is orchestrator.cli.main
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'goondan = "orchestrator.__main__:main"' in pyproject


# -- schema ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    done = cli("schema")
    assert done.returncode == 0
    printed: dict[str, Any] = json.loads(done.stdout)
    assert printed == bundle.json_schema()
    assert done.stdout.startswith('{\n  "$schema"')  # indent 2
    return printed


def documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_the_schema_is_a_valid_draft_2020_12_schema(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert [b["title"] for b in schema["oneOf"]] == list(bundle.KINDS)


@pytest.mark.parametrize("path", [EXAMPLE, BUILTIN], ids=["example", "builtin"])
def test_the_schema_accepts_every_valid_document(schema: dict[str, Any], path: Path) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    for document in documents(path):
        assert [e.message for e in validator.iter_errors(document)] == []


ENVELOPE = {"apiVersion": "goondan.ai/v1", "metadata": {"name": "x"}}


@pytest.mark.parametrize(
    "document",
    [
        {**ENVELOPE, "kind": "Widget", "spec": {}},
        {**ENVELOPE, "kind": "Tool"},
        {**ENVELOPE, "kind": "Tool", "spec": {"entry": "./t.py", "exports": []}},
        {**ENVELOPE, "kind": "Tool", "spec": {"entry": 1, "exports": [{"name": "a"}]}},
        {**ENVELOPE, "kind": "Tool", "spec": {"entry": "t", "exports": [{"name": "A"}], "x": 1}},
        {**ENVELOPE, "kind": "Model", "spec": {"provider": "openai"}},
        {**ENVELOPE, "kind": "Agent", "spec": {"modelConfig": {"modelRef": "no-slash"}}},
        {**ENVELOPE, "kind": "Swarm", "spec": {"entryAgent": "Agent/a", "agents": []}},
        {**ENVELOPE, "apiVersion": "goondan.ai/v2", "kind": "Package"},
        {"apiVersion": "goondan.ai/v1", "kind": "Package"},
        {**ENVELOPE, "kind": "Package", "extra": True},
    ],
)
def test_the_schema_rejects_bad_documents(schema: dict[str, Any], document: Any) -> None:
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(document))


def test_the_schema_describes_fields_for_editors(schema: dict[str, Any]) -> None:
    tool = schema["$defs"]["ToolSpec"]["properties"]
    assert "errorMessageLimit" in tool
    assert tool["errorMessageLimit"]["default"] == 1000
    assert "1000" in tool["errorMessageLimit"]["description"]
    assert schema["oneOf"][2]["description"].startswith("``kind: Tool``")


def _tool_bundle(tmp_path: Path, module: str) -> Path:
    (tmp_path / "tool.py").write_text(module)
    path = tmp_path / "goondan.yaml"
    path.write_text(
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\n"
        "spec: {entry: ./tool.py, exports: [{name: run}]}\n"
    )
    return path


@pytest.mark.parametrize(
    ("module", "timeout", "expected"),
    [
        # exit 0 with no output, before; the deadline is not what catches it, so a generous one
        # (a child slowed down by a busy machine must not be mistaken for a hung one)
        ("import os\nos._exit(0)\n", "60", "without a verdict"),
        ("while True:\n    pass\n", "2", "did not finish within 2 s"),  # hung validate forever
    ],
)
def test_a_module_that_exits_or_loops_at_import_fails_validation(
    tmp_path: Path, module: str, timeout: str, expected: str
) -> None:
    path = _tool_bundle(tmp_path, module)
    env = {"GOONDAN_VALIDATE_TIMEOUT": timeout, "GOONDAN_ALLOW_OUTSIDE_BUNDLE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 4
    assert expected in done.stderr
    assert "E_CONFIG_ENTRY_LOAD_FAILED" in done.stderr
    leftover = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, check=False)
    assert leftover.stdout == b""  # the stuck child was killed, not left behind
