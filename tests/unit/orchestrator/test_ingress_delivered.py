"""The daemon's record of delivered connector events survives a restart and stays bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import ingress_delivered
from orchestrator.ingress_delivered import DeliveredLog


async def test_a_delivered_id_is_remembered_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "connections" / "hooks" / "ingress-delivered.jsonl"
    log = DeliveredLog(path)
    assert "ev-1" not in log
    await log.mark("ev-1")
    await log.mark("ev-1")  # once
    assert "ev-1" in DeliveredLog(path)
    assert len(path.read_text().splitlines()) == 1


async def test_only_the_newest_ids_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingress_delivered, "KEEP", 3)
    path = tmp_path / "ingress-delivered.jsonl"
    log = DeliveredLog(path)
    for n in range(10):
        await log.mark(f"ev-{n}")
    assert len(path.read_text().splitlines()) <= 6
    again = DeliveredLog(path)
    assert "ev-9" in again
    assert "ev-0" not in again
