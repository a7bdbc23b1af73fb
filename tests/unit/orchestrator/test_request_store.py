"""The request store keeps every accepted request on disk before it is accepted, finds a key's
request again, lets answers go after their retention, and stays bounded, in records and on
disk; a line a crash cut short is skipped, and a state directory of one file per request is
moved into the journal."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest

from orchestrator.requests.store import (
    RequestRecord,
    RequestStore,
    StoreFull,
    digest,
    is_request_id,
    new_request_id,
    retention_from_env,
)


def record(**fields: object) -> RequestRecord:
    defaults: dict[str, object] = {
        "request_id": new_request_id(),
        "kind": "request",
        "agent": "alpha",
        "instance_key": "default",
        "input": "hi",
        "accepted_at": time.time(),
    }
    return RequestRecord(**{**defaults, **fields})  # type: ignore[arg-type]


def keep(store: RequestStore, kept: RequestRecord) -> None:
    store.reserve(kept)
    store.persist(kept)


def journal(directory: Path) -> list[Path]:
    return sorted(directory.glob("journal-*.jsonl"))


def test_a_record_is_on_disk_whole_and_found_by_a_new_store(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests")
    first = record(key_digest=digest("k"), body_digest="b")
    keep(store, first)
    [path] = journal(tmp_path / "requests")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "requests").stat().st_mode & 0o777) == "0o700"
    assert path.read_bytes().count(first.request_id.encode()) == 1
    again = RequestStore(tmp_path / "requests")
    assert [r.request_id for r in again.load()] == [first.request_id]  # still running
    assert again.by_key(digest("k")) == first.request_id
    done = again.finished(first, {"status": "ok", "output": "x"})
    again.persist(done)
    again.reserve(done)
    third = RequestStore(tmp_path / "requests")
    assert third.load() == []  # nothing left to run
    kept = third.get(first.request_id)
    assert kept is not None
    assert kept.state == "done"
    assert kept.answer == done.answer


def test_ids_are_unguessable_and_only_ids_reach_the_disk(tmp_path: Path) -> None:
    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_request_id(i) for i in ids)
    store = RequestStore(tmp_path / "requests")
    (tmp_path / "secret.json").write_text("{}")
    for hostile in ("../secret", "req_../../secret", "req_" + "0" * 31, "REQ_" + "a" * 32, ""):
        assert store.get(hostile) is None


def test_answers_past_their_retention_are_let_go(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests", retention=60)
    old = store.finished(record(key_digest=digest("old")), {"status": "ok"})
    old.finished_at = time.time() - 61
    keep(store, old)
    fresh = store.finished(record(), {"status": "ok"})
    keep(store, fresh)
    assert store.get(old.request_id) is None  # expired: as if unknown
    assert store.by_key(digest("old")) is None
    assert store.prune(force=True) == 1
    assert store.get(fresh.request_id) is not None
    again = RequestStore(tmp_path / "requests", retention=60)
    assert again.load() == []
    assert again.get(old.request_id) is None
    assert again.get(fresh.request_id) is not None


def test_a_flood_of_requests_keeps_the_store_bounded(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests", capacity=5)
    for n in range(20):  # each done: the oldest make room
        keep(store, store.finished(record(key_digest=digest(f"k{n}")), {"status": "ok"}))
    assert len(store) == 5
    assert store.by_key(digest("k0")) is None
    assert store.by_key(digest("k19")) is not None
    running = RequestStore(tmp_path / "other", capacity=3)
    for _ in range(3):
        keep(running, record())
    with pytest.raises(StoreFull):  # none of them may be dropped: they still run
        running.reserve(record())


def test_a_restart_keeps_the_capacity_and_the_newest_answers(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests", capacity=5)
    for n in range(20):
        keep(store, store.finished(record(key_digest=digest(f"k{n}")), {"status": "ok"}))
    store.close()
    again = RequestStore(tmp_path / "requests", capacity=5)
    assert again.load() == []
    assert len(again) == 5
    assert again.by_key(digest("k14")) is None
    assert again.by_key(digest("k19")) is not None


def test_the_journal_on_disk_stays_near_what_is_live(tmp_path: Path) -> None:
    directory = tmp_path / "requests"
    store = RequestStore(directory, capacity=50, segment_bytes=4096)
    long_running = record(input="runs for hours")
    keep(store, long_running)  # its line would pin the first segment but for compaction
    for n in range(400):
        started = record(key_digest=digest(f"k{n}"), input="x" * 100)
        keep(store, started)
        keep(store, store.finished(started, {"status": "ok", "output": "y" * 100}))
    live = 50 * 600  # 49 done records and the long one (the capacity), each line under 600 bytes
    on_disk = sum(path.stat().st_size for path in journal(directory))
    assert on_disk <= 4 * live + 2 * 4096
    assert journal(directory)[0].name != "journal-00000001.jsonl"  # compacted away
    store.close()
    again = RequestStore(directory, capacity=50)
    assert [r.request_id for r in again.load()] == [long_running.request_id]
    assert len(again) == len(store) == 50


def test_a_line_cut_short_by_a_crash_is_skipped_not_fatal(tmp_path: Path) -> None:
    directory = tmp_path / "requests"
    store = RequestStore(directory)
    whole = record()
    keep(store, whole)
    [segment] = journal(directory)
    with open(segment, "ab") as out:
        out.write(b'{"v":1,"requestId":"req_')  # the daemon died mid-append
    again = RequestStore(directory)
    assert [r.request_id for r in again.load()] == [whole.request_id]
    later = record()
    keep(again, later)  # appended to a new segment, never after the torn tail
    assert journal(directory)[-1] != segment
    third = RequestStore(directory)
    assert {r.request_id for r in third.load()} == {whole.request_id, later.request_id}


def test_lines_that_are_not_records_are_skipped(tmp_path: Path) -> None:
    directory = tmp_path / "requests"
    directory.mkdir()
    good = record()
    (directory / "journal-00000001.jsonl").write_bytes(
        b"not json\n"
        + b'{"v":1,"requestId":"../../secret","kind":"request","agent":"a",'
        + b'"instanceKey":"k","input":"x"}\n'
        + msgspec.json.encode(good)
        + b"\n"
    )
    store = RequestStore(directory)
    assert [r.request_id for r in store.load()] == [good.request_id]


def test_a_directory_of_one_file_per_request_moves_into_the_journal(tmp_path: Path) -> None:
    directory = tmp_path / "requests"
    directory.mkdir()
    running, done = record(), record(key_digest=digest("kept"))
    answered = RequestStore.finished(done, {"status": "ok", "output": "x"})
    for old in (running, answered):
        (directory / f"{old.request_id}.json").write_bytes(msgspec.json.encode(old))
    torn = directory / f"{new_request_id()}.json"
    torn.write_bytes(b'{"v":1,"requestId"')
    half_written = directory / f".{torn.name}.abc.tmp"
    half_written.write_bytes(b"{")
    store = RequestStore(directory)
    assert [r.request_id for r in store.load()] == [running.request_id]
    assert not half_written.exists()
    assert not torn.exists()
    assert torn.with_suffix(".bad").exists()
    assert not list(directory.glob("req_*.json"))  # moved into the journal
    assert store.by_key(digest("kept")) == done.request_id
    again = RequestStore(directory)
    assert [r.request_id for r in again.load()] == [running.request_id]
    kept = again.get(done.request_id)
    assert kept is not None
    assert kept.answer == {"status": "ok", "output": "x"}


def test_the_retention_comes_from_the_environment_when_valid() -> None:
    assert retention_from_env({"GOONDAN_REQUEST_RETENTION_SECONDS": "90"}) == 90
    for bad in ("", "nope", "-1", "0", "nan"):
        assert retention_from_env({"GOONDAN_REQUEST_RETENTION_SECONDS": bad}) == 24 * 3600
