"""``logs --process NAME``: the last lines of one process's stdout and stderr files, and ``-f``.

The files are those :mod:`orchestrator.process_logs` writes; every stored line starts with the
time it arrived, so ``--stream both`` prints the two streams merged in time order.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from orchestrator.process_logs import LOGS_DIR, STREAMS, file_name

FOLLOW_POLL_SECONDS = 0.25
"""How often ``-f`` looks for new lines in the files."""
KEPT_READ = 99
"""Rotated files a reader looks for (a daemon may keep more than the default)."""
_BLOCK = 64 * 1024


def known_processes(state_dir: Path) -> list[str]:
    """Every process with a log file in ``state_dir``, sorted (the Orchestrator first)."""
    names = set()
    for path in (state_dir / LOGS_DIR).glob("*.log"):
        for stream in STREAMS:
            suffix = f".{stream}.log"
            if path.name.endswith(suffix):
                names.add(path.name[: -len(suffix)])
    return sorted(names, key=lambda name: (name != "orchestrator", name))


def resolve(name: str, known: Iterable[str]) -> str | None:
    """``name`` as a known process: itself, or ``agent:NAME`` / ``connector:NAME`` when only
    one of them is known."""
    known = list(known)
    if name in known:
        return name
    matches = [process for process in known if process.partition(":")[2] == name]
    return matches[0] if len(matches) == 1 else None


def stream_files(state_dir: Path, process: str, stream: str) -> list[Path]:
    """The files of ``process``'s ``stream`` that exist, oldest first."""
    current = state_dir / LOGS_DIR / file_name(process, stream)
    rotated = [current.with_name(f"{current.name}.{n}") for n in range(KEPT_READ, 0, -1)]
    return [path for path in [*rotated, current] if path.exists()]


def last_lines(paths: list[Path], count: int) -> list[bytes]:
    """The last ``count`` complete lines across ``paths`` (oldest first), read from the end
    of the newest file backwards: a long log costs only what is printed."""
    found: list[bytes] = []
    for path in reversed(paths):
        lines = _tail_lines(path, count - len(found))
        if lines is None:  # rotated away while reading
            continue
        found = lines[-(count - len(found)) :] + found if count > len(found) else found
        if len(found) >= count:
            break
    return found[-count:] if count > 0 else []


def _tail_lines(path: Path, wanted: int) -> list[bytes] | None:
    """At least ``wanted`` complete lines from the end of ``path`` when it has them (all it
    has otherwise), each with its newline; ``None`` when the file is gone."""
    try:
        with open(path, "rb") as source:
            end = source.seek(0, os.SEEK_END)
            tail = b""
            position = end
            while position > 0 and tail.count(b"\n") <= wanted:
                step = min(_BLOCK, position)
                position -= step
                source.seek(position)
                tail = source.read(step) + tail
    except FileNotFoundError:
        return None
    lines = tail.split(b"\n")
    if position > 0:
        lines = lines[1:]  # the first one is cut
    return [line + b"\n" for line in lines if line]


def _split(line: bytes) -> tuple[str, str]:
    text = line.decode("utf-8", errors="replace").rstrip("\n")
    when, _, rest = text.partition(" ")
    return when, rest


def _print(process: str, stream: str, line: bytes, args: argparse.Namespace) -> None:
    when, text = _split(line)
    if args.json:
        print(
            json.dumps({"process": process, "stream": stream, "time": when, "line": text}),
            flush=True,
        )
    elif args.stream == "both":
        print(f"{when} {stream:<6} {text}", flush=True)
    else:
        print(f"{when} {text}", flush=True)


def show(args: argparse.Namespace, state_dir: Path) -> int:
    """Print the last ``--lines`` of ``--process``'s ``--stream``; ``-f`` keeps printing."""
    known = known_processes(state_dir)
    process = resolve(args.process, known)
    if process is None:
        where = state_dir / LOGS_DIR
        listed = ", ".join(known) if known else f"none yet (no files in {where})"
        print(f"error: no process {args.process!r}; known: {listed}", file=sys.stderr)
        return 1
    streams = list(STREAMS) if args.stream == "both" else [args.stream]
    count = PROCESS_LINES if args.lines is None else args.lines
    if count == ALL_LINES:
        count = sys.maxsize
    for _, _, stream, line in _last_merged(state_dir, process, streams, count):
        _print(process, stream, line, args)
    if not args.follow:
        return 0
    return _follow(args, state_dir, process, streams)


def _last_merged(
    state_dir: Path, process: str, streams: list[str], count: int
) -> list[tuple[str, str, str, bytes]]:
    """The last ``count`` lines of ``streams``, as ``(time, text, stream, line)`` in time
    order."""
    tails = {
        stream: [
            (*_split(line), stream, line)
            for line in last_lines(stream_files(state_dir, process, stream), count)
        ]
        for stream in streams
    }
    # Each stream's lines are in time order already: merge them on their stamps.
    merged = list(heapq.merge(*tails.values(), key=lambda row: row[0]))
    return merged[-count:] if count > 0 else []


def _follow(args: argparse.Namespace, state_dir: Path, process: str, streams: list[str]) -> int:
    paths = {stream: state_dir / LOGS_DIR / file_name(process, stream) for stream in streams}
    offsets = {stream: _size(path) for stream, path in paths.items()}
    pending = dict.fromkeys(streams, b"")
    try:
        while True:
            batch: list[tuple[str, str, bytes]] = []
            for stream, path in paths.items():
                size = _size(path)
                if size < offsets[stream]:
                    offsets[stream], pending[stream] = 0, b""  # rotated: a new file
                if size == offsets[stream]:
                    continue
                with open(path, "rb") as source:
                    source.seek(offsets[stream])
                    data = pending[stream] + source.read(size - offsets[stream])
                offsets[stream] = size
                *lines, pending[stream] = data.split(b"\n")
                batch += [(_split(line)[0], stream, line + b"\n") for line in lines]
            for _, stream, line in sorted(batch, key=lambda row: row[0]):
                _print(process, stream, line, args)
            time.sleep(FOLLOW_POLL_SECONDS)  # files have no push: look again shortly
    except KeyboardInterrupt:
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


PROCESS_LINES = 200
"""Lines of ``--process`` shown without ``--lines``."""
FOLLOW_LINES = 10
"""Events of the past ``logs -f`` shows without ``--lines`` before the new ones (as ``tail -f``)."""
ALL_LINES = -1
"""``--lines all``: the whole history."""


def line_count(text: str) -> int:
    """A ``--lines`` value: a count of 0 or more, or ``all`` (:data:`ALL_LINES`)."""
    if text.strip().lower() == "all":
        return ALL_LINES
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of lines (0 or more), or all")
    return count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--process``, ``--stream`` and ``--lines`` of ``logs``."""
    group = parser.add_argument_group("one process's output (logs/ in the state directory)")
    group.add_argument(
        "--process",
        "-p",
        metavar="NAME",
        help="print this process's stdout/stderr instead: orchestrator, agent:NAME, "
        "connector:NAME (or NAME alone when it is one of them)",
    )
    group.add_argument(
        "--stream",
        choices=("stdout", "stderr", "both"),
        default="both",
        help="which stream of --process (default: both, merged by time)",
    )
    parser.add_argument(
        "--lines",
        "-n",
        "-l",
        type=line_count,
        default=None,
        metavar="N",
        help="the last N events (or lines of --process) only, then -f follows; `all` for "
        f"every one (default: every event, {FOLLOW_LINES} with -f; {PROCESS_LINES} lines of "
        "--process)",
    )
