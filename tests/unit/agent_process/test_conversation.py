"""Event-sourced conversation storage: base.jsonl + events.jsonl."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent_process.conversation import (
    FORMAT_VERSION,
    ConversationStorageError,
    ConversationStore,
    ConversationUnreadable,
    MessageEvent,
    apply_events,
)
from tools_base import Message


def msg(i: int, role: str = "user") -> Message:
    return Message(id=f"m{i}", role=role, content=f"text {i}")  # type: ignore[arg-type]


def test_events_fold_in_order() -> None:
    base = [msg(1), msg(2)]
    events = [
        MessageEvent.append(msg(3)),
        MessageEvent.replace("m1", msg(9)),
        MessageEvent.remove("m2"),
    ]
    assert [m.id for m in apply_events(base, events)] == ["m9", "m3"]
    assert apply_events(base, [MessageEvent.truncate(), MessageEvent.append(msg(4))]) == [msg(4)]


def test_missing_target_is_skipped_with_a_warning() -> None:
    with capture_logs() as logs:
        out = apply_events([msg(1)], [MessageEvent.remove("nope")])
    assert out == [msg(1)]
    assert logs[0]["code"] == "E_MESSAGE_TARGET_NOT_FOUND"


def test_events_are_on_disk_before_the_fold(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.append(msg(2))
    # a process killed now: a fresh store sees both messages from events.jsonl
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m2"]
    store.fold()
    reloaded = ConversationStore(tmp_path)
    assert [m.id for m in reloaded.load()] == ["m1", "m2"]
    assert reloaded.pending_events == 0


def test_torn_last_line_is_skipped_and_later_events_still_parse(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"seq": 2, "type": "append", "mess')  # killed mid-write
    with capture_logs() as logs:
        resumed = ConversationStore(tmp_path)
        assert [m.id for m in resumed.load()] == ["m1"]
    assert any(entry["event"] == "skipping torn line" for entry in logs)
    resumed.append(msg(3))
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m3"]


def test_kill_between_rename_and_truncate_applies_nothing_twice(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.append(msg(2))
    events_before = (tmp_path / "events.jsonl").read_text()
    store.fold()
    # simulate the crash window: the new base is in place but events.jsonl still has its lines
    (tmp_path / "events.jsonl").write_text(events_before)
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m2"]


def test_base_has_a_header_and_one_message_per_line(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.fold()
    store.emit(MessageEvent.replace("m1", msg(2)))
    store.fold()  # a replace rewrites the whole base
    lines = (tmp_path / "base.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"kind": "header", "version": FORMAT_VERSION, "foldedSeq": 2}
    assert [json.loads(line)["id"] for line in lines[1:]] == ["m2"]


def test_the_first_fold_makes_the_base_in_place_as_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No temporary file renamed over it: there is no old base to keep whole.
    def refused(*args: object) -> None:
        raise AssertionError("the first fold renamed a file")

    monkeypatch.setattr("goondan.files.os.replace", refused)
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.append(msg(2))
    store.fold()
    assert base_lines(tmp_path) == [
        {"kind": "header", "version": FORMAT_VERSION, "foldedSeq": 0},
        {"kind": "fold", "foldedSeq": 2, "count": 2},
        msg(1).to_json(),
        msg(2).to_json(),
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["base.jsonl", "events.jsonl"]
    reloaded = ConversationStore(tmp_path)
    assert [m.id for m in reloaded.load()] == ["m1", "m2"]
    assert reloaded.pending_events == 0


def test_a_first_base_cut_short_is_ignored_and_its_events_applied_once(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.append(msg(2))
    store.fold()
    whole = (tmp_path / "base.jsonl").read_bytes()
    # a kill mid-write: the header, the segment's first line and one of its two messages
    (tmp_path / "base.jsonl").write_bytes(b"\n".join(whole.split(b"\n")[:3]) + b"\n")
    with capture_logs() as logs:
        resumed = ConversationStore(tmp_path)
        assert [m.id for m in resumed.load()] == ["m1", "m2"]
    assert any(entry["event"] == "ignoring a fold segment cut short" for entry in logs)
    resumed.append(msg(3))
    resumed.fold()  # rewrites the base whole
    assert [line.get("kind") or line["id"] for line in base_lines(tmp_path)] == [
        "header",
        "m1",
        "m2",
        "m3",
    ]
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m2", "m3"]


def base_lines(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (directory / "base.jsonl").read_text().splitlines()]


def test_a_turn_of_appends_is_folded_by_appending_only_its_messages(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.fold()  # the first fold writes the base
    first = (tmp_path / "base.jsonl").read_bytes()
    store.append(msg(2))
    store.append(msg(3))
    store.fold()
    data = (tmp_path / "base.jsonl").read_bytes()
    assert data.startswith(first)  # the earlier base was not rewritten
    assert [line.get("kind") or line["id"] for line in base_lines(tmp_path)] == [
        "header",
        "fold",
        "m1",
        "fold",
        "m2",
        "m3",
    ]
    assert base_lines(tmp_path)[3] == {"kind": "fold", "foldedSeq": 3, "count": 2}
    # events.jsonl keeps its lines (emptying it costs more than the fold), and the segment's
    # foldedSeq makes a reader skip them
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 3
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m2", "m3"]


def test_events_are_emptied_once_they_pass_the_compaction_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent_process.conversation.EVENTS_COMPACT_BYTES", 500)
    store = ConversationStore(tmp_path)
    store.load()
    sizes = []
    for i in range(1, 8):
        store.append(msg(i))
        store.fold()
        sizes.append((tmp_path / "events.jsonl").stat().st_size)
    assert 0 in sizes[1:]  # emptied on the way
    assert max(sizes) <= 500 + 200  # never much past the limit
    assert [m.id for m in ConversationStore(tmp_path).load()] == [f"m{i}" for i in range(1, 8)]


def test_a_replace_or_remove_rewrites_the_base(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.fold()
    store.append(msg(2))
    store.fold()
    store.emit(MessageEvent.remove("m1"))
    store.fold()
    assert [line.get("kind") or line["id"] for line in base_lines(tmp_path)] == ["header", "m2"]
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m2"]


def test_a_segment_cut_short_is_ignored_and_its_events_applied_once(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    store.fold()
    store.append(msg(2))
    store.append(msg(3))
    # a kill mid-fold: the segment's header and one of its two messages reached the disk
    with open(tmp_path / "base.jsonl", "a") as base:
        base.write(json.dumps({"kind": "fold", "foldedSeq": 3, "count": 2}) + "\n")
        base.write(json.dumps(msg(2).to_json()) + "\n")
    with capture_logs() as logs:
        resumed = ConversationStore(tmp_path)
        assert [m.id for m in resumed.load()] == ["m1", "m2", "m3"]
    assert any(entry["event"] == "ignoring a fold segment cut short" for entry in logs)
    resumed.append(msg(4))
    resumed.fold()  # rewrites the base: the partial segment is gone
    assert [line.get("kind") or line["id"] for line in base_lines(tmp_path)] == [
        "header",
        "m1",
        "m2",
        "m3",
        "m4",
    ]
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1", "m2", "m3", "m4"]


def test_a_version_one_base_is_rewritten_before_a_segment_is_appended(tmp_path: Path) -> None:
    header = {"kind": "header", "version": 1, "foldedSeq": 1}
    (tmp_path / "base.jsonl").write_text(
        json.dumps(header) + "\n" + json.dumps(msg(1).to_json()) + "\n"
    )
    store = ConversationStore(tmp_path)
    assert [m.id for m in store.load()] == ["m1"]
    store.append(msg(2))
    store.fold()
    lines = base_lines(tmp_path)
    assert lines[0]["version"] == FORMAT_VERSION
    assert [line.get("id") for line in lines[1:]] == ["m1", "m2"]


def test_every_stored_line_carries_the_format_version(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.load()
    store.append(msg(1))
    [event] = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert event["v"] == FORMAT_VERSION
    store.fold()
    header = json.loads((tmp_path / "base.jsonl").read_text().splitlines()[0])
    assert header["version"] == FORMAT_VERSION


def test_lines_without_a_version_are_read_as_version_one(tmp_path: Path) -> None:
    line = {"seq": 1, "type": "append", "message": msg(1).to_json()}
    (tmp_path / "events.jsonl").write_text(json.dumps(line) + "\n")
    assert [m.id for m in ConversationStore(tmp_path).load()] == ["m1"]


@pytest.mark.parametrize("file", ["base", "events"])
def test_a_newer_format_is_refused_by_name(tmp_path: Path, file: str) -> None:
    if file == "base":
        (tmp_path / "base.jsonl").write_text(json.dumps({"kind": "header", "version": 99}) + "\n")
    else:
        line = {"v": 99, "seq": 1, "type": "append", "message": msg(1).to_json()}
        (tmp_path / "events.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ConversationUnreadable) as refused:
        ConversationStore(tmp_path).load()
    assert f"{file}.jsonl is in conversation format 99" in str(refused.value)
    assert refused.value.code == "E_CONVERSATION_UNREADABLE"


def test_a_directory_in_place_of_a_file_is_unreadable_by_name(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").mkdir()
    with pytest.raises(ConversationUnreadable, match=r"events\.jsonl"):
        ConversationStore(tmp_path).load()


def test_an_append_makes_the_directory_again_when_it_went_away(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory)
    store.load()
    store.append(msg(1))
    store.fold()  # a Turn ended; before the next one, the directory goes away
    shutil.rmtree(directory)
    store.append(msg(2))
    assert [m.id for m in ConversationStore(directory).load()] == ["m2"]


def test_an_append_that_finds_a_file_in_place_of_the_directory_fails_by_name(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory)
    store.load()
    shutil.rmtree(directory)
    directory.write_text("not a directory")
    with pytest.raises(ConversationStorageError, match=r"events\.jsonl") as refused:
        store.append(msg(1))
    assert refused.value.code == "E_STORAGE"
    assert store.messages == []


def test_a_line_nested_past_the_parsers_depth_is_skipped(tmp_path: Path) -> None:
    good = {"seq": 2, "type": "append", "message": msg(2).to_json()}
    (tmp_path / "events.jsonl").write_text("[" * 100_000 + "\n" + json.dumps(good) + "\n")
    with capture_logs() as logs:
        assert [m.id for m in ConversationStore(tmp_path).load()] == ["m2"]
    assert logs[0]["event"] == "skipping unparsable line"
