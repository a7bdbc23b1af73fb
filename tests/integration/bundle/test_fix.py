"""``validate --fix``: name case, a missing apiVersion and trailing whitespace, repaired in
the text itself (comments, order and quoting kept), each change printed."""

from __future__ import annotations

import json
from pathlib import Path

from bundle.fix import fix_bundle
from tests.support.daemon import run_cli

PACKAGE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: fixme}
spec: {version: '1.0.0'}
"""
SWARM = """\
# the swarm, first of all
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/Writer   # the one that answers
  agents:
    - Agent/Writer
"""
MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: 'Brain'
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: hi}]}
"""
AGENT = """\
# no apiVersion here
kind: Agent
metadata: {name: Writer}
spec:
  modelConfig:
    modelRef: {kind: Model, name: Brain}
  prompt:
    system: |
      keep these spaces:   \n\
      and go on
"""


def write(directory: Path, **files: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".")).write_text(text)
    return directory


def test_fix_repairs_each_kind_and_prints_it(tmp_path: Path) -> None:
    directory = write(
        tmp_path / "swarm",
        goondan_yaml=PACKAGE + "---\n" + SWARM.replace("first of all", "first of all  \t"),
        models_yaml=MODEL,
        agents_yaml=AGENT,
    )
    before = run_cli("validate", str(directory), cwd=tmp_path)
    assert before.returncode == 4
    done = run_cli("validate", str(directory), "--fix", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "fixed swarm/goondan.yaml:6: removed trailing whitespace",
        "fixed swarm/goondan.yaml:11: ref Agent/Writer → Agent/writer",
        "fixed swarm/goondan.yaml:13: ref Agent/Writer → Agent/writer",
        "fixed swarm/models.yaml:4: Model name 'Brain' → 'brain' (names are lower-case)",
        "fixed swarm/agents.yaml:2: added `apiVersion: goondan.ai/v1` (Agent/writer)",
        "fixed swarm/agents.yaml:3: Agent name 'Writer' → 'writer' (names are lower-case)",
        "fixed swarm/agents.yaml:6: ref Model/Brain → Model/brain",
        f"{directory}: valid (1 Swarm, 1 Agent, 1 Model)",
    ]
    assert (directory / "goondan.yaml").read_text() == PACKAGE + "---\n" + SWARM.replace(
        "Writer", "writer"
    )
    assert (directory / "models.yaml").read_text() == MODEL.replace("'Brain'", "'brain'")
    assert (directory / "agents.yaml").read_text() == (
        "# no apiVersion here\napiVersion: goondan.ai/v1\n"
        + AGENT.split("\n", 1)[1].replace("Writer", "writer").replace("Brain", "brain")
    )
    assert "keep these spaces:   \n" in (directory / "agents.yaml").read_text()
    again = run_cli("validate", str(directory), "--fix", cwd=tmp_path)
    assert again.stdout.splitlines() == [f"{directory}: valid (1 Swarm, 1 Agent, 1 Model)"]


def test_fix_leaves_a_file_it_cannot_parse_untouched(tmp_path: Path) -> None:
    broken = "kind: Model\nmetadata: {name: Brain}   \nspec: [unclosed\n"
    directory = write(
        tmp_path / "swarm",
        goondan_yaml=PACKAGE + "---\n" + SWARM + "---\n" + AGENT,
        models_yaml=broken,
    )
    done = run_cli("validate", str(directory), "--fix", "--json", cwd=tmp_path)
    assert done.returncode == 4  # a file unread, the rest invalid
    assert (directory / "models.yaml").read_text() == broken
    verdict = json.loads(done.stdout)
    [refused, names] = verdict["notFixed"]
    assert refused["file"] == str(directory / "models.yaml")
    assert refused["reason"].startswith("cannot parse it: invalid YAML")
    assert "names are not lower-cased" in names["reason"]
    # What needs no rename is still repaired elsewhere; names wait, refs and all.
    assert [f["change"] for f in verdict["fixes"]] == [
        "added `apiVersion: goondan.ai/v1` (Agent/Writer)"
    ]
    assert "Agent/Writer" in (directory / "goondan.yaml").read_text()
    assert "E_CONFIG_PARSE_ERROR" in {e["code"] for e in verdict["errors"]}


def test_fix_prints_what_it_refuses_and_exits_as_validate(tmp_path: Path) -> None:
    directory = write(tmp_path / "swarm", goondan_yaml="kind: [Model\n")
    done = run_cli("validate", str(directory / "goondan.yaml"), "--fix", cwd=tmp_path)
    assert done.returncode == 3
    assert "swarm/goondan.yaml: not fixed: cannot parse it: invalid YAML" in done.stderr
    assert (directory / "goondan.yaml").read_text() == "kind: [Model\n"


def test_names_are_lowered_only_when_case_is_all_that_is_wrong(tmp_path: Path) -> None:
    text = (
        PACKAGE
        + "---\n"
        + MODEL.replace("'Brain'", "'Brain Two'")  # a space: not a matter of case
        + "---\n"
        + MODEL.replace("'Brain'", "Writer")
        + "---\n"
        + MODEL.replace("'Brain'", "writer")  # `Writer` would collide with it
        + "---\n"
        + MODEL.replace("'Brain'", "Tool__X")
    )
    path = write(tmp_path, goondan_yaml=text) / "goondan.yaml"
    assert fix_bundle(path).changes == []
    assert path.read_text() == text


def test_crlf_and_a_byte_order_mark_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_bytes(b"\xef\xbb\xbfkind: Model  \r\nmetadata: {name: m}\r\nspec: {}\r\n")
    report = fix_bundle(path)
    assert [c.what for c in report.changes] == [
        "added `apiVersion: goondan.ai/v1` (Model/m)",
        "removed trailing whitespace",
    ]
    assert path.read_bytes() == (
        b"\xef\xbb\xbfapiVersion: goondan.ai/v1\r\nkind: Model\r\nmetadata: {name: m}\r\n"
        b"spec: {}\r\n"
    )


def test_a_rewrite_that_would_change_a_value_is_not_written(tmp_path: Path) -> None:
    # An escaped space at the end of a line inside a double-quoted string is content.
    text = 'kind: Model\nmetadata: {name: m}\nspec: {model: "a\\ \n  b"}\n'
    path = tmp_path / "goondan.yaml"
    path.write_text(text.replace("{name: m}", "{name: m}  "))
    report = fix_bundle(path)
    assert report.refused == []
    assert path.read_text() == "apiVersion: goondan.ai/v1\n" + text
