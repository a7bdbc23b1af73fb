"""A Connection's config is checked by its Connector module's ``check_config`` when handlers
are checked: each problem names the file, the line, the Connection and the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, ConfigIssue, load_bundle

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: "ok"}]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: writer}
spec:
  modelConfig: {modelRef: Model/brain}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: main}
spec:
  entryAgent: Agent/writer
  agents: [Agent/writer]
"""

SCHEDULES = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: clock}
spec:
  connectorRef: {kind: Connector, name: schedule, package: "@goondan/base"}
  config:
    schedules:
      value: |
        - name: digest
          cron: "0 9 * * *"
          text: Write the digest.
        - name: bad
          cron: "0 25 * * *"
          timezone: Atlantis/Capital
          jitterSeconds: -5
          missed: whenever
          text: x
"""

OWN_CONNECTOR = """\
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: own}
spec:
  entry: ./own_connector.py
  events: [{name: ping}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: mine}
spec:
  connectorRef: Connector/own
  config:
    mode: {value: loud}
    token: {valueFrom: {env: OWN_TOKEN}}
"""

OWN_MODULE = """\
import json
from pathlib import Path

async def run(ctx):
    pass

def check_config(config):
    Path(__file__).with_name("seen.json").write_text(json.dumps(dict(config)))
    if config.get("mode") == "explode":
        raise RuntimeError("boom")
    return [("mode", f"mode {config.get('mode')!r} is not one of quiet, normal")]
"""


def write(directory: Path, extra: str) -> Path:
    path = directory / "goondan.yaml"
    path.write_text(SWARM + extra)
    return path


def errors(path: Path) -> list[ConfigIssue]:
    with pytest.raises(BundleError) as raised:
        load_bundle(path, check_handlers=True)
    return raised.value.errors


def test_each_bad_schedule_field_is_named_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, SCHEDULES)
    found = {issue.field: issue for issue in errors(path)}
    lines = path.read_text().splitlines()
    expected = {
        "spec.config.schedules[1].cron": "cron:",
        "spec.config.schedules[1].timezone": "timezone: Atlantis/Capital",
        "spec.config.schedules[1].jitterSeconds": "jitterSeconds: -5",
        "spec.config.schedules[1].missed": "missed: whenever",
    }
    assert set(found) == set(expected)
    for field, text in expected.items():
        issue = found[field]
        assert (issue.file, issue.resource, issue.code) == (
            path,
            "Connection/clock",
            "E_CONFIG_SCHEMA_INVALID",
        )
        assert issue.line is not None
        assert text in lines[issue.line - 1], (field, issue.line)
        assert "schedule 'bad'" in issue.message


def test_without_handler_checks_the_config_waits_for_the_connector(tmp_path: Path) -> None:
    assert load_bundle(write(tmp_path, SCHEDULES), check_handlers=False) is not None


def test_a_connector_modules_own_check(tmp_path: Path) -> None:
    (tmp_path / "own_connector.py").write_text(OWN_MODULE)
    path = write(tmp_path, OWN_CONNECTOR)
    [issue] = errors(path)
    assert (issue.resource, issue.field) == ("Connection/mine", "spec.config.mode")
    assert issue.message == "mode 'loud' is not one of quiet, normal"
    assert issue.line is not None
    assert "mode: {value: loud}" in path.read_text().splitlines()[issue.line - 1]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"mode": "loud", "token": None}  # a valueFrom is not known yet


def test_a_check_that_raises_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "own_connector.py").write_text(OWN_MODULE)
    path = write(tmp_path, OWN_CONNECTOR.replace("value: loud", "value: explode"))
    [issue] = errors(path)
    assert (issue.code, issue.field) == ("E_CONFIG_ENTRY_LOAD_FAILED", "spec.connectorRef")
    assert "check_config(config) of own_connector.py raised RuntimeError: boom" in issue.message


def test_the_validate_command_names_file_line_resource_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, SCHEDULES)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    verdict = json.loads(done.stdout)
    assert verdict["valid"] is False
    timezone = next(e for e in verdict["errors"] if e["field"].endswith(".timezone"))
    assert timezone["resource"] == "Connection/clock"
    assert timezone["field"] == "spec.config.schedules[1].timezone"
    assert Path(timezone["file"]).resolve() == path.resolve()
    assert "Atlantis/Capital" in path.read_text().splitlines()[timezone["line"] - 1]
