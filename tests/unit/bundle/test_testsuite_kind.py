"""``kind: TestSuite``: its fields, and the rules against the swarm around it, reported with
file, line, field and a did-you-mean like every other kind's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.spec_testsuite import TestSuiteSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "goondan.yaml.example"

SUITE = """\
---
apiVersion: goondan.ai/v1
kind: TestSuite
metadata:
  name: smoke
spec:
  fixtures:
    - path: notes/seed.txt
      content: seeded
      agents: [worker]
  cases:
    - name: writes-a-file
      input: write notes.txt hello
      expect:
        answer: {contains: "Done."}
        handoffs: [worker]
        tools:
          - name: file-system__write
            args: {path: notes.txt}
        maxSteps: 6
    - name: two-turns
      agent: worker
      instanceKey: chat-1
      input: [hi, write a.txt b]
      expect:
        tools: {inOrder: false, calls: [{name: file-system__write}]}
        noErrors: false
"""


def bundle_with(tmp_path: Path, suite: str) -> Path:
    path = tmp_path / "goondan.yaml"
    shutil.copy(EXAMPLE, path)
    path.write_text(path.read_text() + suite)
    return path


def issues_of(path: Path) -> list[str]:
    with pytest.raises(BundleError) as caught:
        load_bundle(path)
    return [f"{i.line} {i.field} {i.message} | {i.suggestion}" for i in caught.value.errors]


def test_a_suite_loads_with_its_defaults(tmp_path: Path) -> None:
    bundle = load_bundle(bundle_with(tmp_path, SUITE))
    [suite] = bundle.of_kind("TestSuite")
    spec: TestSuiteSpec = suite.spec
    first, second = spec.cases
    assert first.input == ["write notes.txt hello"]
    assert first.agent is None
    assert first.instance_key is None
    assert first.expect.no_errors is True
    assert first.expect.answer is not None
    assert first.expect.answer.contains == ["Done."]
    assert first.expect.tools is not None
    assert first.expect.tools.in_order is True
    assert first.expect.tools.calls[0].args == {"path": "notes.txt"}
    assert second.input == ["hi", "write a.txt b"]
    assert second.expect.tools is not None
    assert second.expect.tools.in_order is False
    assert spec.fixtures[0].agents == ["worker"]


def test_a_misspelt_field_names_its_line_field_and_the_field_meant(tmp_path: Path) -> None:
    path = bundle_with(tmp_path, SUITE.replace("maxSteps: 6", "maxStep: 6"))
    [issue] = issues_of(path)
    line = path.read_text().splitlines().index("        maxStep: 6") + 1
    assert issue == (
        f"{line} spec.cases[0].expect.maxStep unknown field 'maxStep' | did you mean `maxSteps`?"
    )


def test_an_unknown_agent_gets_a_did_you_mean(tmp_path: Path) -> None:
    suite = SUITE.replace("agent: worker", "agent: wroker").replace(
        "handoffs: [worker]", "handoffs: [workers]"
    )
    path = bundle_with(tmp_path, suite)
    found = issues_of(path)
    lines = path.read_text().splitlines()
    assert found == [
        f"{lines.index('        handoffs: [workers]') + 1} spec.cases[0].expect.handoffs[0] "
        "handoff to 'workers', which is not one of the swarm's agents | did you mean 'worker'?",
        f"{lines.index('      agent: wroker') + 1} spec.cases[1].agent "
        "agent 'wroker' is not one of the swarm's agents | did you mean 'worker'?",
    ]


def test_an_unknown_tool_and_a_duplicate_case_are_reported(tmp_path: Path) -> None:
    suite = SUITE.replace("- name: file-system__write\n", "- name: file-system__wrte\n").replace(
        "name: two-turns", "name: writes-a-file"
    )
    found = issues_of(bundle_with(tmp_path, suite))
    assert any(
        "spec.cases[0].expect.tools[0].name tool 'file-system__wrte' is not offered" in f
        and "did you mean 'file-system__write'?" in f
        for f in found
    ), found
    assert any("case name 'writes-a-file' is used twice" in f for f in found), found


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ("input: [hi, write a.txt b]", "spec.cases[1].input", "at least 1 item"),
        ('answer: {contains: "Done."}', "spec.cases[0].expect.answer", "at least one of"),
        ("content: seeded", "spec.fixtures[0]", "exactly one of"),
        ("path: notes/seed.txt", "spec.fixtures[0].path", "relative path"),
    ],
)
def test_a_field_out_of_shape_is_named(
    tmp_path: Path, change: str, field: str, message: str
) -> None:
    replacement = {
        "input: [hi, write a.txt b]": "input: []",
        'answer: {contains: "Done."}': "answer: {}",
        "content: seeded": "content: seeded\n      source: seed.txt",
        "path: notes/seed.txt": "path: ../outside.txt",
    }[change]
    found = issues_of(bundle_with(tmp_path, SUITE.replace(change, replacement)))
    [issue] = found
    assert f" {field} " in issue, issue
    assert message in issue, issue


def test_an_answer_pattern_that_does_not_compile_is_named(tmp_path: Path) -> None:
    suite = SUITE.replace('answer: {contains: "Done."}', 'answer: {matches: "(unclosed"}')
    [issue] = issues_of(bundle_with(tmp_path, suite))
    assert " spec.cases[0].expect.answer.matches " in issue, issue
    assert "invalid regular expression '(unclosed'" in issue, issue
