"""A misspelt field or reference is answered with the name it most likely meant, found among
the names allowed at its place (nested fields, list items and map values included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.spec_agent import AgentSpec
from bundle.spec_swarm import SwarmSpec
from bundle.spelling import field_names, nearest

CONFIG = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec:
  provider: scripted
  model: rules
  script: {{rules: [{{reply: hi}}]}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: greet}}
spec:
  {entry}: ./greet.py
  exports: [{{name: hi}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: a}}
spec:
  modelConfig: {{modelRef: Model/m}}
  tools: [{tool}]
  toolPolicy: {{{policy}: 3}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/a
  agents: [Agent/a]
"""


def hints(tmp_path: Path, **written: str) -> dict[str, str | None]:
    values = {"entry": "entry", "tool": "Tool/greet", "policy": "maxToolCallsPerStep", **written}
    path = tmp_path / "goondan.yaml"
    path.write_text(CONFIG.format(**values))
    (tmp_path / "greet.py").write_text("def handlers():\n    return {}\n")
    with pytest.raises(BundleError) as caught:
        load_bundle(path, check_handlers=False)
    return {issue.field or "": issue.suggestion for issue in caught.value.errors}


def test_a_misspelt_field_is_offered_the_field_it_meant(tmp_path: Path) -> None:
    found = hints(tmp_path, entry="entyr", policy="maxToolCallsPerStpe")
    assert found["spec.entyr"] == "did you mean `entry`?"
    assert found["spec.toolPolicy.maxToolCallsPerStpe"] == "did you mean `maxToolCallsPerStep`?"


def test_a_misspelt_reference_is_offered_the_resource_it_meant(tmp_path: Path) -> None:
    assert hints(tmp_path, tool="Tool/gret")["spec.tools[0]"] == "did you mean Tool/greet?"


def test_a_name_far_from_any_gets_the_usual_hint(tmp_path: Path) -> None:
    found = hints(tmp_path, policy="colour")
    assert found["spec.toolPolicy.colour"] == (
        "remove it, or check its spelling (field names are camelCase)"
    )


def test_field_names_follow_lists_and_maps() -> None:
    assert "node" in field_names(SwarmSpec, ["placement", "worker"])
    assert "timeoutSeconds" in field_names(AgentSpec, ["toolPolicy", "approval"])
    assert field_names(AgentSpec, ["nothing"]) == []
    assert nearest("entyr", ["entry", "exports"]) == "entry"
    assert nearest("zzz", ["entry"]) is None
