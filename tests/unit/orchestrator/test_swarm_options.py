"""``Orchestrator.from_bundle``'s options, written once (``SwarmOptions``), still refuse a
misspelt one instead of running with its default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.assembly import SwarmOptions, assemble
from orchestrator.daemon import Orchestrator


def test_the_options_are_the_ones_from_bundle_takes() -> None:
    assert SwarmOptions.__optional_keys__ == {
        "state_dir",
        "swarm",
        "transport",
        "clock",
        "api_listen",
        "api_token",
        "cluster",
        "otlp",
        "cassette",
        "connections",
    }
    assert not SwarmOptions.__required_keys__


@pytest.mark.parametrize("build", [assemble, Orchestrator.from_bundle])
def test_a_misspelt_option_is_refused_before_anything_is_loaded(build: Any, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected options: stat_dir"):
        build(tmp_path / "missing.yaml", stat_dir=tmp_path)
