"""The conversation files: what the agent's store writes, the format module reads back, and
the bytes on disk stay those of existing state directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from goondan.state_files import ConversationStorageError, ConversationUnreadable
from goondan.state_files import conversation as files
from tools_base import Message, MessageEvent


def message(index: int, content: str | None = None) -> Message:
    return Message(id=f"m{index}", role="user", content=content or f"text {index}")


def as_is(data: dict[str, Any]) -> dict[str, Any]:
    return data


def test_a_rewritten_base_reads_back_with_its_folded_seq(tmp_path: Path) -> None:
    path = tmp_path / files.BASE_FILE
    messages = [{"id": "a", "role": "user", "content": "héllo"}, {"id": "b", "role": "user"}]
    files.write_base(path, 7, messages)
    base = files.read_base(path, as_is)
    assert (base.messages, base.folded_seq, base.appendable) == (messages, 7, True)
    # the bytes of existing state directories: a spaced header, compact messages, UTF-8
    assert path.read_text(encoding="utf-8").split("\n") == [
        '{"kind": "header", "version": 2, "foldedSeq": 7}',
        '{"id":"a","role":"user","content":"héllo"}',
        '{"id":"b","role":"user"}',
        "",
    ]


def test_an_event_line_is_compact_utf8_json_that_reads_back(tmp_path: Path) -> None:
    record = {"seq": 1, "type": "append", "message": {"content": "héllo ☃", "n": 2**70}}
    line = files.event_bytes(record)
    big = 2**70
    assert (
        line
        == f'{{"v":2,"seq":1,"type":"append","message":{{"content":"héllo ☃","n":{big}}}}}\n'.encode()
    )
    # a float that is no number is stored as null: the line stays JSON any reader takes
    nan = files.event_bytes({"seq": 2, "type": "append", "message": {"x": float("nan")}})
    assert json.loads(nan)["message"] == {"x": None}


@pytest.mark.parametrize(
    ("value", "error"), [(object(), TypeError), ("\ud800", UnicodeEncodeError)]
)
def test_a_value_json_cannot_hold_is_refused_as_json_refuses_it(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        files.event_bytes({"seq": 1, "type": "append", "message": {"x": value}})


def test_appended_segments_count_only_when_whole(tmp_path: Path) -> None:
    path = tmp_path / files.BASE_FILE
    files.write_base(path, 1, [{"id": "a"}])
    files.append_whole(path, files.segment_bytes(3, [{"id": "b"}, {"id": "c"}]))
    base = files.read_base(path, as_is)
    assert ([m["id"] for m in base.messages], base.folded_seq, base.appendable) == (
        ["a", "b", "c"],
        3,
        True,
    )
    # a segment cut short by a kill: ignored as a whole, and the next fold must rewrite
    cut = files.segment_bytes(5, [{"id": "d"}, {"id": "e"}])
    files.append_whole(path, cut[: cut.index(b'{"id":"e"')])
    base = files.read_base(path, as_is)
    assert ([m["id"] for m in base.messages], base.folded_seq, base.appendable) == (
        ["a", "b", "c"],
        3,
        False,
    )


def test_events_past_the_base_are_read_in_order_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / files.EVENTS_FILE
    for seq in (1, 2, 3):
        files.append_whole(path, files.event_bytes({"seq": seq, "type": "truncate"}))
    with open(path, "ab") as torn:
        torn.write(b'{"v": 2, "seq": 4, "type": "app')
    assert [e["seq"] for e in files.read_events(path, 1)] == [2, 3]
    assert json.loads(path.read_bytes().split(b"\n")[0]) == {"v": 2, "seq": 1, "type": "truncate"}
    files.end_with_newline(path)
    files.append_whole(path, files.event_bytes({"seq": 5, "type": "truncate"}))
    assert [e["seq"] for e in files.read_events(path, 0)] == [1, 2, 3, 5]


def test_a_newer_format_is_refused_by_the_writer_and_shown_to_a_reader(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    directory.mkdir()
    header = {"kind": "header", "version": files.FORMAT_VERSION + 1, "foldedSeq": 0}
    (directory / files.BASE_FILE).write_text(json.dumps(header) + '\n{"id":"a","role":"user"}\n')
    with pytest.raises(ConversationUnreadable, match="upgrade goondan"):
        files.read_base(directory / files.BASE_FILE, as_is)
    with pytest.raises(ConversationUnreadable):
        ConversationStore(directory).load()
    assert files.read_messages(directory) == [{"id": "a", "role": "user"}]


def test_what_the_store_writes_the_format_reads(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory)
    store.load()
    for index in range(3):
        store.append(message(index))
    store.fold()  # a rewrite: the first base
    store.append(message(3))
    store.fold()  # an appended segment
    store.emit(MessageEvent.replace("m1", message(1, "edited")))
    store.emit(MessageEvent.remove("m0"))
    store.append(message(4))  # a Turn not folded yet
    expected = [m.to_json() for m in store.messages]
    assert files.read_messages(directory) == expected
    assert files.interrupted_turn(directory)
    store.fold()
    assert files.read_messages(directory) == expected
    assert not files.interrupted_turn(directory)
    assert [m.to_json() for m in ConversationStore(directory).load()] == expected


def test_a_base_that_cannot_be_replaced_raises_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / files.BASE_FILE
    path.mkdir()  # something a file cannot be renamed over
    with pytest.raises(ConversationStorageError, match="cannot write"):
        files.write_base(path, 2, [{"id": "b"}])
    assert path.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [files.BASE_FILE]
