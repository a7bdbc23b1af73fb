"""``logs``: the runtime event log, filtered, and followed with ``-f`` (``--process`` reads a
process's own output files instead: :mod:`orchestrator.cli.logs`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ipc.runtime_events import AnyEvent, EventType, read_event
from orchestrator.cli.common import UsageError, fail, state_dir_of


def cmd_logs(args: argparse.Namespace) -> int:
    """Print the runtime event log, filtered; ``--follow`` keeps printing new events."""
    if args.process is not None:  # one process's output files instead of the event log
        from orchestrator.cli.logs import show

        if getattr(args, "api_url", None):
            raise UsageError("logs --process reads the state directory's files: not with --api-url")
        return show(args, state_dir_of(args))
    from orchestrator.cli.api_target import TargetError, remote_url
    from orchestrator.eventlog import (
        FILE_NAME,
        EventLogTooNew,
        parse_since,
    )

    try:
        since = parse_since(args.since) if args.since else None
    except ValueError:
        print(
            f"error: --since {args.since!r}: use 30s, 10m, 2h, 1d or an ISO timestamp",
            file=sys.stderr,
        )
        return 2
    try:
        if remote_url(args) is not None:
            return _follow_remote(args, since)
    except TargetError as exc:
        return fail(args, exc.exit_code, str(exc))
    state_dir = state_dir_of(args)
    path = state_dir / FILE_NAME
    if not path.exists() and not args.follow:
        print(f"no runtime events yet at {path}", file=sys.stderr)
        return 1
    try:
        return _print_logs(args, state_dir, path, since)
    except EventLogTooNew as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _follow_remote(args: argparse.Namespace, since: Any) -> int:
    """``logs -f`` of the daemon at ``--api-url``: its live events (its log file is its own)."""
    from orchestrator.cli.api_target import TargetError, daemon_api, open_events
    from orchestrator.cli.event_lines import event_line, line_width
    from orchestrator.eventlog import matches

    if not args.follow:
        raise UsageError(
            "logs reads the event log in the state directory; with --api-url only -f "
            "(the daemon's live events)"
        )
    api = daemon_api(args, _state_dir_unused)
    stream = open_events(args, api)
    # It has no past to print first: say the stream is open, so a silence means no events.
    print(f"following the events of the daemon at {api.where}", file=sys.stderr, flush=True)
    width = line_width()
    try:
        for data in stream:
            event = read_event(data)
            if event.type != EventType.TEXT_DELTA and matches(
                event, agent=args.agent, trace=args.trace, since=since
            ):
                line = (
                    json.dumps(event.to_builtins(), ensure_ascii=False)
                    if args.json
                    else event_line(event, width)
                )
                print(line, flush=True)
    except KeyboardInterrupt:
        return 0
    raise TargetError("no-answer", f"the daemon at {api.where} closed its event stream")


def _state_dir_unused() -> Path:
    raise AssertionError("no state directory with --api-url")


def _print_logs(args: argparse.Namespace, state_dir: Path, path: Path, since: Any) -> int:
    from orchestrator.http.client import DaemonApi

    printer = _Printer(args, since, _held_past(args))
    stream = DaemonApi(state_dir).events() if args.follow else None
    _show_rotated(printer, state_dir, path)
    offset = 0
    recent: list[str] = []
    while True:
        offset, recent = _read_from(printer, path, offset, recent)
        printer.release()
        if not args.follow:
            return 0
        if stream is not None:  # the daemon pushes what comes next
            if _relay(printer, stream, recent):
                return 0
            # The daemon stopped: tail the file from here, for whatever runs next.
            stream = None
            offset = path.stat().st_size if path.exists() else 0
        try:
            time.sleep(0.25)  # no daemon API to push events: tail the file
        except KeyboardInterrupt:
            return 0


def _held_past(args: argparse.Namespace) -> deque[str] | None:
    """Where the past is held back to its last --lines events (-f: the last few, as
    `tail -f`); ``None``: all of it, printed as read."""
    from orchestrator.cli.logs import ALL_LINES, FOLLOW_LINES

    lines = args.lines if args.lines is not None else (FOLLOW_LINES if args.follow else ALL_LINES)
    return deque(maxlen=lines) if lines != ALL_LINES else None


def _show_rotated(printer: _Printer, state_dir: Path, path: Path) -> None:
    """Show the events of the log's rotated files (all but ``path``)."""
    from orchestrator.eventlog import log_files, read_typed

    for rotated in [f for f in log_files(state_dir) if f != path]:
        for _, event in read_typed(rotated):
            printer.show(event)


@dataclass
class _Printer:
    """Prints the events that pass ``logs``' filters, holding the past back to its last lines
    (``past``) until :meth:`release`."""

    args: argparse.Namespace
    since: Any
    past: deque[str] | None
    width: int | None = None
    """How long a printed line may be (found when the first one is printed)."""

    def show(self, event: AnyEvent) -> None:
        """Print ``event`` (or hold it back with the past) if it passes the filters."""
        from orchestrator.cli.event_lines import event_line, line_width
        from orchestrator.eventlog import matches

        if event.type == EventType.TEXT_DELTA:
            return  # streamed text is not kept in the log: -f shows what plain logs shows
        args = self.args
        if matches(event, agent=args.agent, trace=args.trace, since=self.since):
            data = event.to_builtins()
            if args.json:
                line = json.dumps(data, ensure_ascii=False)
            else:
                if self.width is None:
                    self.width = line_width()
                line = event_line(event, self.width)
            if self.past is not None:
                self.past.append(line)
            else:
                print(line, flush=True)

    def release(self) -> None:
        """The past is read: print its last lines; from now on, whatever comes."""
        if self.past is None:
            return
        for line in self.past:
            print(line)
        sys.stdout.flush()
        self.past = None


def _read_from(
    printer: _Printer, path: Path, offset: int, recent: list[str]
) -> tuple[int, list[str]]:
    """Show the events of the log file ``path`` from ``offset``: the offset reached, and the
    last events read (to tell them from the same ones pushed by the daemon)."""
    from orchestrator.eventlog import read_typed

    if path.exists() and path.stat().st_size < offset:
        offset = 0  # it rotated: the new file starts from the top
    for end, event in read_typed(path, offset):
        offset = end
        printer.show(event)
        seen = json.dumps(event.to_builtins(), sort_keys=True, default=str)
        recent = [*recent[-999:], seen]
    return offset, recent


def _relay(printer: _Printer, stream: Iterable[Any], recent: list[str]) -> bool:
    """Show the events the daemon pushes, but those already read, until it stops; ``True``
    when the user stopped first (Ctrl-C)."""
    try:
        for data in stream:
            if json.dumps(data, sort_keys=True, default=str) not in recent:
                printer.show(read_event(data))
    except KeyboardInterrupt:
        return True
    return False
