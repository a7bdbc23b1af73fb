"""``python -m orchestrator``: the command line.

One module per command group (:mod:`.run`, :mod:`.operate`, :mod:`.approvals`,
:mod:`.events`, :mod:`.validate`, :mod:`.project`, :mod:`.studio`), the argument parser in
:mod:`.parser`, what they share in :mod:`.common`; here, :func:`main`.

Each command imports what it needs when it runs: ``status`` and the other commands that only
ask the daemon start without asyncio, the bundle or the HTTP server stack, so an operator
waits for little more than the interpreter.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from orchestrator.cli.parser import build_parser, command_in


def version_text() -> str:
    """``goondan-py X.Y.Z``."""
    import importlib.metadata

    try:
        return importlib.metadata.version("goondan-py")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    if "_ARGCOMPLETE" in os.environ:  # the shell completes a word: answer and exit
        from orchestrator.cli.common import state_dir_of
        from orchestrator.cli.completion import command_completed, complete

        complete(build_parser(command_completed()), state_dir_of)
    # Building every command's arguments is a good part of a short command's time: build
    # those of the command given (none for --help; all of them for anything unexpected).
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_in(words))
    args = parser.parse_args(words)  # --help prints and exits here, having imported nothing more
    if args.version:
        import json

        version = version_text()
        print(json.dumps({"version": version}) if args.json else f"goondan-py {version}")
        return 0
    from goondan.errors import ExitCode
    from orchestrator.cli.common import DaemonFailed, UsageError, fail

    if args.command is None:
        parser.print_usage(sys.stderr)
        print("error: name a command (see --help)", file=sys.stderr)
        return int(ExitCode.USAGE)
    if getattr(args, "no_color", False):
        os.environ["NO_COLOR"] = "1"  # the convention; agent processes inherit it
    if getattr(args, "allow_outside_bundle", False):
        from bundle.loading import ALLOW_OUTSIDE_BUNDLE_ENV

        # Through the environment, so the validators `run --watch` starts agree.
        os.environ[ALLOW_OUTSIDE_BUNDLE_ENV] = "1"
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        code = command(args)
        sys.stdout.flush()  # a reader that left shows here, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not _stdout_gone():
            return _internal_error(args, exc)
        return _reader_gone()
    except DaemonFailed as failed:
        return failed.exit_code
    except UsageError as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        return _internal_error(args, exc)


def _internal_error(args: argparse.Namespace, exc: Exception) -> int:
    """A bug of ours: one line, the traceback only when asked."""
    if args.debug:
        import traceback

        traceback.print_exception(exc)
    print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
    return 1


def _stdout_gone() -> bool:
    """Whether standard output is a pipe its reader closed (``logs | head`` once head has its
    lines), rather than a socket to the daemon breaking."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(flags & select.POLLERR for _, flags in poller.poll(0))
    except (OSError, ValueError):  # no descriptor: a stand-in stream
        return False


def _reader_gone() -> int:
    """Stop quietly, as ``git log | head`` does: no message, exit 141 (128 + SIGPIPE)."""
    import signal

    # The interpreter flushes stdout once more as it exits; what is left goes nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + int(signal.SIGPIPE)
