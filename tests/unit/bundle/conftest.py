"""The bundles of these tests name shared fixture modules outside their own directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fixture_modules_live_outside_the_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's opt-out (see tests/integration/bundle/test_confinement.py for the default, which refuses)."""
    monkeypatch.setenv("GOONDAN_ALLOW_OUTSIDE_BUNDLE", "1")
