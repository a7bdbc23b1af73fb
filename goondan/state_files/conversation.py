"""An instance's conversation on disk: ``base.jsonl`` + ``events.jsonl``, read and written.

Per instance, in its ``conversation/`` directory::

    base.jsonl     line 1: {"kind": "header", "version": 2, "foldedSeq": N}
                   then one message per line (the folded conversation), then any number of
                   appended segments: {"kind": "fold", "foldedSeq": M, "count": k} and k messages
    events.jsonl   one message event per line, appended as it happens during a Turn:
                   {"v":2,"seq":n,"type":"append","message":{...}}
                   {"v":2,"seq":n,"type":"replace","targetId":"...","message":{...}}
                   {"v":2,"seq":n,"type":"remove","targetId":"..."}
                   {"v":2,"seq":n,"type":"truncate"}

Messages and events are compact UTF-8 JSON, one a line.

The messages are ``base + fold(events)``, where events up to the base's ``foldedSeq`` (of its
header, or of its last whole segment) are already in the base. A segment announces how many
messages follow, so one cut short by a kill is recognised and ignored as a whole (its events
are still in ``events.jsonl``). A torn last line (a kill mid-write) is skipped.

The agent (its conversation store) is the only writer; the daemon, the CLI and the studio
read through :func:`read_messages` and :func:`interrupted_turn`. Messages are plain JSON
objects here: the agent turns them into its own types.

Durability. A new base replaces the old one through :func:`goondan.files.write_atomic`, like
every replaced file of the state directory. ``events.jsonl`` and appended segments are
append-only, and follow a rule of their own on purpose: an event is written whole (or the file
cut back) but not fsynced, because an fsync per event would cost most of a Turn and an event
in the kernel's cache survives the agent's SIGKILL; the Turn's fold fsyncs the segment it
appends, and :func:`sync_appended` forces the events to disk where the rest of the system
relies on them (a call parked for approval).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from goondan import reserve
from goondan.errors import newer_format
from goondan.files import sync_directory, write_atomic
from goondan.state_files import ConversationStorageError, ConversationUnreadable
from goondan.state_files.created import create_in_place

BASE_FILE = "base.jsonl"
EVENTS_FILE = "events.jsonl"
FORMAT_VERSION = 2
"""Version of the stored lines: the base header's ``version`` and each event's ``v``. Lines
without one are from version 1; a newer version than this runtime knows is refused. Version 2
added appended fold segments to the base; a version 1 base is read as before and rewritten at
its next fold before any segment is appended to it."""
_STRUCTURE = b'{"kind"'
"""How a base line that is not a message starts (the header, a fold segment's first line): a
message's first key is its ``id``."""
_BLOCK = 64 * 1024

T = TypeVar("T")
JsonObject = dict[str, Any]


@dataclass(slots=True)
class Base(Generic[T]):
    """What ``base.jsonl`` holds."""

    messages: list[T]
    folded_seq: int
    """The last event the base holds."""
    appendable: bool
    """Whether a segment may be appended: the file exists, is of this version, and ends with
    a complete line of a complete segment (else the next fold rewrites it)."""
    missing: bool = False
    """The file does not exist (a new conversation's, until its first fold)."""


def read_lines(path: Path, log: Any = None) -> Iterator[JsonObject]:
    """The JSON objects of ``path``, one a line; a torn or unparsable line is skipped (with a
    warning on ``log``, a structlog logger, when given). Nothing for a missing file; raises
    :class:`ConversationUnreadable` when it cannot be read (a directory in its place, no
    permission, an I/O error)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConversationUnreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            if log is not None:
                torn = number == len(lines)  # no trailing newline: the write was cut short
                log.warning(
                    "skipping torn line" if torn else "skipping unparsable line",
                    file=str(path),
                    line=number,
                )
            continue
        if isinstance(data, dict):
            yield data


def check_version(version: object, path: Path) -> None:
    """Raise :class:`ConversationUnreadable` for a line of a newer format than this one."""
    refusal = newer_format(path, "conversation", version, FORMAT_VERSION)
    if refusal is not None:
        raise ConversationUnreadable(refusal)


def read_base(
    path: Path, parse: Callable[[JsonObject], T], *, log: Any = None, strict: bool = True
) -> Base[T]:
    """The base's messages (each made by ``parse``, which raises ``ValueError``/``KeyError``
    for a line that is not a message: skipped) and ``foldedSeq``. ``strict`` refuses a newer
    format (:class:`ConversationUnreadable`) instead of showing what can be read."""
    reader = _BaseReader(path, parse, log, strict)
    for data in read_lines(path, log):
        reader.line(data)
    return reader.finish()


class _BaseReader(Generic[T]):
    """What :func:`read_base` has read so far, one line at a time: the messages, the header's
    fields, and the fold segment being read."""

    def __init__(
        self, path: Path, parse: Callable[[JsonObject], T], log: Any, strict: bool
    ) -> None:
        self.path, self.parse, self.log, self.strict = path, parse, log, strict
        self.messages: list[T] = []
        self.folded_seq = 0
        self.version: object = 0
        self.segment: list[T] | None = None
        """Messages of the segment being read, while fewer than its ``count``."""
        self.expected, self.segment_seq = 0, 0
        self.complete = True

    def line(self, data: JsonObject) -> None:
        kind = data.get("kind")
        if kind in ("header", "fold") and self.segment is not None:
            self.complete = False  # a segment cut short: ignored, its events are still there
            self.segment = None
        if kind == "header":
            self._header(data)
        elif kind == "fold":
            self._fold(data)
        else:
            self._message(data)

    def _header(self, data: JsonObject) -> None:
        self.version = data.get("version", 1)
        if self.strict:
            check_version(self.version, self.path)
        seq = data.get("foldedSeq")
        self.folded_seq = seq if isinstance(seq, int) else 0

    def _fold(self, data: JsonObject) -> None:
        count, seq = data.get("count"), data.get("foldedSeq")
        if not isinstance(count, int) or not isinstance(seq, int) or count < 0:
            self._warn("skipping malformed fold segment")
            self.complete = False
            return
        self.segment, self.expected, self.segment_seq = [], count, seq
        self._end_full_segment()

    def _message(self, data: JsonObject) -> None:
        try:
            message = self.parse(data)
        except (ValueError, KeyError) as exc:
            self._warn("skipping malformed message", error=str(exc))
            self.complete = False
            return
        if self.segment is None:
            self.messages.append(message)
            return
        self.segment.append(message)
        self._end_full_segment()

    def _end_full_segment(self) -> None:
        """A segment with all its ``count`` messages joins the base."""
        if self.segment is not None and len(self.segment) == self.expected:
            self.messages.extend(self.segment)
            self.folded_seq = max(self.folded_seq, self.segment_seq)
            self.segment = None

    def finish(self) -> Base[T]:
        if self.segment is not None:
            self._warn("ignoring a fold segment cut short", found=len(self.segment))
            self.complete = False
        if not self.messages and self.version == 0 and self.complete:
            # Nothing read: only a conversation that never folded has no base at all.
            missing = not os.path.lexists(self.path)
            return Base(self.messages, self.folded_seq, False, missing)
        appendable = (
            self.complete and self.version == FORMAT_VERSION and ends_with_newline(self.path)
        )
        return Base(self.messages, self.folded_seq, appendable)

    def _warn(self, event: str, **fields: object) -> None:
        if self.log is not None:
            self.log.warning(event, file=str(self.path), **fields)


def read_events(
    path: Path, folded_seq: int, *, log: Any = None, strict: bool = True
) -> Iterator[JsonObject]:
    """The event records of ``events.jsonl`` the base does not hold yet (``seq`` past
    ``folded_seq``), in order, as stored; ``strict`` refuses a newer format."""
    for data in read_lines(path, log):
        if strict:
            check_version(data.get("v", 1), path)
        seq = data.get("seq")
        if isinstance(seq, int) and seq > folded_seq:
            yield data


@functools.cache
def _line_encoder() -> Callable[[object], bytes]:
    """Compact UTF-8 JSON in C: every message of a Turn is encoded once or twice (its event,
    its fold), and ``json.dumps`` took a tenth of an agent's time on a new conversation.
    Imported here, as for metadata: the CLI reads these files and must start without it."""
    import msgspec

    return msgspec.json.Encoder().encode


def _json_line(value: object) -> bytes:
    """``value`` as one compact UTF-8 JSON line, without its newline. Non-ASCII stays as
    it is, a float that is not a number is ``null``; a value JSON cannot hold raises
    :class:`TypeError` (``UnicodeEncodeError`` for a lone surrogate), as ``json`` would."""
    return _line_encoder()(value)


def _marker(line: JsonObject) -> bytes:
    """A header or segment line, spaced as every base has written them."""
    return json.dumps(line).encode()


def event_bytes(record: JsonObject) -> bytes:
    """The ``events.jsonl`` line of ``record`` (``{seq, type, ...}``), stamped with the
    version."""
    return _json_line({"v": FORMAT_VERSION, **record}) + b"\n"


def segment_bytes(folded_seq: int, messages: Sequence[JsonObject]) -> bytes:
    """A fold segment: its first line, then ``messages``."""
    lines = [_marker({"kind": "fold", "foldedSeq": folded_seq, "count": len(messages)})]
    lines.extend(_json_line(message) for message in messages)
    return b"\n".join(lines) + b"\n"


def write_base(path: Path, folded_seq: int, messages: Iterable[JsonObject]) -> None:
    """Replace the base with ``messages`` holding events up to ``folded_seq``, atomically;
    raises :class:`ConversationStorageError` with the old base left whole."""
    header = {"kind": "header", "version": FORMAT_VERSION, "foldedSeq": folded_seq}
    lines = [_marker(header)]
    lines.extend(_json_line(message) for message in messages)
    try:
        reserve.retrying(path.parent, lambda: path.parent.mkdir(parents=True, exist_ok=True))
        write_atomic(path, b"\n".join(lines) + b"\n")
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc


def create_base(
    path: Path, folded_seq: int, messages: Sequence[JsonObject], *, fsync: bool = True
) -> bool:
    """Write the first base of a conversation: a header that holds nothing, then ``messages``
    as one fold segment up to ``folded_seq``. Returns ``False`` (nothing written) when a base
    exists already; raises :class:`ConversationStorageError` with no file left behind.

    There is no old base to keep whole, so the file is made in place (no temporary file,
    no rename, which cost a new instance's first fold more than its fsyncs): a write cut
    short leaves a header and a segment cut short, which a reader ignores as it ignores an
    appended one (its events are still in ``events.jsonl``), and the next fold rewrites it.
    With ``fsync``, the file and then its directory are forced to disk, as a rename would be.
    """
    header = _marker({"kind": "header", "version": FORMAT_VERSION, "foldedSeq": 0})
    data = header + b"\n" + segment_bytes(folded_seq, messages)
    try:
        return reserve.retrying(path.parent, lambda: create_in_place(path, data, fsync=fsync))
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc


def open_for_append(path: Path) -> int:
    """``path`` opened for appending (created, with its directory, if missing); raises
    :class:`ConversationStorageError`."""

    def opened() -> int:
        try:
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except FileNotFoundError:
            # Only now the directory is (re)made: a mkdir before every append costs a tenth
            # of a Turn's CPU, and the directory is nearly always there.
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    try:
        return reserve.retrying(path.parent, opened)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc


def write_whole(fd: int, data: bytes, size: int, path: Path, *, fsync: bool = False) -> None:
    """Append ``data`` in full to ``fd`` (whose file ``path`` is ``size`` bytes long) and, with
    ``fsync``, force it to disk; or cut the file back to ``size`` and raise
    :class:`ConversationStorageError`."""
    for attempt in (1, 2):
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
            if fsync:
                os.fsync(fd)
            return
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no torn line for the next write to glue onto
            # A full disk: the state directory's reserve is released, and one more try.
            if attempt == 1 and reserve.out_of_space(exc) and reserve.release(path.parent):
                continue
            raise ConversationStorageError(path, exc) from exc


def append_whole(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Append ``data`` in full to ``path`` (and force it to disk with ``fsync``), or leave the
    file as it was and raise :class:`ConversationStorageError`."""
    fd = open_for_append(path)
    try:
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            raise ConversationStorageError(path, exc) from exc
        write_whole(fd, data, size, path, fsync=fsync)
    finally:
        os.close(fd)


def sync_appended(path: Path) -> None:
    """Force what was appended to ``path`` (and its name) to stable storage; nothing for a
    missing file. Raises :class:`ConversationStorageError`."""
    if not path.exists():
        return
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_directory(path.parent)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc


def ends_with_newline(path: Path) -> bool:
    """Whether ``path`` is not empty and its last byte ends a line."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) == b"\n"
    except OSError:
        return False


def end_with_newline(path: Path) -> None:
    """End a torn last line of ``path`` so the next append never glues onto it; raises
    ``OSError`` (nothing for a missing file)."""
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


# -- readers of the daemon, the CLI and the studio ------------------------------------------------


def _is_message(data: JsonObject) -> bool:
    return isinstance(data.get("id"), str) and data.get("role") in (
        "system",
        "user",
        "assistant",
        "tool",
    )


def _message(data: JsonObject) -> JsonObject:
    if not _is_message(data):
        raise ValueError("not a message")
    return data


def read_messages(conversation_dir: Path) -> list[JsonObject]:
    """The messages of one conversation directory, in order, as persisted: for display, so
    it never writes and never raises (a file it cannot read shows nothing, a torn or
    malformed line is skipped, a newer format shows what can be read)."""
    try:
        base = read_base(conversation_dir / BASE_FILE, _message, strict=False)
        messages = base.messages
        for data in read_events(conversation_dir / EVENTS_FILE, base.folded_seq, strict=False):
            _apply_event(messages, data)
    except ConversationUnreadable:
        return []
    return messages


def _apply_event(messages: list[JsonObject], data: JsonObject) -> None:
    """``messages`` after one event record (one that does not fit them changes nothing)."""
    kind, target = data.get("type"), data.get("targetId")
    message = data.get("message")
    message = message if isinstance(message, dict) and _is_message(message) else None
    if kind == "append" and message is not None:
        messages.append(message)
    elif kind == "truncate":
        messages.clear()
    elif kind in ("replace", "remove") and isinstance(target, str):
        _change(messages, target, message, remove=kind == "remove")


def _change(
    messages: list[JsonObject], target: str, message: JsonObject | None, *, remove: bool
) -> None:
    """Remove the message ``target`` names, or replace it with ``message`` (if any)."""
    position = next((i for i, m in enumerate(messages) if m.get("id") == target), None)
    if position is None:
        return
    if remove:
        del messages[position]
    elif message is not None:
        messages[position] = message


def interrupted_turn(conversation_dir: Path) -> bool:
    """Whether the conversation directory holds events of a Turn that never ended (never
    folded into its base).

    A fold may leave ``events.jsonl`` as it is, so a non-empty events file is the normal state
    between Turns: a Turn was interrupted (the agent killed mid-Turn, or mid-fold) exactly
    when the events file holds an event past the base's ``foldedSeq``. Only the last line of
    ``events.jsonl`` and the last segment of ``base.jsonl`` are read (from the end), so a
    daemon with many long conversations looks at them all at start in little time.
    """
    last = _last_event_seq(conversation_dir / EVENTS_FILE)
    if last is None:
        return False
    folded = _folded_seq_from_end(conversation_dir / BASE_FILE)
    return folded is None or last > folded


def _lines_from_end(path: Path) -> Iterator[bytes]:
    """The lines of ``path``, last first; the first one is what follows the last newline
    (empty unless the last write was cut short). Nothing for a missing file; what was
    read before an I/O error."""
    try:
        with open(path, "rb") as file:
            position = file.seek(0, os.SEEK_END)
            rest = b""
            while position > 0:
                step = min(_BLOCK, position)
                position -= step
                file.seek(position)
                lines = (file.read(step) + rest).split(b"\n")
                rest = lines[0]
                yield from reversed(lines[1:])
            yield rest
    except OSError:  # missing, or not readable: nothing to tell from it
        return


def _last_event_seq(events: Path) -> int | None:
    """``seq`` of the last whole event in ``events.jsonl`` (events are numbered in order)."""
    for line in _lines_from_end(events):
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a torn last line: the agent skips it too
        if isinstance(data, dict) and isinstance(data.get("seq"), int):
            return int(data["seq"])
    return None


def _folded_seq_from_end(base: Path) -> int | None:
    """The base's ``foldedSeq``: of its last segment when that is whole, else of its header;
    ``None`` when the last segment was cut short (its fold never finished) or cannot be read."""
    messages = 0
    for index, line in enumerate(_lines_from_end(base)):
        if index == 0 and line:
            return None  # the last line is torn: a fold was cut short
        if not line.strip():
            continue
        if line.startswith(_STRUCTURE):
            structure, seq = _structure_seq(line, messages)
            if structure:
                return seq
        messages += 1
    return 0  # no header: nothing was ever folded


def _structure_seq(line: bytes, messages: int) -> tuple[bool, int | None]:
    """For a header or fold line, ``(True, foldedSeq)``: the header's, or the fold's when its
    segment holds ``messages`` (else ``None``, as for a line that does not parse); for a line
    that is a message after all, ``(False, None)``."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return True, None
    if not isinstance(data, dict):
        return False, None
    seq, kind = data.get("foldedSeq"), data.get("kind")
    if kind == "header":
        return True, seq if isinstance(seq, int) else 0
    if kind == "fold":
        whole = isinstance(seq, int) and data.get("count") == messages
        return True, seq if whole else None
    return False, None
