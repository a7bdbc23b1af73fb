"""``init``'s templates are found wherever the scaffold module lives, and written whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.scaffold import TEMPLATES, ScaffoldRefused, scaffold, template_files


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_writes_a_configuration_and_its_tool(tmp_path: Path, template: str) -> None:
    assert Path("goondan.yaml") in template_files(template)
    done = scaffold(tmp_path / "my-swarm", template)
    for name in ("goondan.yaml", ".env.example", ".gitignore", "tools/greet.py"):
        assert (tmp_path / "my-swarm" / name).is_file(), name
    assert "{{name}}" not in (tmp_path / "my-swarm" / "goondan.yaml").read_text()
    assert done.name == "my-swarm"


def test_an_existing_file_is_not_overwritten_without_force(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text("# mine\n")
    with pytest.raises(ScaffoldRefused, match=r"goondan\.yaml"):
        scaffold(tmp_path)
    assert (tmp_path / "goondan.yaml").read_text() == "# mine\n"
