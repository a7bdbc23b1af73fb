"""Conversation state as message event sourcing, durable across SIGKILL.

On disk, per instance::

    base.jsonl     line 1: {"kind": "header", "version": 1, "foldedSeq": N}
                   then one message per line (the folded conversation)
    events.jsonl   one message event per line, appended as it happens during a Turn:
                   {"seq": n, "type": "append", "message": {...}}
                   {"seq": n, "type": "replace", "targetId": "...", "message": {...}}
                   {"seq": n, "type": "remove", "targetId": "..."}
                   {"seq": n, "type": "truncate"}

The messages of the conversation are ``base + fold(events)``. At the end of a Turn the events
are folded into a new base, written to a temporary file, fsynced and renamed over the old one
(atomic), and only then is ``events.jsonl`` emptied. The header's ``foldedSeq`` says which
events the base already holds, so a process killed between the rename and the truncation
re-applies nothing twice. A torn last line (a kill mid-write) is skipped with a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import structlog

from goondan.errors import StorageError
from tools_base import JsonObject, Message, MessageEvent

__all__ = [
    "ConversationStorageError",
    "ConversationStore",
    "ConversationUnreadable",
    "MessageEvent",
    "apply_events",
]

FORMAT_VERSION = 1
"""Version of the stored lines: the base header's ``version`` and each event's ``v``. Lines
without one are from version 1; a newer version than this runtime knows is refused."""


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
        try:
            _end_with_newline(self.events_path)  # the next event never glues onto a torn line
        except OSError as exc:
            raise ConversationStorageError(self.events_path, exc) from exc
        return self.messages

    def emit(self, event: MessageEvent) -> None:
        """Apply ``event`` and append it to ``events.jsonl`` before returning.

        Raises :class:`ConversationStorageError` if the line cannot be written whole; the file
        is then cut back to where it was and the event is not applied, so memory and disk
        agree and a later write (once there is room) starts on a clean line.
        """
        record = {"v": FORMAT_VERSION, **event.to_json(self._next_seq)}
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        _append_whole(self.events_path, line.encode("utf-8"))
        self._next_seq += 1
        self._events.append(event)
        self._messages = apply_events(self._messages, [event])

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
        """Write the current messages as the new base atomically, then empty the events.

        Raises :class:`ConversationStorageError` when the new base cannot be written; the old
        base and every event stay as they were (the fold is retried at the next Turn's end)
        and no temporary file is left behind.
        """
        if not self._events and self.base_path.exists():
            return
        folded_seq = self._next_seq - 1
        tmp = self.base_path.with_suffix(".jsonl.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as out:
                header = {"kind": "header", "version": FORMAT_VERSION, "foldedSeq": folded_seq}
                out.write(json.dumps(header) + "\n")
                for message in self._messages:
                    out.write(
                        json.dumps(message.to_json(), ensure_ascii=False, separators=(",", ":"))
                        + "\n"
                    )
                out.flush()
                if self._fsync:
                    os.fsync(out.fileno())
            os.replace(tmp, self.base_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            failed = Path(exc.filename) if isinstance(exc.filename, str) else tmp
            raise ConversationStorageError(failed, exc) from exc
        try:
            if self._fsync:
                _fsync_directory(self.directory)
            with open(self.events_path, "w", encoding="utf-8"):
                pass  # the base now holds every event up to folded_seq
        except OSError as exc:
            # The new base is in place and its foldedSeq marks the events it holds, so events
            # left in events.jsonl are skipped on load: nothing is applied twice.
            _log.warning(
                "events not emptied after a fold", file=str(self.events_path), error=str(exc)
            )
        self._base = list(self._messages)
        self._events = []
        self._folded_seq = folded_seq

    def _read_base(self) -> tuple[list[Message], int]:
        messages: list[Message] = []
        folded_seq = 0
        for data in self._read_lines(self.base_path):
            if data.get("kind") == "header":
                _check_version(data.get("version", 1), self.base_path)
                seq = data.get("foldedSeq")
                folded_seq = seq if isinstance(seq, int) else 0
                continue
            try:
                messages.append(Message.from_json(data))
            except (ValueError, KeyError) as exc:
                _log.warning("skipping malformed message", file=str(self.base_path), error=str(exc))
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
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise ConversationUnreadable(
            f"{path} is in conversation format {version}; this runtime reads up to "
            f"{FORMAT_VERSION}: upgrade goondan"
        )


def _append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` in full, or leave ``path`` as it was and raise."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            # Only now the directory is (re)made: a mkdir before every append costs a tenth
            # of a Turn's CPU, and the directory is nearly always there.
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no torn line for the next write to glue onto
            raise ConversationStorageError(path, exc) from exc
    finally:
        os.close(fd)


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
