"""The request store keeps every accepted request on disk before it is accepted, finds a key's
request again, lets answers go after their retention, and stays bounded."""

from __future__ import annotations

import os
import time
from pathlib import Path

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


def test_a_record_is_on_disk_whole_and_found_by_a_new_store(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests")
    first = record(key_digest=digest("k"), body_digest="b")
    keep(store, first)
    path = tmp_path / "requests" / f"{first.request_id}.json"
    assert path.is_file()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
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
    assert not (tmp_path / "requests" / f"{old.request_id}.json").exists()
    assert store.get(fresh.request_id) is not None


def test_a_flood_of_requests_keeps_the_store_bounded(tmp_path: Path) -> None:
    store = RequestStore(tmp_path / "requests", capacity=5)
    for n in range(20):  # each done: the oldest make room
        keep(store, store.finished(record(key_digest=digest(f"k{n}")), {"status": "ok"}))
    assert len(store) == 5
    assert len(os.listdir(tmp_path / "requests")) == 5
    assert store.by_key(digest("k0")) is None
    assert store.by_key(digest("k19")) is not None
    running = RequestStore(tmp_path / "other", capacity=3)
    for _ in range(3):
        keep(running, record())
    with pytest.raises(StoreFull):  # none of them may be dropped: they still run
        running.reserve(record())


def test_an_unreadable_record_is_set_aside_not_fatal(tmp_path: Path) -> None:
    directory = tmp_path / "requests"
    directory.mkdir()
    torn = directory / f"{new_request_id()}.json"
    torn.write_bytes(b'{"v":1,"requestId"')
    half_written = directory / f".{torn.name}.abc.tmp"
    half_written.write_bytes(b"{")
    store = RequestStore(directory)
    assert store.load() == []
    assert not half_written.exists()
    assert not torn.exists()
    assert torn.with_suffix(".bad").exists()


def test_the_retention_comes_from_the_environment_when_valid() -> None:
    assert retention_from_env({"GOONDAN_REQUEST_RETENTION_SECONDS": "90"}) == 90
    for bad in ("", "nope", "-1", "0", "nan"):
        assert retention_from_env({"GOONDAN_REQUEST_RETENTION_SECONDS": bad}) == 24 * 3600
