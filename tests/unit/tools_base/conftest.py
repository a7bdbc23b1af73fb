"""Shared fixtures for the built-in tool tests: a real ToolContext over a temporary workdir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.tool_context import make_ctx
from tools_base import ToolContext


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The instance workdir; ``tmp_path / "outside"`` is a sibling the tools must not reach."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workdir, holding a secret file."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret")
    return path


@pytest.fixture
def real_workdir(workdir: Path) -> str:
    """The workdir with symlinks resolved (``/tmp`` may itself be a symlink)."""
    return os.path.realpath(workdir)


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    return make_ctx(workdir)
