"""The delivery cache of the HTTP connectors: expiry, its bounds, concurrent takes, the file
it keeps, and the timestamps the schemes sign."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.http_connector import RecordingLogger
from tools_base.connectors._replay import Deliveries, unix_seconds, within


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("1700000000", 1700000000),
        (" 1700000000 ", 1700000000),
        ("0", 0),
        (None, None),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("1e9", None),
        ("9" * 13, None),
        ("9" * 5000, None),
        ("1²", None),  # str.isdigit() says yes; int() would raise
        ("١٢٣", None),  # Arabic-Indic digits, which int() takes
    ],
)
def test_unix_seconds_are_a_few_ascii_digits(raw: str | None, seconds: int | None) -> None:
    assert unix_seconds(raw) == seconds


def test_the_window_reaches_both_ways() -> None:
    assert within(1000, now=1300, window=300)
    assert within(1000, now=700, window=300)
    assert not within(1000, now=1301, window=300)
    assert not within(1000, now=699, window=300)


async def test_a_key_is_refused_until_it_expires(tmp_path: Path) -> None:
    clock = Clock(1000)
    deliveries = Deliveries(tmp_path / "deliveries.json", RecordingLogger(), clock=clock)
    assert await deliveries.take(["delivery:a", "signature:s"], until=1100)
    assert not await deliveries.take(["delivery:a"], until=1100)
    assert not await deliveries.take(["delivery:b", "signature:s"], until=1100)
    assert await deliveries.take(["delivery:b"], until=1100)  # the refusal remembered nothing
    clock.now = 1100
    assert not await deliveries.take(["delivery:a"], until=1200)
    clock.now = 1101
    assert await deliveries.take(["delivery:a"], until=1200)
    assert await deliveries.take([], until=1200)


async def test_what_is_taken_is_on_disk_for_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.json"
    clock = Clock(1000)
    deliveries = Deliveries(path, RecordingLogger(), clock=clock)
    assert await deliveries.take(["delivery:short"], until=1050)
    assert await deliveries.take(["delivery:long"], until=5000)
    stored = json.loads(path.read_text())
    assert stored["formatVersion"] == 1
    assert sorted(stored["entries"].values()) == [1050, 5000]
    clock.now = 2000
    again = Deliveries(path, RecordingLogger(), clock=clock)
    assert len(again) == 1  # the expired one is gone
    assert not await again.take(["delivery:long"], until=6000)
    assert await again.take(["delivery:short"], until=6000)
    await again.release(["delivery:short"])
    assert len(Deliveries(path, RecordingLogger(), clock=clock)) == 1


async def test_concurrent_copies_of_one_request_are_taken_once(tmp_path: Path) -> None:
    deliveries = Deliveries(tmp_path / "deliveries.json", RecordingLogger())
    keys = ["delivery:same"]
    outcomes = await asyncio.gather(*(deliveries.take(keys, until=2e9) for _ in range(20)))
    assert outcomes.count(True) == 1
    others = await asyncio.gather(
        *(deliveries.take([f"delivery:{n}"], until=2e9) for n in range(50))
    )
    assert all(others)
    assert len(Deliveries(tmp_path / "deliveries.json", RecordingLogger())) == 51


async def test_past_its_capacity_the_first_to_expire_go_with_one_warning(tmp_path: Path) -> None:
    log = RecordingLogger()
    path = tmp_path / "deliveries.json"
    deliveries = Deliveries(path, log, capacity=3, clock=Clock(0))
    for n, until in enumerate([500, 100, 400, 300, 200]):
        assert await deliveries.take([f"delivery:{n}"], until=until)
    assert len(deliveries) == 3
    assert sorted(json.loads(path.read_text())["entries"].values()) == [300, 400, 500]
    assert await deliveries.take(["delivery:1"], until=600)  # forgotten early
    warnings = [event for level, event, _ in log.records if level == "warning"]
    assert len(warnings) == 1
    assert "delivery cache full" in warnings[0]


async def test_without_a_directory_it_remembers_in_memory() -> None:
    deliveries = Deliveries(None, RecordingLogger())
    assert await deliveries.take(["delivery:x"], until=2e9)
    assert not await deliveries.take(["delivery:x"], until=2e9)
