"""Where a command finds the state: ``--state-dir`` > ``--state-root`` > ``GOONDAN_STATE_ROOT``
> ``.goondan/`` beside the configuration."""

from __future__ import annotations

from pathlib import Path

from orchestrator.state_dir import resolve_state_dir, state_dir_under_root


def test_precedence(tmp_path: Path) -> None:
    bundle = tmp_path / "My Swarm" / "goondan.yaml"
    bundle.parent.mkdir()
    bundle.write_text("")
    env = {"GOONDAN_STATE_ROOT": str(tmp_path / "env")}
    given = str(tmp_path / "given")
    assert resolve_state_dir(bundle, state_dir=given, state_root="r", environ=env) == Path(given)
    root = tmp_path / "root"
    assert resolve_state_dir(bundle, state_root=str(root), environ=env) == state_dir_under_root(
        root, bundle
    )
    assert resolve_state_dir(bundle, environ=env) == state_dir_under_root(tmp_path / "env", bundle)
    assert resolve_state_dir(bundle, environ={}) == bundle.parent.resolve() / ".goondan"


def test_one_directory_per_bundle_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "a").mkdir(parents=True)
    (tmp_path / "My Swarm").mkdir()
    root = tmp_path / "root"
    first = state_dir_under_root(root, tmp_path / "a" / "goondan.yaml")
    assert first == state_dir_under_root(root, tmp_path / "a")  # the file or its directory
    assert first == state_dir_under_root(root, tmp_path / "a" / "other.yaml")
    assert first != state_dir_under_root(root, tmp_path / "b" / "a")  # same name, elsewhere
    assert first.parent == root.resolve() / "workspaces"
    assert first.name.startswith("a-")
    assert state_dir_under_root(root, tmp_path / "My Swarm").name.startswith("my-swarm-")
