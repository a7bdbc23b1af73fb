"""Where a missing key goes: ``.env`` beside the bundle, pointing at ``.env.example`` only when
the bundle ships one (a hint must not send a user to a file that is not there)."""

from __future__ import annotations

from pathlib import Path

from bundle.connection_needs import SettingNeed
from orchestrator.cli.envfiles import key_hint


def test_the_hint_names_the_example_file_only_when_there_is_one(tmp_path: Path) -> None:
    config = tmp_path / "goondan.yaml"
    config.write_text("")
    assert key_hint(config) == "put it in .env beside goondan.yaml, or export it"
    (tmp_path / ".env.example").write_text("OPENAI_API_KEY=\n")
    assert key_hint(config) == "put it in .env beside goondan.yaml (see .env.example), or export it"
    assert key_hint(tmp_path) == key_hint(config)  # a bundle directory too


def test_a_connections_fix_says_where_the_variable_goes(tmp_path: Path) -> None:
    need = SettingNeed(connection="bot", connector="telegram", variables=("TOKEN",), field=None)
    fix = need.fix(key_hint(tmp_path / "goondan.yaml"))
    assert fix.startswith("put TOKEN=... in .env beside goondan.yaml, or export it")
    assert ".env.example" not in fix
