"""Which conversations on disk hold a Turn that was cut short, read from the ends of their files.

An agent appends a Turn's message events to ``events.jsonl`` as they happen and folds them into
``base.jsonl`` when the Turn ends, however it ends (format in the agent's conversation store).
The fold records the last event it holds (``foldedSeq``, in the base's header or in the
appended segment's first line) and may leave ``events.jsonl`` as it is: a non-empty events file
is the normal state between Turns. A Turn was interrupted (the agent killed mid-Turn, or mid-fold)
exactly when the events file holds an event past the base's ``foldedSeq``; the agent then
resumes from ``base + events`` and logs so itself.

Only the last line of ``events.jsonl`` and the last segment of ``base.jsonl`` are read (from the
end), so a daemon with many long conversations looks at them all at start in little time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

_BLOCK = 64 * 1024
_STRUCTURE = b'{"kind"'
"""How a base line that is not a message starts (the header, a fold segment's first line): a
message's first key is its ``id``."""


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


def _folded_seq(base: Path) -> int | None:
    """The base's ``foldedSeq``: of its last segment when that is whole, else of its header;
    ``None`` when the last segment was cut short (its fold never finished) or cannot be read."""
    messages = 0
    for index, line in enumerate(_lines_from_end(base)):
        if index == 0 and line:
            return None  # the last line is torn: a fold was cut short
        if not line.strip():
            continue
        if not line.startswith(_STRUCTURE):
            messages += 1
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            return None
        seq = data.get("foldedSeq") if isinstance(data, dict) else None
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind == "header":
            return seq if isinstance(seq, int) else 0
        if kind == "fold":
            whole = isinstance(seq, int) and data.get("count") == messages
            return seq if whole else None
        messages += 1
    return 0  # no header: nothing was ever folded


def interrupted_turn(conversation: Path) -> bool:
    """Whether the conversation directory holds events of a Turn that never ended (never
    folded into its base)."""
    last = _last_event_seq(conversation / "events.jsonl")
    if last is None:
        return False
    folded = _folded_seq(conversation / "base.jsonl")
    return folded is None or last > folded
