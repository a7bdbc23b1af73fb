"""A bundle directory is walked as upstream does: nested files, singular and plural names,
and never into build output, dependencies, version control, virtualenvs or the state dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.scan import bundle_candidates, bundle_files
from tests.support.daemon import run_cli

ROOT = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: scanned}
spec: {version: '1.0.0'}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/writer, agents: [Agent/writer]}
"""
MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec: {provider: scripted, model: rules, script: {rules: [{reply: hi}]}}
"""
AGENT = """\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: writer}
spec: {modelConfig: {modelRef: Model/brain}}
"""
BROKEN = "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: BROKEN}\nspec: [not a spec\n"
"""Loaded, this would fail the bundle: it must be skipped wherever it lies below."""


def bundle_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_nested_and_singular_files_are_read(tmp_path: Path) -> None:
    directory = bundle_dir(
        tmp_path, {"goondan.yaml": ROOT, "sub/models.yaml": MODEL, "agent.yml": AGENT}
    )
    bundle = load_bundle(directory, check_handlers=False)
    assert bundle.files == [
        directory / "goondan.yaml",
        directory / "agent.yml",
        directory / "sub/models.yaml",
    ]
    assert bundle.get("Model", "brain").file == directory / "sub" / "models.yaml"
    assert bundle.agent("writer").file == directory / "agent.yml"
    assert bundle.agent_plan("writer", tmp_path / "state").model.name == "brain"


def test_a_singular_model_yaml_is_read(tmp_path: Path) -> None:
    directory = bundle_dir(tmp_path, {"goondan.yaml": ROOT + "---\n" + AGENT, "model.yaml": MODEL})
    assert load_bundle(directory, check_handlers=False).get("Model", "brain").file == (
        directory / "model.yaml"
    )


def test_names_are_matched_in_any_case_and_other_yaml_is_ignored(tmp_path: Path) -> None:
    directory = bundle_dir(
        tmp_path,
        {
            "goondan.yaml": ROOT,
            "config/Models.YAML": MODEL,
            "config/agents.yaml": AGENT,
            "config/settings.yaml": BROKEN,
            "models.json": BROKEN,
        },
    )
    bundle = load_bundle(directory, check_handlers=False)
    assert [f.relative_to(directory).as_posix() for f in bundle.files] == [
        "goondan.yaml",
        "config/Models.YAML",
        "config/agents.yaml",
    ]


@pytest.mark.parametrize(
    "skipped",
    [
        "dist/models.yaml",
        "node_modules/some-package/goondan.yaml",
        ".goondan/packages/@x/y/1.0.0/goondan.yaml",
        ".git/models.yaml",
        "DIST/tools.yaml",
        ".venv/lib/models.yaml",
        "env/lib/python3.11/site-packages/x/models.yaml",  # a virtualenv: pyvenv.cfg
    ],
)
def test_build_output_dependencies_and_state_are_skipped(tmp_path: Path, skipped: str) -> None:
    directory = bundle_dir(
        tmp_path,
        {
            "goondan.yaml": ROOT,
            "agents/agents.yaml": AGENT,
            "agents/models.yaml": MODEL,
            skipped: BROKEN,
            "env/pyvenv.cfg": "home = /usr/bin\n",
        },
    )
    bundle = load_bundle(directory, check_handlers=False)  # BROKEN would fail it
    assert directory / skipped not in bundle.files
    assert len(bundle.files) == 3


def test_an_error_in_a_nested_file_names_that_file(tmp_path: Path) -> None:
    directory = bundle_dir(
        tmp_path, {"goondan.yaml": ROOT + "---\n" + AGENT, "deep/er/models.yaml": BROKEN}
    )
    with pytest.raises(BundleError) as caught:
        load_bundle(directory, check_handlers=False)
    assert {i.file for i in caught.value.errors} >= {directory / "deep/er/models.yaml"}


def test_a_symlinked_directory_is_not_followed(tmp_path: Path) -> None:
    directory = bundle_dir(tmp_path / "b", {"goondan.yaml": ROOT, "x/models.yaml": MODEL})
    (directory / "x" / "loop").symlink_to(directory, target_is_directory=True)
    assert bundle_files(directory) == [directory / "goondan.yaml", directory / "x/models.yaml"]


def test_the_watcher_sees_a_file_added_to_a_subdirectory(tmp_path: Path) -> None:
    directory = bundle_dir(tmp_path, {"goondan.yaml": ROOT, "sub/models.yaml": MODEL})
    candidates = bundle_candidates(directory)
    assert directory / "sub" / "agents.yaml" in candidates
    assert directory / "model.yml" in candidates


def test_validate_verbose_lists_the_files_read(tmp_path: Path) -> None:
    directory = bundle_dir(
        tmp_path / "swarm",
        {
            "goondan.yaml": ROOT,
            "sub/models.yaml": MODEL,
            "agent.yaml": AGENT,
            "dist/models.yaml": BROKEN,
        },
    )
    done = run_cli("validate", str(directory), "--verbose", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == [
        "read swarm/goondan.yaml",
        "read swarm/agent.yaml",
        "read swarm/sub/models.yaml",
    ]
    quiet = run_cli("validate", str(directory), cwd=tmp_path)
    assert "read " not in quiet.stdout
