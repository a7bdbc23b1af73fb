"""Conversation state as message event sourcing, durable across SIGKILL.

On disk, per instance::

    base.jsonl     line 1: {"kind": "header", "version": 2, "foldedSeq": N}
                   then one message per line (the folded conversation), then any number of
                   appended segments: {"kind": "fold", "foldedSeq": M, "count": k} and k messages
    events.jsonl   one message event per line, appended as it happens during a Turn:
                   {"seq": n, "type": "append", "message": {...}}
                   {"seq": n, "type": "replace", "targetId": "...", "message": {...}}
                   {"seq": n, "type": "remove", "targetId": "..."}
                   {"seq": n, "type": "truncate"}

The messages of the conversation are ``base + fold(events)``. At the end of a Turn the events
are folded into the base, and only then is ``events.jsonl`` emptied:

* when every event of the Turn is an append (the usual Turn), its messages are appended to the
  base as one segment, which is fsynced. The segment's first line names how many messages
  follow, so a segment cut short by a kill is recognised and ignored as a whole (its events
  are still in ``events.jsonl``), and the next fold rewrites the base;
* otherwise (a replace, a remove, a truncate, or a base that is not clean) the new base is
  written to a temporary file, fsynced and renamed over the old one (atomic).

A Turn's fold therefore costs what the Turn added, not the whole conversation. The header's and
each segment's ``foldedSeq`` say which events the base already holds, and events up to it are
skipped on load, so nothing is applied twice. That also lets an appending fold leave
``events.jsonl`` as it is until it passes :data:`EVENTS_COMPACT_BYTES` (emptying a file frees
its blocks, which costs as much as the fold itself on some disks); a rewrite empties it at once.
A torn last line (a kill mid-write) is skipped with a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import structlog

from goondan.errors import StorageError, newer_format
from tools_base import JsonObject, Message, MessageEvent

__all__ = [
    "ConversationStorageError",
    "ConversationStore",
    "ConversationUnreadable",
    "MessageEvent",
    "apply_events",
]

EVENTS_COMPACT_BYTES = 1 << 20
"""Past this size, ``events.jsonl`` is emptied at the next fold even when the fold appends."""
FORMAT_VERSION = 2
"""Version of the stored lines: the base header's ``version`` and each event's ``v``. Lines
without one are from version 1; a newer version than this runtime knows is refused. Version 2
added appended fold segments to the base; a version 1 base is read as before and rewritten at
its next fold before any segment is appended to it."""


class ConversationStorageError(StorageError):
    """Writing the conversation failed (disk full, read-only, ...); nothing on disk is torn.

    The message names the file and the OS error; ``code`` is ``E_STORAGE``.
    """

    code = "E_STORAGE"

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write {path}: {error.strerror or error}")
        self.path = path
        self.errno = error.errno


class ConversationUnreadable(StorageError):
    """The conversation's files cannot be read or are of an unknown newer format."""

    code = "E_CONVERSATION_UNREADABLE"


_log = structlog.get_logger("goondan.conversation")


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
                    code="E_MESSAGE_TARGET_NOT_FOUND",
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
        self.base_path = directory / "base.jsonl"
        self.events_path = directory / "events.jsonl"
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

    @property
    def messages(self) -> list[Message]:
        """The current conversation (a copy)."""
        return list(self._messages)

    @property
    def pending_events(self) -> int:
        """Events not yet folded into the base (non-zero after a crash mid-Turn)."""
        return len(self._events)

    def load(self) -> list[Message]:
        """Read ``base + events`` from disk; a torn or malformed line is skipped with a warning.

        Raises :class:`ConversationUnreadable` when a file cannot be read at all (a directory
        in its place, no permission, a newer format) and :class:`ConversationStorageError`
        when the directory cannot be created.
        """
        self.close()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConversationStorageError(self.directory, exc) from exc
        self._base, self._folded_seq = self._read_base()
        self._events = []
        last_seq = self._folded_seq
        for data in self._read_lines(self.events_path):
            _check_version(data.get("v", 1), self.events_path)
            seq = data.get("seq")
            if not isinstance(seq, int) or seq <= self._folded_seq:
                continue  # already folded into the base before a crash emptied events.jsonl
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
            _end_with_newline(self.events_path)  # the next event never glues onto a torn line
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
        record = {"v": FORMAT_VERSION, **event.to_json(self._next_seq)}
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        data = line.encode("utf-8")
        if self._events_fd is None:
            self._events_fd = _open_for_append(self.events_path)
        _write_whole(self._events_fd, data, self._events_bytes, self.events_path)
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
        if not self._fsync or not self.events_path.exists():
            return
        try:
            fd = os.open(self.events_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_directory(self.directory)
        except OSError as exc:
            raise ConversationStorageError(self.events_path, exc) from exc

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
        appended = self._base_appendable and all(e.type == "append" for e in self._events)
        if appended:
            self._append_segment(folded_seq)
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
        lines = [json.dumps({"kind": "fold", "foldedSeq": folded_seq, "count": len(added)})]
        lines.extend(_message_line(message) for message in added)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        try:
            _append_whole(self.base_path, data, fsync=self._fsync)
        except ConversationStorageError:
            # _append_whole cut the file back; should even that have failed, a rewrite is safe
            self._base_appendable = False
            raise

    def _rewrite_base(self, folded_seq: int) -> None:
        """Write the whole conversation as a new base: temporary file, fsync, rename."""
        tmp = self.base_path.with_suffix(".jsonl.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as out:
                header = {"kind": "header", "version": FORMAT_VERSION, "foldedSeq": folded_seq}
                out.write(json.dumps(header) + "\n")
                for message in self._messages:
                    out.write(_message_line(message) + "\n")
                out.flush()
                if self._fsync:
                    os.fsync(out.fileno())
            os.replace(tmp, self.base_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            failed = Path(exc.filename) if isinstance(exc.filename, str) else tmp
            raise ConversationStorageError(failed, exc) from exc
        self._base_appendable = True
        try:
            if self._fsync:
                _fsync_directory(self.directory)
        except OSError as exc:
            _log.warning("directory not synced", file=str(self.directory), error=str(exc))

    def _read_base(self) -> tuple[list[Message], int]:
        """The base's messages and ``foldedSeq``; notes whether a segment may be appended."""
        messages: list[Message] = []
        folded_seq = 0
        version = 0
        segment: list[Message] | None = None
        """Messages of the segment being read, while fewer than its ``count``."""
        expected, segment_seq = 0, 0
        complete = True
        for data in self._read_lines(self.base_path):
            kind = data.get("kind")
            if kind in ("header", "fold") and segment is not None:
                complete = False  # a segment cut short: ignored, its events are still there
                segment = None
            if kind == "header":
                version = data.get("version", 1)  # type: ignore[assignment]
                _check_version(version, self.base_path)
                seq = data.get("foldedSeq")
                folded_seq = seq if isinstance(seq, int) else 0
                continue
            if kind == "fold":
                count, seq = data.get("count"), data.get("foldedSeq")
                if not isinstance(count, int) or not isinstance(seq, int) or count < 0:
                    _log.warning("skipping malformed fold segment", file=str(self.base_path))
                    complete = False
                    continue
                segment, expected, segment_seq = [], count, seq
            else:
                try:
                    message = Message.from_json(data)
                except (ValueError, KeyError) as exc:
                    _log.warning(
                        "skipping malformed message", file=str(self.base_path), error=str(exc)
                    )
                    complete = False
                    continue
                if segment is None:
                    messages.append(message)
                    continue
                segment.append(message)
            if segment is not None and len(segment) == expected:
                messages.extend(segment)
                folded_seq = max(folded_seq, segment_seq)
                segment = None
        if segment is not None:
            _log.warning(
                "ignoring a fold segment cut short", file=str(self.base_path), found=len(segment)
            )
            complete = False
        self._base_appendable = (
            complete and version == FORMAT_VERSION and _ends_with_newline(self.base_path)
        )
        return messages, folded_seq

    @staticmethod
    def _read_lines(path: Path) -> Iterable[JsonObject]:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        except OSError as exc:  # a directory in its place, no permission, an I/O error
            raise ConversationUnreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
        lines = text.split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
                torn = number == len(lines)  # no trailing newline: the write was cut short
                _log.warning(
                    "skipping torn line" if torn else "skipping unparsable line",
                    file=str(path),
                    line=number,
                )
                continue
            if isinstance(data, dict):
                yield data


def _check_version(version: object, path: Path) -> None:
    refusal = newer_format(path, "conversation", version, FORMAT_VERSION)
    if refusal is not None:
        raise ConversationUnreadable(refusal)


def _message_line(message: Message) -> str:
    return json.dumps(message.to_json(), ensure_ascii=False, separators=(",", ":"))


def _open_for_append(path: Path) -> int:
    """``path`` opened for appending (created, with its directory, if missing)."""
    try:
        try:
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except FileNotFoundError:
            # Only now the directory is (re)made: a mkdir before every append costs a tenth
            # of a Turn's CPU, and the directory is nearly always there.
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc


def _write_whole(fd: int, data: bytes, size: int, path: Path, *, fsync: bool = False) -> None:
    """Append ``data`` in full to ``fd`` (whose file is ``size`` bytes long) and, with
    ``fsync``, force it to disk; or cut the file back to ``size`` and raise."""
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, data[written:])
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)  # no torn line for the next write to glue onto
        raise ConversationStorageError(path, exc) from exc


def _append_whole(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Append ``data`` in full to ``path`` (and force it to disk with ``fsync``), or leave the
    file as it was and raise."""
    fd = _open_for_append(path)
    try:
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            raise ConversationStorageError(path, exc) from exc
        _write_whole(fd, data, size, path, fsync=fsync)
    finally:
        os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) == b"\n"
    except OSError:
        return False


def _end_with_newline(path: Path) -> None:
    try:
        with open(path, "rb+") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":
                file.write(b"\n")
    except FileNotFoundError:
        return


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
