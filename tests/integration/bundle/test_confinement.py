"""Entry modules and systemRef files stay inside the bundle directory unless the operator says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle

SWARM = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: echo}}
spec:
  entry: {entry}
  exports: [{{name: say}}]
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: rules, script: {{rules: [{{reply: hi}}]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: a}}
spec:
  modelConfig: {{modelRef: Model/m}}
  prompt: {{systemRef: {prompt}}}
  tools: [Tool/echo]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec: {{entryAgent: Agent/a, agents: [Agent/a]}}
"""
TOOL = "def say(ctx, args):\n    return 'hi'\n\nhandlers = {'say': say}\n"


@pytest.fixture(autouse=True)
def _default_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOONDAN_ALLOW_OUTSIDE_BUNDLE", raising=False)


def bundle_dir(tmp_path: Path, entry: str, prompt: str) -> Path:
    inside = tmp_path / "bundle"
    inside.mkdir()
    (inside / "echo.py").write_text(TOOL)
    (inside / "prompt.md").write_text("You echo.")
    (tmp_path / "outside.py").write_text(TOOL)
    (inside / "goondan.yaml").write_text(SWARM.format(entry=entry, prompt=prompt))
    return inside / "goondan.yaml"


def test_files_inside_the_bundle_are_fine(tmp_path: Path) -> None:
    assert load_bundle(bundle_dir(tmp_path, "./echo.py", "./prompt.md")).summary()


@pytest.mark.parametrize(
    ("entry", "prompt", "field"),
    [
        ("../outside.py", "./prompt.md", "spec.entry"),
        ("./echo.py", "/etc/hostname", "spec.prompt.systemRef"),
        ("./echo.py", "../../../../../../etc/shadow", "spec.prompt.systemRef"),
        ("./link.py", "./prompt.md", "spec.entry"),  # a symlink inside, pointing out
    ],
)
def test_files_outside_the_bundle_are_refused(
    tmp_path: Path, entry: str, prompt: str, field: str
) -> None:
    path = bundle_dir(tmp_path, entry, prompt)
    (path.parent / "link.py").symlink_to(tmp_path / "outside.py")
    with pytest.raises(BundleError) as refused:
        load_bundle(path)
    [issue] = [i for i in refused.value.errors if i.code == "E_CONFIG_OUTSIDE_BUNDLE"]
    assert issue.field == field
    assert issue.line is not None
    assert "--allow-outside-bundle" in (issue.suggestion or "")


def test_the_operator_may_allow_it(tmp_path: Path) -> None:
    path = bundle_dir(tmp_path, "../outside.py", "./prompt.md")
    assert load_bundle(path, allow_outside_bundle=True).summary()
    cli = [sys.executable, "-m", "orchestrator", "validate", str(path)]
    refused = subprocess.run(cli, capture_output=True, text=True, check=False, timeout=60)
    assert refused.returncode == 4
    assert "E_CONFIG_OUTSIDE_BUNDLE" in refused.stderr
    allowed = subprocess.run(
        [*cli, "--allow-outside-bundle"], capture_output=True, text=True, check=False, timeout=60
    )
    assert allowed.returncode == 0, allowed.stderr
    env = {**os.environ, "GOONDAN_ALLOW_OUTSIDE_BUNDLE": "1"}
    by_env = subprocess.run(cli, capture_output=True, text=True, check=False, timeout=60, env=env)
    assert by_env.returncode == 0, by_env.stderr
