"""The daemon's start-up check for conversations whose last Turn never ended, against the
agents' own store: both must agree on every state the store leaves on disk."""

from __future__ import annotations

import os
from pathlib import Path

from agent_process.conversation import EVENTS_COMPACT_BYTES, ConversationStore, MessageEvent
from goondan.state_files.conversation import interrupted_turn
from tools_base import Message


def message(index: int, role: str = "user", content: str = "") -> Message:
    return Message(id=f"m{index}", role=role, content=content or f"text {index}")  # type: ignore[arg-type]


def pending_on_load(directory: Path) -> bool:
    """What the agent finds when it loads the conversation: events not folded yet."""
    store = ConversationStore(directory, fsync=False)
    store.load()
    return store.pending_events > 0


def agree(directory: Path) -> bool:
    found = interrupted_turn(directory)
    assert found == pending_on_load(directory)
    return found


def test_a_finished_turn_leaves_events_but_no_interrupted_turn(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    assert not agree(directory)  # nothing yet
    store.append(message(1, "system"))
    store.append(message(2))
    store.fold()  # the first fold rewrites the base and empties the events
    assert not agree(directory)
    store.append(message(3, "assistant"))
    store.append(message(4))
    store.fold()  # appended as a segment: the events stay on disk
    assert (directory / "events.jsonl").stat().st_size > 0
    assert not agree(directory)


def test_a_turn_cut_short_is_found_before_and_after_the_first_fold(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    store.append(message(1))  # killed before any fold: there is no base
    assert agree(directory)
    store.fold()
    store.append(message(2))
    store.fold()
    store.append(message(3))  # the next Turn, killed mid-way
    assert agree(directory)
    store.fold()
    assert not agree(directory)


def test_a_rewriting_fold_and_a_torn_event_line(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    store.append(message(1))
    store.fold()
    store.append(message(2))
    store.emit(MessageEvent.replace("m1", message(1, content="edited")))
    store.fold()  # not all appends: the base is rewritten
    assert not agree(directory)
    with open(directory / "events.jsonl", "a") as torn:
        torn.write('{"seq": 99, "type": "app')  # a kill mid-write of an event
    assert not agree(directory)  # the agent skips the torn line: nothing to resume


def test_a_fold_cut_short_leaves_the_turn_to_resume(tmp_path: Path) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    store.append(message(1))
    store.fold()
    store.append(message(2))
    store.append(message(3))
    store.fold()  # an appended segment of two messages
    base = directory / "base.jsonl"
    whole = base.read_bytes()
    last_message = whole.rstrip(b"\n").rfind(b"\n") + 1
    os.truncate(base, last_message)  # killed between the segment's two messages
    assert agree(directory)
    os.truncate(base, last_message + 10)  # ... or in the middle of one
    assert agree(directory)


def test_events_past_the_compaction_size_are_emptied_and_read_from_the_end(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    store.append(message(0))
    store.fold()
    big = "x" * 70_000  # lines longer than one block read from the end
    for index in range(1, EVENTS_COMPACT_BYTES // 70_000 + 2):
        store.append(message(index, content=big))
        store.fold()
        assert not agree(directory)
    store.append(message(999, content=big))
    assert agree(directory)
