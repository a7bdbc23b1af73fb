"""``validate`` checks in a child only the configurations that name modules of their own.

A child costs a second and more of imports; it is there so that a module the configuration
names cannot end or wedge the command. A configuration whose Tools are all built in imports
only the runtime's own code and is checked in the calling process. The knob that proves which
happened: ``GOONDAN_VALIDATE_TIMEOUT`` bounds only the child.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bundle.user_code import runtime_package_dirs, user_code
from orchestrator.validation import validate

BUILTIN_ONLY = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec: {provider: scripted, model: rules, script: {rules: [{reply: hi}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: writer}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [{ref: {kind: Tool, name: bash, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/writer, agents: [Agent/writer]}
"""
OWN_TOOL = """\
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: mine}
spec:
  entry: ./mine.py
  exports: [{name: say, parameters: {type: object}}]
"""
OWN_EXTENSION = """\
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: ctx}
spec: {entry: ./ext.py}
"""
OWN_CONNECTOR = """\
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: feed}
spec: {entry: ./feed.py, events: [{name: message}]}
"""
# Records the pid of the process that imported it, so the test can tell where that was.
RECORDING_MODULE = """\
import os
with open(os.environ["IMPORTED_BY"], "a") as f:
    f.write(f"{os.getpid()}\\n")
handlers = {"say": lambda ctx, input: "hi"}
"""


@pytest.fixture(autouse=True)
def _confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOONDAN_ALLOW_OUTSIDE_BUNDLE", raising=False)


def test_a_configuration_of_built_in_tools_names_no_user_code(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY)
    assert runtime_package_dirs()  # else every configuration would count as user code
    assert user_code(path) == []


def test_own_tools_extensions_and_connectors_are_user_code(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY + OWN_TOOL + OWN_EXTENSION + OWN_CONNECTOR)
    for name in ("mine.py", "ext.py", "feed.py"):
        (tmp_path / name).write_text("handlers = {}\n")
    assert sorted(p.name for p in user_code(path)) == ["ext.py", "feed.py", "mine.py"]


def test_an_entry_that_does_not_exist_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY + OWN_TOOL)
    assert user_code(path) == []


def test_without_user_code_the_check_runs_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY)
    # a child could not even start within this deadline
    monkeypatch.setenv("GOONDAN_VALIDATE_TIMEOUT", "0.000001")
    verdict = validate(path, check_handlers=True)
    assert verdict["valid"] is True, verdict
    assert verdict["summary"] == "1 Swarm, 1 Agent, 1 Model"


def test_a_configuration_with_its_own_module_is_still_checked_in_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY + OWN_TOOL)
    (tmp_path / "mine.py").write_text(RECORDING_MODULE)
    record = tmp_path / "imported_by"
    monkeypatch.setenv("IMPORTED_BY", str(record))
    verdict = validate(path, check_handlers=True)
    assert verdict["valid"] is True, verdict
    [pid] = record.read_text().split()
    assert int(pid) != os.getpid()


def test_no_handlers_imports_no_module_and_needs_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUILTIN_ONLY + OWN_TOOL)
    (tmp_path / "mine.py").write_text(RECORDING_MODULE)
    record = tmp_path / "imported_by"
    monkeypatch.setenv("IMPORTED_BY", str(record))
    monkeypatch.setenv("GOONDAN_VALIDATE_TIMEOUT", "0.000001")
    verdict = validate(path, check_handlers=False)
    assert verdict["valid"] is True, verdict
    assert not record.exists()
