"""Conversation state as message event sourcing, durable across SIGKILL.

The files (``base.jsonl`` + ``events.jsonl``), their lines and their durability are the
format's, in :mod:`goondan.state_files.conversation`; this module keeps one instance's
conversation in memory and decides how a Turn's events are folded into the base.

The messages of the conversation are ``base + fold(events)``. At the end of a Turn the events
are folded into the base, and only then is ``events.jsonl`` emptied:

* when every event of the Turn is an append (the usual Turn), its messages are appended to the
  base as one segment, which is fsynced. The segment's first line names how many messages
  follow, so a segment cut short by a kill is recognised and ignored as a whole (its events
  are still in ``events.jsonl``), and the next fold rewrites the base;
* otherwise (a replace, a remove, a truncate, or a base that is not clean) the new base
  replaces the old one atomically (:func:`goondan.files.write_atomic`).

A Turn's fold therefore costs what the Turn added, not the whole conversation. The header's and
each segment's ``foldedSeq`` say which events the base already holds, and events up to it are
skipped on load, so nothing is applied twice. That also lets an appending fold leave
``events.jsonl`` as it is until it passes :data:`EVENTS_COMPACT_BYTES` (emptying a file frees
its blocks, which costs as much as the fold itself on some disks); a rewrite empties it at once.
A torn last line (a kill mid-write) is skipped with a warning.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import structlog

from goondan.errors import DeliveryCode
from goondan.state_files import ConversationStorageError, ConversationUnreadable
from goondan.state_files import conversation as files
from goondan.state_files.conversation import FORMAT_VERSION
from tools_base import Message, MessageEvent, ToolCall

__all__ = [
    "FORMAT_VERSION",
    "ConversationStorageError",
    "ConversationStore",
    "ConversationUnreadable",
    "MessageEvent",
    "apply_events",
]

EVENTS_COMPACT_BYTES = 1 << 20
"""Past this size, ``events.jsonl`` is emptied at the next fold even when the fold appends."""
_log = structlog.get_logger("goondan.conversation")


_message_ids = itertools.count(1)


def new_message_id(prefix: str) -> str:
    """A process-unique, stable message id."""
    return f"{prefix}-{time.time_ns():x}-{next(_message_ids)}"


def apply_events(base: Sequence[Message], events: Iterable[MessageEvent]) -> list[Message]:
    """``NextMessages = Base + fold(Events)``; a missing target is skipped with a warning."""
    messages = list(base)
    for index, event in enumerate(events):
        if event.type == "append":
            assert event.message is not None
            messages.append(event.message)
        elif event.type == "truncate":
            messages.clear()
        else:
            position = next((i for i, m in enumerate(messages) if m.id == event.target_id), None)
            if position is None:
                _log.warning(
                    "message event target not found",
                    code=DeliveryCode.E_MESSAGE_TARGET_NOT_FOUND,
                    event_index=index,
                    target_id=event.target_id,
                )
            elif event.type == "replace":
                assert event.message is not None
                messages[position] = event.message
            else:
                del messages[position]
    return messages


class ConversationStore:
    """The two files of one instance's conversation, and its messages in memory."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = directory
        self.base_path = directory / files.BASE_FILE
        self.events_path = directory / files.EVENTS_FILE
        self._fsync = fsync
        self._base: list[Message] = []
        self._events: list[MessageEvent] = []
        self._folded_seq = 0
        self._next_seq = 1
        self._messages: list[Message] = []
        self._unanswered: set[str] = set()
        """Ids of tool calls in the messages that have no result among them."""
        self._events_bytes = 0
        """Size of ``events.jsonl`` as this store wrote or found it."""
        self._events_fd: int | None = None
        """``events.jsonl``, open from a Turn's first event to its fold (not longer: an agent
        may hold thousands of conversations)."""
        self._base_appendable = False
        """Whether the next fold may append a segment to ``base.jsonl``: it exists, is of
        this version, and ends with a complete line of a complete segment."""
        self._base_missing = False
        """``base.jsonl`` did not exist when it was read: the first fold makes it in place."""

    @property
    def messages(self) -> list[Message]:
        """The current conversation (a copy)."""
        return list(self._messages)

    @property
    def pending_events(self) -> int:
        """Events not yet folded into the base (non-zero after a crash mid-Turn)."""
        return len(self._events)

    def load(self, *, new: bool = False) -> list[Message]:
        """Read ``base + events`` from disk; a torn or malformed line is skipped with a warning.

        ``new``: the instance's directory did not exist a moment ago, so its files are not
        looked for (five lookups that cannot find anything, on every new conversation).

        Raises :class:`ConversationUnreadable` when a file cannot be read at all (a directory
        in its place, no permission, a newer format) and :class:`ConversationStorageError`
        when the directory cannot be created.
        """
        self.close()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConversationStorageError(self.directory, exc) from exc
        if new:
            self._base, self._folded_seq, self._events, self._next_seq = [], 0, [], 1
            self._messages, self._unanswered, self._events_bytes = [], set(), 0
            self._base_appendable, self._base_missing = False, True
            return []
        self._base, self._folded_seq = self._read_base()
        self._events = []
        last_seq = self._folded_seq
        # events up to the base's foldedSeq are skipped: folded before a crash emptied the file
        for data in files.read_events(self.events_path, self._folded_seq, log=_log):
            seq: int = data["seq"]
            try:
                self._events.append(MessageEvent.from_json(data))
            except (ValueError, KeyError) as exc:
                _log.warning(
                    "skipping malformed message event", file=str(self.events_path), error=str(exc)
                )
                continue
            last_seq = max(last_seq, seq)
        self._next_seq = last_seq + 1
        self._messages = apply_events(self._base, self._events)
        self._recount_calls()
        try:
            files.end_with_newline(self.events_path)  # the next event never glues onto a torn line
        except OSError as exc:
            raise ConversationStorageError(self.events_path, exc) from exc
        try:
            self._events_bytes = self.events_path.stat().st_size
        except OSError:
            self._events_bytes = 0
        return self.messages

    def close(self) -> None:
        """Release the open file, if any (the store opens it again when it needs it)."""
        if self._events_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._events_fd)
            self._events_fd = None

    def emit(self, event: MessageEvent) -> None:
        """Apply ``event`` and append it to ``events.jsonl`` before returning.

        Raises :class:`ConversationStorageError` if the line cannot be written whole; the file
        is then cut back to where it was and the event is not applied, so memory and disk
        agree and a later write (once there is room) starts on a clean line.
        """
        data = files.event_bytes(event.to_json(self._next_seq))
        if self._events_fd is None:
            self._events_fd = files.open_for_append(self.events_path)
        files.write_whole(self._events_fd, data, self._events_bytes, self.events_path)
        self._events_bytes += len(data)
        self._next_seq += 1
        self._events.append(event)
        self._apply(event)

    def _apply(self, event: MessageEvent) -> None:
        """Apply ``event`` to the messages in memory (it is on disk already)."""
        if event.type == "append":
            assert event.message is not None
            self._messages.append(event.message)
            self._track_calls(event.message)
        else:
            self._messages = apply_events(self._messages, [event])
            self._recount_calls()

    @property
    def has_unanswered_calls(self) -> bool:
        """Whether an assistant tool call has no tool result yet (after a crash mid-Turn, or
        while a call waits for an approval); kept as messages come, so asking is free."""
        return bool(self._unanswered)

    def unanswered_calls(self) -> list[ToolCall]:
        """The assistant tool calls that have no result yet, in the conversation's order."""
        if not self._unanswered:
            return []
        return [
            call
            for message in self._messages
            for call in message.tool_calls
            if call.id in self._unanswered
        ]

    def _track_calls(self, message: Message) -> None:
        if message.role == "tool":
            self._unanswered.discard(message.source.tool_call_id or "")
        else:
            self._unanswered.update(call.id for call in message.tool_calls)

    def _recount_calls(self) -> None:
        self._unanswered = set()
        for message in self._messages:
            self._track_calls(message)

    def append(self, message: Message) -> None:
        """Shorthand for ``emit(MessageEvent.append(message))``."""
        self.emit(MessageEvent.append(message))

    def sync(self) -> None:
        """Force what was appended to ``events.jsonl`` (and the file's name) to stable storage.

        Appends survive a SIGKILL without it (they are in the kernel's cache); this is for a
        point where the rest of the system relies on them, like a tool call parked for an
        operator's approval. Raises :class:`ConversationStorageError`.
        """
        if self._fsync:
            files.sync_appended(self.events_path)

    def fold(self) -> None:
        """Fold the events into the base (see the module docstring), then empty the events.

        Raises :class:`ConversationStorageError` when the base cannot be written; the old base
        and every event stay as they were (the fold is retried at the next Turn's end) and no
        temporary file or partial segment is left to be read.
        """
        self.close()
        if not self._events and self.base_path.exists():
            return
        folded_seq = self._next_seq - 1
        appends_only = all(e.type == "append" for e in self._events)
        appended = self._base_appendable and appends_only
        if appended:
            self._append_segment(folded_seq)
        elif appends_only and self._base_missing and self._create_base(folded_seq):
            appended = True
        else:
            self._rewrite_base(folded_seq)
        try:
            if not appended or self._events_bytes > EVENTS_COMPACT_BYTES:
                os.truncate(self.events_path, 0)  # the base holds every event to folded_seq
                self._events_bytes = 0
        except FileNotFoundError:
            self._events_bytes = 0
        except OSError as exc:
            # The base holds these events and its foldedSeq marks them, so events left in
            # events.jsonl are skipped on load: nothing is applied twice.
            _log.warning(
                "events not emptied after a fold", file=str(self.events_path), error=str(exc)
            )
        self._base = list(self._messages)
        self._events = []
        self._folded_seq = folded_seq

    def _append_segment(self, folded_seq: int) -> None:
        """Append this Turn's messages to the base as one fsynced segment."""
        added = self._messages[len(self._base) :]
        data = files.segment_bytes(folded_seq, [message.to_json() for message in added])
        try:
            files.append_whole(self.base_path, data, fsync=self._fsync)
        except ConversationStorageError:
            # append_whole cut the file back; should even that have failed, a rewrite is safe
            self._base_appendable = False
            raise

    def _create_base(self, folded_seq: int) -> bool:
        """Write the conversation's first base in place (see
        :func:`goondan.state_files.conversation.create_base`); ``False`` when one exists."""
        messages = [message.to_json() for message in self._messages]
        if not files.create_base(self.base_path, folded_seq, messages, fsync=self._fsync):
            return False
        self._base_missing = False
        self._base_appendable = True
        return True

    def _rewrite_base(self, folded_seq: int) -> None:
        """Write the whole conversation as a new base, atomically (whatever ``fsync`` says:
        a replaced file follows the state directory's one rule)."""
        files.write_base(
            self.base_path, folded_seq, (message.to_json() for message in self._messages)
        )
        self._base_missing = False
        self._base_appendable = True

    def _read_base(self) -> tuple[list[Message], int]:
        """The base's messages and ``foldedSeq``; notes whether a segment may be appended."""
        base = files.read_base(self.base_path, Message.from_json, log=_log)
        self._base_appendable = base.appendable
        self._base_missing = base.missing
        return base.messages, base.folded_seq
