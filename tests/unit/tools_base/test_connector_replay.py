"""The delivery cache of the HTTP connectors: expiry, its bounds, concurrent takes, the file
it keeps, the order of claim, journal and record, and the timestamps the schemes sign."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.http_connector import RecordingLogger
from tools_base.connectors._replay import (
    Deliveries,
    Outcome,
    accept_once,
    unix_seconds,
    within,
)


async def take(deliveries: Deliveries, keys: list[str], *, until: float) -> bool:
    """Claim ``keys`` and record them, as a request whose event was journaled."""
    claim = deliveries.claim(keys, until=until)
    if claim is None:
        return False
    await deliveries.record(claim)
    return True


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
    assert await take(deliveries, ["delivery:a", "signature:s"], until=1100)
    assert not await take(deliveries, ["delivery:a"], until=1100)
    assert not await take(deliveries, ["delivery:b", "signature:s"], until=1100)
    assert await take(deliveries, ["delivery:b"], until=1100)  # the refusal remembered nothing
    clock.now = 1100
    assert not await take(deliveries, ["delivery:a"], until=1200)
    clock.now = 1101
    assert await take(deliveries, ["delivery:a"], until=1200)
    assert await take(deliveries, [], until=1200)


async def test_what_is_taken_is_on_disk_for_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.json"
    clock = Clock(1000)
    deliveries = Deliveries(path, RecordingLogger(), clock=clock)
    assert await take(deliveries, ["delivery:short"], until=1050)
    assert await take(deliveries, ["delivery:long"], until=5000)
    stored = json.loads(path.read_text())
    assert stored["formatVersion"] == 1
    assert sorted(stored["entries"].values()) == [1050, 5000]
    clock.now = 2000
    again = Deliveries(path, RecordingLogger(), clock=clock)
    assert len(again) == 1  # the expired one is gone
    assert not await take(again, ["delivery:long"], until=6000)
    claim = again.claim(["delivery:short"], until=6000)
    assert claim is not None
    await again.record(claim)
    await again.release(claim)
    assert len(Deliveries(path, RecordingLogger(), clock=clock)) == 1


async def test_concurrent_copies_of_one_request_are_taken_once(tmp_path: Path) -> None:
    deliveries = Deliveries(tmp_path / "deliveries.json", RecordingLogger())
    keys = ["delivery:same"]
    outcomes = await asyncio.gather(*(take(deliveries, keys, until=2e9) for _ in range(20)))
    assert outcomes.count(True) == 1
    others = await asyncio.gather(
        *(take(deliveries, [f"delivery:{n}"], until=2e9) for n in range(50))
    )
    assert all(others)
    assert len(Deliveries(tmp_path / "deliveries.json", RecordingLogger())) == 51


async def test_past_its_capacity_the_first_to_expire_go_with_one_warning(tmp_path: Path) -> None:
    log = RecordingLogger()
    path = tmp_path / "deliveries.json"
    deliveries = Deliveries(path, log, capacity=3, clock=Clock(0))
    for n, until in enumerate([500, 100, 400, 300, 200]):
        assert await take(deliveries, [f"delivery:{n}"], until=until)
    assert len(deliveries) == 3
    assert sorted(json.loads(path.read_text())["entries"].values()) == [300, 400, 500]
    assert await take(deliveries, ["delivery:1"], until=600)  # forgotten early
    warnings = [event for level, event, _ in log.records if level == "warning"]
    assert len(warnings) == 1
    assert "delivery cache full" in warnings[0]


async def test_without_a_directory_it_remembers_in_memory() -> None:
    deliveries = Deliveries(None, RecordingLogger())
    assert await take(deliveries, ["delivery:x"], until=2e9)
    assert not await take(deliveries, ["delivery:x"], until=2e9)


async def test_a_claim_refuses_copies_but_is_on_disk_only_once_recorded(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.json"
    deliveries = Deliveries(path, RecordingLogger())
    claim = deliveries.claim(["delivery:a", "signature:s"], until=2e9)
    assert claim is not None
    assert deliveries.claim(["signature:s"], until=2e9) is None  # a copy meanwhile
    assert await take(deliveries, ["delivery:other"], until=2e9)  # another request's write
    # Its event not journaled yet: a crash now must leave the sender's retry free to be taken.
    assert Deliveries(path, RecordingLogger()).claim(["delivery:a"], until=2e9) is not None
    await deliveries.record(claim)
    assert Deliveries(path, RecordingLogger()).claim(["delivery:a"], until=2e9) is None


async def test_a_released_claim_is_free_again_and_costs_no_write(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.json"
    deliveries = Deliveries(path, RecordingLogger())
    claim = deliveries.claim(["delivery:a"], until=2e9)
    assert claim is not None
    await deliveries.release(claim)
    assert not path.exists()
    assert deliveries.claim(["delivery:a"], until=2e9) is not None


async def test_accept_once_records_only_what_was_accepted(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.json"
    deliveries = Deliveries(path, RecordingLogger())
    journal: list[str] = []

    async def journaled(text: str, taken: bool = True) -> bool:
        # Nothing of this request on disk yet while its event is journaled.
        assert Deliveries(path, RecordingLogger()).claim([text], until=2e9) is not None
        journal.append(text)
        return taken

    async def undeclared() -> bool:
        raise ValueError("not declared")

    outcome = await accept_once(deliveries, ["d:1"], until=2e9, accept=lambda: journaled("d:1"))
    assert outcome is Outcome.ACCEPTED
    again = await accept_once(deliveries, ["d:1"], until=2e9, accept=lambda: journaled("d:1"))
    assert again is Outcome.REPLAY
    full = await accept_once(deliveries, ["d:2"], until=2e9, accept=lambda: journaled("d:2", False))
    assert full is Outcome.REFUSED
    with pytest.raises(ValueError, match="not declared"):
        await accept_once(deliveries, ["d:3"], until=2e9, accept=undeclared)
    assert journal == ["d:1", "d:2"]
    on_disk = Deliveries(path, RecordingLogger())
    assert on_disk.claim(["d:1"], until=2e9) is None
    assert on_disk.claim(["d:2"], until=2e9) is not None  # refused: the retry is taken
    assert on_disk.claim(["d:3"], until=2e9) is not None
    assert deliveries.claim(["d:2", "d:3"], until=2e9) is not None


async def test_a_record_that_cannot_be_written_is_logged_and_written_later(
    tmp_path: Path,
) -> None:
    state = tmp_path / "connection"
    state.mkdir()
    log = RecordingLogger()
    deliveries = Deliveries(state / "deliveries.json", log)
    state.rmdir()  # nothing can be written there now
    assert await take(deliveries, ["delivery:a"], until=2e9)  # its event is journaled: taken
    assert ("error", "deliveries not recorded") in [(lv, ev) for lv, ev, _ in log.records]
    assert not await take(deliveries, ["delivery:a"], until=2e9)  # still refused in memory
    state.mkdir()
    assert await take(deliveries, ["delivery:b"], until=2e9)
    on_disk = Deliveries(state / "deliveries.json", RecordingLogger())
    assert on_disk.claim(["delivery:a"], until=2e9) is None
    assert on_disk.claim(["delivery:b"], until=2e9) is None
