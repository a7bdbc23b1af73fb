"""SIGKILL at every point of a conversation fold: the next load has every message exactly once.

Each case runs a real child process that writes a conversation and folds it, with one step of
the fold replaced by ``os.kill(os.getpid(), SIGKILL)``; the parent then loads what is on disk.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_process.conversation import ConversationStore
from tools_base import Message, MessageEvent

pytestmark = pytest.mark.timeout(60)

PRELUDE = textwrap.dedent(
    """
    import builtins, os, signal, sys
    import agent_process.conversation as conversation
    import goondan.files as files
    from agent_process.conversation import ConversationStore
    from tools_base import Message, MessageEvent

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    directory, point = sys.argv[1], sys.argv[2]
    store = ConversationStore(conversation.Path(directory))
    store.load()
    for i in range(3):                      # an earlier Turn, folded
        store.append(Message(id=f"old{i}", role="user", content=f"old {i}"))
    store.fold()
    """
)
"""The start of each child: an earlier Turn, folded; ``die`` is the kill."""

CHILD = PRELUDE + textwrap.dedent(
    """
    for i in range(4):                      # this Turn's events
        store.append(Message(id=f"new{i}", role="user", content=f"new {i}"))
    store.emit(MessageEvent.replace("old1", Message(id="old1", role="user", content="old 1 v2")))
    store.emit(MessageEvent.remove("old2"))

    if point == "torn-event":
        with open(store.events_path, "a") as events:
            events.write('{"seq": 99, "type": "append", "message": {"id": "ha')
        die()
    if point == "mid-write":
        real_fdopen = os.fdopen
        def opening(fd, *args, **kwargs):
            file = real_fdopen(fd, *args, **kwargs)
            real_write = file.write
            def write(data):
                real_write(data[: len(data) // 2])
                file.flush()
                die()
            file.write = write
            return file
        os.fdopen = opening
    elif point == "before-rename":
        os.replace = die
    elif point == "after-rename":
        files.sync_directory = die
    store.fold()
    die()                                   # "after-fold": killed right after a complete fold
    """
)

EXPECTED = [("old0", "old 0"), ("old1", "old 1 v2"), *((f"new{i}", f"new {i}") for i in range(4))]
POINTS = ["torn-event", "mid-write", "before-rename", "after-rename", "after-fold"]


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_during_the_fold_loses_and_repeats_nothing(tmp_path: Path, point: str) -> None:
    directory = tmp_path / "conversation"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory), point],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    # the kill happened where it was meant to
    tmp_left = any(directory.glob(".base.jsonl.*.tmp"))
    events_left = (directory / "events.jsonl").stat().st_size > 0
    assert tmp_left == (point in ("mid-write", "before-rename"))
    assert events_left == (point != "after-fold")
    store = ConversationStore(directory)
    messages = store.load()
    assert [(m.id, m.content) for m in messages] == EXPECTED
    # the store goes on working from there: one more Turn, folded, read back by a new reader
    store.append(Message(id="after", role="user", content="after the crash"))
    store.emit(MessageEvent.remove("old0"))
    store.fold()
    again = ConversationStore(directory).load()
    assert [m.id for m in again] == [*(i for i, _ in EXPECTED[1:]), "after"]


APPEND_CHILD = PRELUDE + textwrap.dedent(
    """
    for i in range(4):                      # this Turn appends only: its fold appends a segment
        store.append(Message(id=f"new{i}", role="user", content=f"new {i}"))

    if point == "mid-segment":
        real_write = conversation.os.write
        def write(fd, data):
            if os.fstat(fd).st_size and b'"kind": "fold"' in bytes(data):
                real_write(fd, bytes(data)[: len(data) // 2])
                die()
            return real_write(fd, data)
        conversation.os.write = write
    elif point == "before-fsync":
        conversation.os.fsync = die
    elif point == "before-truncate":
        conversation.os.truncate = die
    store.fold()
    die()                                   # "after-fold"
    """
)
APPEND_EXPECTED = [*((f"old{i}", f"old {i}") for i in range(3)), *EXPECTED[2:]]


@pytest.mark.parametrize("point", ["mid-segment", "before-fsync", "before-truncate", "after-fold"])
def test_a_kill_during_an_appending_fold_loses_and_repeats_nothing(
    tmp_path: Path, point: str
) -> None:
    directory = tmp_path / "conversation"
    done = subprocess.run(
        [sys.executable, "-c", APPEND_CHILD, str(directory), point],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    # the kill happened where it was meant to: header, the first segment of 3 old messages,
    # then this one
    base = (directory / "base.jsonl").read_text()
    segment_whole = base.endswith("\n") and len(base.splitlines()) == 1 + 1 + 3 + 1 + 4
    assert segment_whole == (point != "mid-segment")
    store = ConversationStore(directory)
    assert [(m.id, m.content) for m in store.load()] == APPEND_EXPECTED
    store.append(Message(id="after", role="user", content="after the crash"))
    store.fold()
    again = ConversationStore(directory).load()
    assert [m.id for m in again] == [*(i for i, _ in APPEND_EXPECTED), "after"]


FIRST_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import agent_process.conversation as conversation
    from agent_process.conversation import ConversationStore
    from tools_base import Message

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    directory, point = sys.argv[1], sys.argv[2]
    store = ConversationStore(conversation.Path(directory))
    store.load()
    for i in range(3):                      # a new conversation's first Turn
        store.append(Message(id=f"new{i}", role="user", content=f"new {i}"))
    if point == "mid-create":
        real_fdopen = os.fdopen
        def opening(fd, *args, **kwargs):
            file = real_fdopen(fd, *args, **kwargs)
            real_write = file.write
            def write(data):
                real_write(data[: len(data) * 2 // 3])
                file.flush()
                die()
            file.write = write
            return file
        os.fdopen = opening
    elif point == "before-fsync":
        os.fsync = die
    store.fold()
    die()                                   # "after-fold"
    """
)
FIRST_EXPECTED = [(f"new{i}", f"new {i}") for i in range(3)]


@pytest.mark.parametrize("point", ["mid-create", "before-fsync", "after-fold"])
def test_a_kill_during_a_first_fold_loses_and_repeats_nothing(tmp_path: Path, point: str) -> None:
    directory = tmp_path / "conversation"
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CHILD, str(directory), point],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    # the kill happened where it was meant to: the base made in place, whole or cut short
    base = (directory / "base.jsonl").read_text()
    assert (len(base.splitlines()) == 1 + 1 + 3) == (point != "mid-create")
    assert not any(directory.glob(".base.jsonl.*"))
    store = ConversationStore(directory)
    assert [(m.id, m.content) for m in store.load()] == FIRST_EXPECTED
    assert store.pending_events == (3 if point == "mid-create" else 0)
    store.append(Message(id="after", role="user", content="after the crash"))
    store.fold()
    again = ConversationStore(directory).load()
    assert [m.id for m in again] == [*(i for i, _ in FIRST_EXPECTED), "after"]
