"""Conversations and records in JetStream: the guarantees of the local files, on a real
``nats-server -js``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent_process.conversation import ConversationStorageError, MessageEvent
from agent_process.jetstream_store import (
    INLINE_VALUE_BYTES,
    SNAPSHOT_AFTER_EVENTS,
    ClusterStorageError,
    JetStreamConversation,
    JetStreamStorage,
)
from bundle.plan import ClusterStoragePlan
from tests.support.cluster import NatsServer, nats_server_binary
from tools_base import Message

ROOT = Path(__file__).resolve().parents[3]
Opener = Callable[[str], JetStreamStorage]


def msg(i: int, text: str | None = None) -> Message:
    return Message(id=f"m{i}", role="user", content=text or f"text {i}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    nats = NatsServer(tmp_path / "nats")
    try:
        yield nats
    finally:
        nats.stop()


@pytest.fixture
def open_storage(server: NatsServer, tmp_path: Path) -> Iterator[Opener]:
    """``open_storage(host)``: the agent ``keeper``'s storage as a process on ``host`` would
    open it (its own connection, its own instances directory)."""
    opened: list[JetStreamStorage] = []

    def open_on(host: str = "a") -> JetStreamStorage:
        plan = ClusterStoragePlan(url=server.url, cluster="test")
        storage = JetStreamStorage.open(plan, "keeper", tmp_path / host / "instances")
        opened.append(storage)
        return storage

    yield open_on
    for storage in opened:
        storage.close()


def conversation(storage: JetStreamStorage, instance: str = "default") -> JetStreamConversation:
    store = storage.conversation(storage.instances_root / instance)
    assert isinstance(store, JetStreamConversation)
    store.load()
    return store


def test_another_host_reads_base_and_unfolded_events(open_storage: Opener) -> None:
    first = conversation(open_storage("a"))
    first.append(msg(1))
    first.append(msg(2))
    first.fold()
    first.append(msg(3))  # a Turn cut short: never folded

    elsewhere = conversation(open_storage("b"))
    assert [m.id for m in elsewhere.messages] == ["m1", "m2", "m3"]
    assert elsewhere.pending_events == 1
    elsewhere.fold()
    elsewhere.emit(MessageEvent.replace("m1", msg(9)))
    elsewhere.fold()
    assert [m.id for m in conversation(open_storage("c")).messages] == ["m9", "m2", "m3"]


def test_two_writers_cannot_both_fold(open_storage: Opener) -> None:
    owner = conversation(open_storage("a"))
    owner.append(msg(1))
    stale = conversation(open_storage("b"))  # loaded before the owner's fold
    owner.fold()
    stale.append(msg(2))  # its expected last event is still the last: the append lands
    with pytest.raises(ClusterStorageError, match="replaced by another writer") as refused:
        stale.fold()
    assert refused.value.code == "E_STORAGE"
    with capture_logs() as logs:
        reader = conversation(open_storage("c"))
    assert [m.id for m in reader.messages] == ["m1"]  # the loser's event is not applied
    assert any("lost the conversation" in e["event"] for e in logs)
    reader.append(msg(3))
    reader.fold()  # past the skipped event: it never joins the folded part
    assert [m.id for m in conversation(open_storage("d")).messages] == ["m1", "m3"]


def test_an_append_after_another_writers_is_refused(open_storage: Opener) -> None:
    one = conversation(open_storage("a"))
    two = conversation(open_storage("b"))
    one.append(msg(1))
    with pytest.raises(ConversationStorageError, match="another writer appended"):
        two.append(msg(2))
    assert [m.id for m in two.messages] == []  # not applied in memory either
    assert [m.id for m in conversation(open_storage("c")).messages] == ["m1"]


def test_a_retried_append_is_stored_once(open_storage: Opener) -> None:
    storage = open_storage("a")
    store = conversation(storage)
    store.append(msg(1))
    payload = json.dumps(
        {"v": 2, **MessageEvent.append(msg(2)).to_json(2), "head": store._revision}
    ).encode()
    # The acknowledgement of the first attempt was lost: the writer publishes again.
    first = storage.run(lambda: store._publish(payload, "retry:2"), "test")
    second = storage.run(lambda: store._publish(payload, "retry:2"), "test")
    assert first == second
    assert [m.id for m in conversation(open_storage("b")).messages] == ["m1", "m2"]


def test_a_large_base_goes_to_the_object_store(open_storage: Opener) -> None:
    store = conversation(open_storage("a"))
    big = "x" * (INLINE_VALUE_BYTES + 1000)
    store.append(msg(1, big))
    store.fold()
    store.append(msg(2))
    store.fold()
    assert [len(m.content) for m in conversation(open_storage("b")).messages] == [len(big), 6]


def test_values_past_the_servers_max_payload_are_stored_whole(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "small", config="max_payload: 65536\n")
    plan = ClusterStoragePlan(url=server.url, cluster="test")
    opened = [
        JetStreamStorage.open(plan, "keeper", tmp_path / host / "instances") for host in "abc"
    ]
    try:
        here, there, third = opened
        big = "y" * 200_000  # three messages' worth
        store = conversation(here)
        store.append(msg(1, big))  # an event larger than a message
        assert [m.content for m in conversation(there).messages] == [big]
        store.fold()  # a base larger than a message
        store.append(msg(2, big))
        assert [m.id for m in conversation(third).messages] == ["m1", "m2"]

        record = here.instances_root / "k1" / "approvals" / "apr_big.json"
        record.parent.mkdir(parents=True)
        text = json.dumps({"arguments": {"content": big}})
        record.write_text(text)
        here.written(record, text.encode())
        there.restore(there.instances_root)
        assert (there.instances_root / "k1" / "approvals" / "apr_big.json").read_text() == text
    finally:
        for storage in opened:
            storage.close()
        server.stop()


def test_appending_folds_then_a_snapshot_each_read_once(open_storage: Opener) -> None:
    count = SNAPSHOT_AFTER_EVENTS + 40  # segments, a new snapshot (and a purge), segments
    store = conversation(open_storage("a"))
    for i in range(1, count):
        store.append(msg(i))
        store.fold()
        if i in (10, count - 1):  # mid-segments, and after the snapshot
            again = conversation(open_storage(f"b{i}"))
            assert [m.id for m in again.messages] == [f"m{n}" for n in range(1, i + 1)]
            assert again.pending_events == 0
    store.append(msg(count))
    again = conversation(open_storage("c"))
    assert [m.id for m in again.messages] == [f"m{i}" for i in range(1, count + 1)]
    assert again.pending_events == 1


def test_records_come_back_on_another_host(open_storage: Opener, tmp_path: Path) -> None:
    here = open_storage("a")
    metadata = tmp_path / "a" / "instances" / "k1" / "metadata.json"
    approval = tmp_path / "a" / "instances" / "k1" / "approvals" / "apr_1.json"
    for path, text in ((metadata, '{"instanceKey": "k1"}'), (approval, '{"approvalId": "a"}')):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        here.written(path, text.encode())
    gone = tmp_path / "a" / "instances" / "k1" / "pending.json"
    here.written(gone, b"{}")
    here.removed(gone)
    stale = tmp_path / "b" / "instances" / "old" / "metadata.json"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"instanceKey": "old"}')

    there = open_storage("b")
    there.restore(tmp_path / "b" / "instances")
    root = tmp_path / "b" / "instances"
    assert (root / "k1" / "metadata.json").read_text() == '{"instanceKey": "k1"}'
    assert (root / "k1" / "approvals" / "apr_1.json").read_text() == '{"approvalId": "a"}'
    assert not (root / "k1" / "pending.json").exists()
    assert not stale.exists()  # an earlier stay's record, which the cluster no longer has


def test_a_deleted_instance_starts_afresh(open_storage: Opener) -> None:
    storage = open_storage("a")
    store = conversation(storage)
    store.append(msg(1))
    store.fold()
    store.append(msg(2))
    storage.instance_removed(storage.instances_root / "default")
    fresh = conversation(open_storage("b"))
    assert fresh.messages == []
    fresh.append(msg(3))  # seq 1 again: not taken for a duplicate of the old seq 1
    assert [m.id for m in conversation(open_storage("c")).messages] == ["m3"]


def test_an_unreachable_server_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    from tests.support.cluster import free_port

    plan = ClusterStoragePlan(url=f"nats://bob:s3cret@127.0.0.1:{free_port()}", cluster="t")
    with pytest.raises(ClusterStorageError) as refused:
        JetStreamStorage.open(plan, "keeper", tmp_path)
    assert "s3cret" not in str(refused.value)
    assert "bob:***@127.0.0.1" in str(refused.value)
    assert "no connection within" in str(refused.value)
    assert "s3cret" not in repr(plan)


@pytest.mark.timeout(170)
def test_the_benchmark_quick_run_prints_every_figure() -> None:
    nats_server_binary()  # skips, loudly, without one
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "conversation_store.py"), "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for kind in ("plain", "tool"):
        assert isinstance(figures[f"{kind}_ratio"], float)
        for label in ("local", "jetstream"):
            row = figures[f"{kind}_{label}"]
            for key in ("median_us", "p90_us", "early_median_us", "late_median_us", "load_us"):
                assert isinstance(row[key], float), (kind, label, key)
            assert row["messages"] == 60 * (2 if kind == "plain" else 4)
