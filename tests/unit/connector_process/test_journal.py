"""The ingress journal keeps what the daemon still owes, across restarts, and stays bounded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from connector_process import journal as journal_module
from connector_process.health import MAX_ERROR_CHARS, Redactor
from connector_process.journal import (
    IngressJournal,
    JournaledEvent,
    JournalUnreadable,
    delivery_event_id,
)


def event(n: int) -> JournaledEvent:
    return JournaledEvent(f"hooks-{n}", "webhook_message", f"text {n}", "hooks", {"n": str(n)})


async def test_what_is_not_settled_is_read_back_in_order(tmp_path: Path) -> None:
    path = tmp_path / "ingress.jsonl"
    journal = IngressJournal(path)
    accepted = [event(n) for n in range(3)]
    for one in accepted:
        await journal.accept(one)
    await journal.settle("hooks-1")
    journal.close()
    again = IngressJournal(path)
    assert [e.event_id for e in again.unsettled()] == ["hooks-0", "hooks-2"]
    assert again.unsettled()[1] == accepted[2]


async def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ingress.jsonl"
    journal = IngressJournal(path)
    await journal.accept(event(0))
    journal.close()
    path.write_bytes(path.read_bytes() + b'{"v":1,"op":"accepted","id":"hooks-1","ev')
    assert [e.event_id for e in IngressJournal(path).unsettled()] == ["hooks-0"]


async def test_a_delivery_accepted_twice_is_one_event(tmp_path: Path) -> None:
    path = tmp_path / "ingress.jsonl"
    journal = IngressJournal(path)
    event_id = delivery_event_id("hooks", "delivery:abc")
    copies = [
        JournaledEvent(event_id, "webhook_message", "once", "hooks", accepted_at=f"t{n}")
        for n in range(5)
    ]
    outcomes = await asyncio.gather(*(journal.accept(copy) for copy in copies))
    assert outcomes.count(True) == 1
    assert [e.event_id for e in journal.unsettled()] == [event_id]
    assert len(path.read_text().splitlines()) == 1
    # Settled, the same delivery again is journaled again: the daemon knows it as delivered.
    await journal.settle(event_id)
    assert await journal.accept(copies[0])
    journal.close()
    assert [e.event_id for e in IngressJournal(path).unsettled()] == [event_id]


def test_a_delivery_id_gives_one_event_id_per_connection() -> None:
    one = delivery_event_id("hooks", "delivery:abc")
    assert one == delivery_event_id("hooks", "delivery:abc")
    assert one.startswith("hooks-")
    assert "abc" not in one  # whatever the sender put in a header is not echoed
    assert one != delivery_event_id("hooks", "delivery:abd")
    assert one != delivery_event_id("other", "delivery:abc")


def test_a_newer_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ingress.jsonl"
    path.write_text(json.dumps({"v": 99, "op": "accepted", "id": "x"}) + "\n")
    with pytest.raises(JournalUnreadable, match=str(path)):
        IngressJournal(path)


async def test_settled_events_are_compacted_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "COMPACT_AFTER", 5)
    path = tmp_path / "ingress.jsonl"
    journal = IngressJournal(path)
    for n in range(20):
        await journal.accept(event(n))
        if n != 7:
            await journal.settle(f"hooks-{n}")
    lines = path.read_text().splitlines()
    assert len(lines) < 15  # not one line per accept and settle: rewritten along the way
    assert [e.event_id for e in IngressJournal(path).unsettled()] == ["hooks-7"]


async def test_opening_rewrites_the_file_with_only_what_is_owed(tmp_path: Path) -> None:
    path = tmp_path / "ingress.jsonl"
    journal = IngressJournal(path)
    for n in range(4):
        await journal.accept(event(n))
        await journal.settle(f"hooks-{n}")
    await journal.accept(event(9))
    journal.close()
    again = IngressJournal(path)
    await again.open()
    [line] = path.read_text().splitlines()
    assert json.loads(line)["id"] == "hooks-9"


def test_the_redactor_removes_secrets_urls_and_config_tokens() -> None:
    redact = Redactor(
        {"token": "s3cr3t-value"},
        {"API_TOKEN": "cfg-token-1", "PORT": "8788"},
        {"OTHER_SECRET": "env-secret-2", "HOME": "/root"},
    )
    text = redact(
        "s3cr3t-value at https://me:pw@host/x?token=abc&b=1 cfg-token-1 env-secret-2 8788 "
        "/bot123:ABC-def/getUpdates"
    )
    assert text == (
        "[redacted] at https://[redacted]@host/x?token=[redacted]&b=1 [redacted] [redacted] "
        "8788 /bot[redacted]/getUpdates"
    )
    assert len(redact("x" * 1000)) == MAX_ERROR_CHARS
